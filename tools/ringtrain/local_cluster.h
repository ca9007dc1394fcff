// A local cluster of `ringtraind` daemons on loopback, as `ringtrain launch` and `ringtrain demo`
// start it: node.toml files and a cluster secret under one state folder, one daemon per node
// (node 1 starts the cluster, the others join through it), waits on the cluster's status with
// deadlines, kill -9 and restart of one node, and a stop that leaves no process behind.
//
// Threading: a LocalCluster is used from the thread that started it (the daemons' parent-death
// signal is tied to that thread: if it dies, the daemons and, through theirs, the workers die).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "base/deadline.h"
#include "base/net/auth.h"
#include "base/process.h"
#include "base/status.h"

namespace rt::cli {

// What to start.
struct LocalClusterOptions {
  int nodes = 3;  // daemons, node ids 1..nodes; default 3
  int slots = 1;  // worker slots per daemon (CPU ranks); default 1
  // State folder (created): `secret`, and per node `node<ID>/` with node.toml, the daemon's state
  // and `daemon.log` (its stdout and stderr). Required.
  std::string dir;
  // Node i listens on 127.0.0.1:(base_port + i - 1); 0 = a free port per node; default 0.
  uint16_t base_port = 0;
  std::string daemon_binary;                     // path of `ringtraind` (FindTool); required
  std::string worker_env = "OMP_NUM_THREADS=1";  // [worker] env of every daemon
  int stop_grace_ms = 500;  // [worker] stop_grace_ms: SIGTERM → SIGKILL for a worker
  // "http://host:port": every node keeps its membership in this etcd ([cluster] etcd); "" = the
  // ring's own protocol.
  std::string etcd;
  // Every daemon runs an embedded chunk server ([store]; all nodes form one store, replication
  // min(3, nodes)): a job reaches it as ckpt.dir = "ringfs:///PATH". Store ports follow the
  // control ports (base_port + nodes + i - 1), or are free ports.
  bool store = false;
  // Every link runs over mutual TLS: a CA and keys + certificates for node-ID and a client are
  // made in `dir`/tls (ringctl init-tls), each node.toml gets a [tls] section, and Status()
  // calls as the client (tools: --tls-dir `dir`/tls).
  bool tls = false;
};

// A started local cluster. Destroying it SIGKILLs every daemon still running (their workers die
// with them through PR_SET_PDEATHSIG); call Stop() first for a clean stop.
class LocalCluster {
 public:
  // Writes the secret and every node.toml, then starts every daemon. Does not wait for the view
  // (WaitForMembers). Errors: InvalidArgument for bad options (nodes < 1, slots < 1, a base port
  // range past 65535, no dir or daemon binary); FailedPrecondition when a node folder already
  // exists (an earlier cluster's state); IoError naming a file that cannot be written or a
  // daemon that cannot be started.
  static Result<std::unique_ptr<LocalCluster>> Start(LocalClusterOptions options);
  ~LocalCluster();
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // "127.0.0.1:PORT" of node `id`'s control port.
  std::string Address(int id) const;
  // "127.0.0.1:PORT" of node `id`'s chunk server ("" without options.store).
  std::string StoreAddress(int id) const;
  // The cluster secret file (for `ringctl --secret-file`).
  std::string SecretFile() const;
  // The TLS folder (for `ringctl --tls-dir`); "" without options.tls.
  std::string TlsDir() const;
  // Node `id`'s folder and its daemon's log.
  std::string NodeDir(int id) const;
  std::string LogPath(int id) const;
  // The ids of the nodes whose daemon runs (started, not killed or stopped).
  std::vector<int> RunningNodes() const;
  // The pid of node `id`'s daemon, or 0 when it does not run.
  pid_t DaemonPid(int id) const;

  // `ringctl status` as JSON (docs/formats/control_api.md), asked of node `id`. Errors: those of
  // the call (Unavailable naming the address when the daemon does not answer).
  Result<nlohmann::json> QueryStatus(int id, Deadline deadline) const;

  // Polls the status (of the lowest running node that answers, every 100 ms) until `done`
  // holds, and returns that status. `interrupted` (may be empty) is asked every round.
  // Errors: DeadlineExceeded naming `what` and the last status seen; Aborted when interrupted.
  Result<nlohmann::json> WaitFor(const std::string& what,
                                 const std::function<bool(const nlohmann::json&)>& done,
                                 Deadline deadline, const std::function<bool()>& interrupted = {});

  // Waits until the view has exactly `members` members. Errors as WaitFor.
  Status WaitForMembers(size_t members, Deadline deadline,
                        const std::function<bool()>& interrupted = {});

  // Kills node `id`'s daemon with SIGKILL (kill -9) and reaps it. Errors: FailedPrecondition
  // when it does not run; DeadlineExceeded when it is not gone within 10 s.
  Status KillNode(int id);
  // (Re)starts node `id`'s daemon with its node.toml (same port and state). Errors:
  // FailedPrecondition when it already runs or `id` is not a node; IoError from the spawn.
  Status StartNode(int id);

  // The daemons that ended without this object's doing (a user's kill -9, a crash, an exit),
  // reaped and removed from the running ones, with how each ended; empty when none did.
  // Never blocks on a daemon that runs.
  std::vector<std::pair<int, ChildExit>> TakeEnded();

  // Stops every running daemon, one at a time from the highest id: SIGTERM (it stops its
  // workers, leaves the view and exits), SIGKILL if it still runs at `deadline`; reaps each.
  // The last member cannot have its leaving agreed by anyone: its exit status, or SIGKILL after
  // 3 s (its workers die with it), is not an error. Errors: Internal listing the daemons that
  // needed SIGKILL or did not exit 0 (every one is gone even then).
  Status Stop(Deadline deadline);

 private:
  explicit LocalCluster(LocalClusterOptions options);
  Status WriteNodeConfig(int id) const;

  LocalClusterOptions options_;
  boost::asio::io_context io_;
  std::map<int, uint16_t> ports_;
  std::map<int, uint16_t> store_ports_;                   // chunk servers (options_.store)
  std::map<int, std::unique_ptr<ChildProcess>> daemons_;  // running daemons by node id
  std::shared_ptr<const net::ClusterSecret> secret_;
};

// The path of the ringtrain tool `name` ("ringtraind", "ringctl", "ringckpt"): next to this
// executable (an install tree's bin/), else in the build tree's tools/<name>/. Errors: NotFound
// naming the places looked at.
Result<std::string> FindTool(const std::string& name);

// Installs SIGINT and SIGTERM handlers that only record the request (StopRequested), so the
// caller stops what it started and exits. Call once, early in main's thread.
void InstallStopSignalHandlers();
// True once SIGINT or SIGTERM has arrived since InstallStopSignalHandlers. Async-signal-safe.
bool StopRequested();

}  // namespace rt::cli
