// ringfsd: a chunk-store node. `ringfsd --state DIR` runs the embedded default (one local node,
// replication factor 1, on 127.0.0.1:7600); `ringfsd --config node.toml` joins a static cluster.
// With a cluster secret (`[auth] secret_file` or --secret-file) every connection it accepts or
// opens is authenticated; without one it serves loopback only.
// Stops cleanly on SIGINT or SIGTERM.
#include <malloc.h>
#include <signal.h>

#include <cstdio>

#include <CLI/CLI.hpp>

#include "base/log.h"
#include "base/version.h"
#include "iofs/server.h"
#include "tools/tls_flags.h"

int main(int argc, char** argv) {
  // Chunk-sized buffers (4 MiB) come and go with every request: keep them in the heap rather than
  // mmap and munmap each one (the page faults and the kernel's zeroing cost more than the copy).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  CLI::App app{"ringfsd: the ringtrain chunk-store node"};
  app.set_version_flag("--version", std::string(rt::kRingtrainVersion));
  std::string config, state, level = "info", host = "127.0.0.1";
  int port = rt::iofs::kDefaultPort;
  app.add_option("--config", config, "node.toml of a static cluster");
  app.add_option("--state", state, "embedded default: data folder of a single local node (RF 1)");
  app.add_option("--port", port, "embedded default: port to listen on (0 picks one)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--host", host, "embedded default: address to bind");
  app.add_option("--log-level", level, "trace, debug, info, warn, error");
  std::string secret_file;
  app.add_option(
      "--secret-file", secret_file,
      "the cluster secret (mode 0600; ringctl init-secret); replaces [auth] secret_file");
  rt::tools::TlsFlags tls;
  rt::tools::AddTlsFlags(&app, &tls, "node-0");  // replaces [tls]
  int64_t collect_ms = 0;
  app.add_option("--collect-ms", collect_ms,
                 "period of the orphan collector (default 10000, or timing.collect_ms)")
      ->check(CLI::Range(int64_t{10}, int64_t{86400000}));
  std::string read_path = "pool-direct";
  app.add_option("--read-path", read_path,
                 "shared-memory reads: pool-direct (a pool thread reads into the client's memory), "
                 "io-thread (the I/O thread's io_uring), pool-engine (through the engine's ring)")
      ->check(CLI::IsMember({"pool-direct", "io-thread", "pool-engine"}));
  CLI11_PARSE(app, argc, argv);
  if (rt::Status s = rt::InitLogging(level, "ringfsd"); !s.ok()) {
    std::fprintf(stderr, "ringfsd: %s\n", s.ToString().c_str());
    return 2;
  }
  rt::Result<rt::iofs::ServerOptions> options =
      rt::InvalidArgument("give --config node.toml or --state DIR");
  if (!config.empty() && !state.empty()) {
    options = rt::InvalidArgument("give either --config or --state, not both");
  } else if (!config.empty()) {
    options = rt::iofs::LoadServerOptions(config);
  } else if (!state.empty()) {
    options = rt::iofs::EmbeddedServerOptions(state, static_cast<uint16_t>(port));
    options->listen_host = host;
    options->nodes[0].host = host;
  }
  if (!options.ok()) {
    std::fprintf(stderr, "ringfsd: %s\n", options.status().ToString().c_str());
    return 2;
  }
  if (collect_ms > 0) options->collect_ms = collect_ms;
  if (!secret_file.empty()) options->secret_file = secret_file;
  if (!tls.Files().empty()) options->tls = tls.Files();
  using ReadPath = rt::iofs::ServerOptions::ReadPath;
  options->read_path = read_path == "io-thread"     ? ReadPath::kIoThread
                       : read_path == "pool-engine" ? ReadPath::kPoolEngine
                                                    : ReadPath::kPoolDirect;
  // Signals are taken synchronously by this thread; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  auto server = rt::iofs::Server::Start(*options);
  if (!server.ok()) {
    std::fprintf(stderr, "ringfsd: %s\n", server.status().ToString().c_str());
    return 1;
  }
  std::printf("ringfsd listening on port %u\n", static_cast<unsigned>((*server)->port()));
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  LOG_INFO("signal {}: shutting down", sig);
  rt::Status s = (*server)->Shutdown(rt::Deadline::AfterMs(10000));
  if (!s.ok()) LOG_WARN("shutdown: {}", s.ToString());
  return 0;
}
