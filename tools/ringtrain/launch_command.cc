// `ringtrain launch`: a local cluster of N `ringtraind` on loopback for trying the product by
// hand (tools/ringtrain/local_cluster.h). Runs until Ctrl-C or SIGTERM, then stops every daemon.
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "elastic/membership/local_etcd.h"
#include "tools/ringtrain/commands.h"
#include "tools/ringtrain/local_cluster.h"

namespace rt::cli {
namespace {

struct LaunchOptions {
  int nodes = 3;
  int slots = 1;
  std::string dir;
  int base_port = 0;
  int timeout_s = 60;
  // Seconds before a daemon that failed (killed, crashed, exit status not 0) is started again,
  // as systemd's Restart=on-failure with RestartSec= would; < 0: never.
  int restart_s = 2;
  // Keep the membership in an etcd started for the cluster (elastic/membership/local_etcd.h).
  bool etcd = false;
  // Every daemon runs an embedded chunk server; together they form one store.
  bool store = false;
  // Every link over mutual TLS (files made in the state folder's tls/).
  bool tls = false;
};

// A daemon that ended on its own, and when launch starts it again (if it does).
struct EndedDaemon {
  int id = 0;
  std::chrono::steady_clock::time_point restart_at;
};

// Reports the daemons that ended since the last call and restarts the failed ones whose delay
// has passed (those that exited 0, after a SIGTERM of their own, stay down).
void SuperviseDaemons(LocalCluster& cluster, const LaunchOptions& opt,
                      std::vector<EndedDaemon>& pending) {
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [id, exit] : cluster.TakeEnded()) {
    if (exit.ok() || opt.restart_s < 0) {
      std::printf("ringtrain launch: node %d's daemon ended (%s); it stays down\n", id,
                  exit.Describe().c_str());
    } else {
      std::printf("ringtrain launch: node %d's daemon ended (%s); starting it again in %d s\n", id,
                  exit.Describe().c_str(), opt.restart_s);
      pending.push_back({id, now + std::chrono::seconds(opt.restart_s)});
    }
    std::fflush(stdout);
  }
  for (auto it = pending.begin(); it != pending.end();) {
    if (it->restart_at > now) {
      ++it;
      continue;
    }
    const Status started = cluster.StartNode(it->id);
    if (started.ok())
      std::printf("ringtrain launch: node %d's daemon started again (pid %d)\n", it->id,
                  static_cast<int>(cluster.DaemonPid(it->id)));
    else
      std::printf("ringtrain launch: node %d's daemon did not start again: %s\n", it->id,
                  started.ToString().c_str());
    std::fflush(stdout);
    it = pending.erase(it);
  }
}

// The member ids of a status, "1,2,3".
std::string MemberList(const nlohmann::json& status) {
  std::string ids;
  for (const auto& m : status["view"]["members"]) ids += (ids.empty() ? "" : ",") + m["id"].dump();
  return ids;
}

Status RunLaunch(const LaunchOptions& opt) {
  InstallStopSignalHandlers();
  LocalClusterOptions options;
  options.nodes = opt.nodes;
  options.slots = opt.slots;
  options.base_port = static_cast<uint16_t>(opt.base_port);
  options.dir = opt.dir;
  options.store = opt.store;
  options.tls = opt.tls;
  bool temporary = false;
  if (options.dir.empty()) {
    std::string pattern = (std::filesystem::temp_directory_path() / "ringtrain-launch-XXXXXX");
    if (::mkdtemp(pattern.data()) == nullptr) return ErrnoStatus(errno, "mkdtemp " + pattern);
    options.dir = pattern;
    temporary = true;
  }
  ASSIGN_OR_RETURN(options.daemon_binary, FindTool("ringtraind"));
  std::unique_ptr<elastic::LocalEtcd> etcd;  // outlives the cluster: stopped after the daemons
  if (opt.etcd) {
    ASSIGN_OR_RETURN(etcd, elastic::LocalEtcd::Start(options.dir + "/etcd"));
    options.etcd = etcd->endpoint();
    std::printf("ringtrain launch: membership in etcd at %s (log %s/etcd/etcd.log)\n",
                options.etcd.c_str(), options.dir.c_str());
  }
  ASSIGN_OR_RETURN(const std::string ringctl, FindTool("ringctl"));

  const auto started = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(options));
  Result<nlohmann::json> view = cluster->WaitFor(
      "a view of " + std::to_string(opt.nodes) + " members",
      [&](const nlohmann::json& s) {
        return s["view"]["members"].size() == static_cast<size_t>(opt.nodes);
      },
      Deadline::AfterMs(opt.timeout_s * 1000LL), StopRequested);
  Status status = view.ok() ? Status() : view.status();
  if (status.ok()) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf(
        "ringtrain launch: %d daemons (%d slot(s) each) formed view generation %s "
        "(members %s) in %.1f s; state in %s\n",
        opt.nodes, opt.slots, (*view)["view"]["generation"].dump().c_str(),
        MemberList(*view).c_str(), seconds, options.dir.c_str());
    for (int id : cluster->RunningNodes())
      std::printf("  node %d  pid %d  %s  log %s\n", id, static_cast<int>(cluster->DaemonPid(id)),
                  cluster->Address(id).c_str(), cluster->LogPath(id).c_str());
    if (opt.store)
      std::printf(
          "chunk store: every daemon serves one (node 1's at %s, the metadata node); a job "
          "names it as ckpt.dir = \"ringfs:///ckpt\", tools as ringfs://%s/ckpt\n",
          cluster->StoreAddress(1).c_str(), cluster->StoreAddress(1).c_str());
    std::printf(
        "talk to it:  %s --daemon %s --secret-file %s%s status\n"
        "submit a job: ... submit JOB.toml (see docs/daemon.md)\n"
        "Ctrl-C or SIGTERM stops every daemon.\n%s",
        ringctl.c_str(), cluster->Address(1).c_str(), cluster->SecretFile().c_str(),
        opt.tls ? (" --tls-dir " + cluster->TlsDir()).c_str() : "",
        opt.restart_s < 0 ? ""
                          : ("A daemon that fails (kill -9 it to try) is started again after " +
                             std::to_string(opt.restart_s) + " s.\n")
                                .c_str());
    std::fflush(stdout);
    std::vector<EndedDaemon> pending;
    while (!StopRequested()) {
      SuperviseDaemons(*cluster, opt, pending);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::printf("ringtrain launch: stopping %zu daemons\n", cluster->RunningNodes().size());
    std::fflush(stdout);
  }
  Status stopped = cluster->Stop(Deadline::AfterMs(30'000));
  etcd.reset();
  if (stopped.ok()) std::printf("ringtrain launch: every daemon stopped\n");
  if (temporary && status.ok() && stopped.ok()) std::filesystem::remove_all(options.dir);
  return status.ok() ? stopped : status;
}

}  // namespace

void AddLaunchCommand(CLI::App& app, Action* action) {
  CLI::App* launch = app.add_subcommand(
      "launch", "Start a local cluster of ringtraind daemons on loopback until Ctrl-C");
  auto o = std::make_shared<LaunchOptions>();
  launch->add_option("--nodes", o->nodes, "daemons (node ids 1..N)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  launch->add_option("--slots", o->slots, "worker slots (CPU ranks) per daemon")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  launch->add_option("--dir", o->dir,
                     "state folder (node.toml files, secret, logs); default: a new temporary "
                     "folder, removed after a clean stop");
  launch
      ->add_option("--base-port", o->base_port,
                   "node i listens on 127.0.0.1:(P+i-1); default: free ports")
      ->check(CLI::Range(1, 65535));
  launch->add_option("--timeout-s", o->timeout_s, "how long to wait for the view to form")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  launch
      ->add_option("--restart-s", o->restart_s,
                   "a daemon that fails (kill -9, crash) is started again after this many "
                   "seconds, as systemd's Restart=on-failure would; -1: never")
      ->check(CLI::Range(-1, 3600))
      ->capture_default_str();
  launch->add_flag("--etcd", o->etcd,
                   "keep the membership in an etcd started for the cluster (Debian's "
                   "etcd-server) instead of the ring's own protocol");
  launch->add_flag("--store", o->store,
                   "every daemon runs an embedded chunk server, together one replicated store "
                   "(a job's ckpt.dir = \"ringfs:///PATH\"); ports after the control ports");
  launch->add_flag("--tls", o->tls,
                   "every link (control, membership, store, memory tier) over mutual TLS, with "
                   "a CA and certificates made in the state folder's tls/ (ringctl init-tls)");
  launch->callback([=] { *action = [=] { return RunLaunch(*o); }; });
}

}  // namespace rt::cli
