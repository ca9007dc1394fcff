// ringtraind: the node daemon (docs/daemon.md). `ringtraind --config node.toml` runs a node until
// SIGTERM or SIGINT, then leaves the cluster, stops its workers and exits. `ringtraind worker
// ...` is the worker mode the daemon starts its workers in (not for people).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <CLI/CLI.hpp>

#include "base/log.h"
#include "base/version.h"
#include "daemon/daemon.h"
#include "daemon/worker.h"
#include "kernels/gemm_kernels.h"

namespace {

std::string SelfExecutable(const char* argv0) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(argv0) : p.string();
}

int RunDaemon(const std::string& config_path, const std::string& executable) {
  rt::Result<rt::daemon::NodeConfig> config = rt::daemon::LoadNodeConfig(config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "ringtraind: %s\n", config.status().ToString().c_str());
    return 2;
  }
  rt::ConfigSchema schema;
  rt::daemon::NodeConfig shown = *config;
  rt::daemon::BindNodeKeys(&shown, &schema);
  LOG_INFO("effective config:\n{}", schema.Effective());
  // Signals are taken synchronously by this thread; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  rt::daemon::DaemonOptions options;
  options.config = *config;
  options.executable = executable;
  auto daemon = rt::daemon::Daemon::Start(std::move(options));
  if (!daemon.ok()) {
    std::fprintf(stderr, "ringtraind: %s\n", daemon.status().ToString().c_str());
    return 1;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  LOG_INFO("signal {}: leaving the cluster and stopping", sig);
  rt::Status s = (*daemon)->Stop(/*leave=*/true, rt::Deadline::AfterMs(20'000));
  if (!s.ok()) LOG_WARN("stop: {}", s.ToString());
  return s.ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // First, before OpenBLAS is used and any thread starts: may re-execute this binary with the
  // chosen kernel set (kernels/gemm_kernels.h). The daemon's workers inherit it through the
  // environment, so they compute with the same kernels as `ringtrain train` on this machine.
  if (rt::Status s = rt::SelectGemmKernels(argv); !s.ok()) {
    std::fprintf(stderr, "ringtraind: error: %s\n", s.ToString().c_str());
    return 1;
  }
  CLI::App app{"ringtraind: the ringtrain node daemon"};
  app.set_version_flag("--version", std::string(rt::kRingtrainVersion));
  std::string config, level = "info";
  app.add_option("--config", config, "node.toml");
  app.add_option("--log-level", level, "trace, debug, info, warn, error");
  rt::daemon::WorkerOptions worker;
  CLI::App* w = app.add_subcommand("worker", "");  // hidden: started by the daemon
  w->group("");
  w->add_option("--daemon", worker.daemon)->required();
  w->add_option("--generation", worker.generation)->required();
  w->add_option("--secret-file", worker.secret_file);
  w->add_option("--tls-cert", worker.tls.cert_file);
  w->add_option("--tls-key", worker.tls.key_file);
  w->add_option("--tls-ca", worker.tls.ca_file);
  w->add_option("--config", worker.train.config)->required();
  w->add_option("--layout", worker.train.layout)->required();
  w->add_option("--ranks", worker.train.ranks)->required();
  w->add_option("--rank", worker.train.rank)->required();
  w->add_option("--gpu", worker.train.gpu);  // the slot: its GPU with train.device = "cuda"
  w->add_option("--store", worker.train.store)->required();
  w->add_option("--job", worker.train.job)->required();
  w->add_option("--log-level", level);
  CLI11_PARSE(app, argc, argv);
  if (rt::Status s = rt::InitLogging(level, *w ? "worker" : "ringtraind"); !s.ok()) {
    std::fprintf(stderr, "ringtraind: %s\n", s.ToString().c_str());
    return 2;
  }
  rt::LogGemmKernels();
  const std::string executable = SelfExecutable(argv[0]);
  if (*w) {
    rt::Status s = rt::daemon::RunWorker(worker, executable);
    if (!s.ok()) {
      LOG_ERROR("worker rank {}: {}", worker.train.rank, s.ToString());
      return s.code() == rt::StatusCode::kPeerFailed ? rt::daemon::kWorkerPeerLostExit : 1;
    }
    return 0;
  }
  if (config.empty()) {
    std::fprintf(stderr, "ringtraind: give --config node.toml\n");
    return 2;
  }
  return RunDaemon(config, executable);
}
