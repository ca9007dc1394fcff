// A local cluster of real ringtraind processes for the chaos campaign: start, kill -9,
// SIGSTOP/SIGCONT and restart daemons by node id, and ask any live one for the status. The
// daemons run on loopback, or each in its own network namespace of a NodeNetwork
// (bench/chaos/netns.h) with a cluster secret, so that partitions can cut the links between them.
//
// Threading: one thread drives a LocalCluster (the one that created it: the daemons' death
// signal, PR_SET_PDEATHSIG, is tied to it).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/net/auth.h"
#include "base/status.h"
#include "base/subprocess.h"
#include "bench/chaos/netns.h"
#include "daemon/control_api.h"

namespace rt::chaos {

using Json = daemon::Json;

// What the cluster is made of.
struct ClusterOptions {
  std::string dir;          // every daemon's state folder and log live below it
  std::string ringtraind;   // the daemon binary
  int nodes = 5;            // daemons, ids 1..nodes; node 1 bootstraps, the others join it
  int slots = 1;            // CPU worker slots per daemon
  int stop_grace_ms = 500;  // [worker] stop_grace_ms
  int worker_nice = -1;     // [worker] nice; -1 = the daemon's default
  // Extra environment of every daemon (and so of its workers), "NAME=value".
  std::vector<std::string> env;
  // Null: every daemon on loopback. Else daemon `id` runs in `network->Namespace(id)` and
  // listens (control, rendezvous store, its workers' rank links) on `network->Address(id)`,
  // with a cluster secret made in `dir` (a daemon refuses a non-loopback address without one).
  // Not owned; it outlives the cluster.
  NodeNetwork* network = nullptr;
  // "http://host:port": the daemons keep their membership in this etcd ([cluster] etcd); "" =
  // the ring's own protocol.
  std::string etcd;
  // > 0: every daemon runs the embedded chunk store ([store]) on its own port, all of them one
  // store with this replication factor (jobs may then name ringfs:///PATH).
  int store_replication = 0;
};

class LocalCluster {
 public:
  // Makes the folders and picks a free loopback port per node (or, with a network, the secret
  // file); starts nothing. Errors: IoError naming a folder or file that cannot be made.
  static Result<std::unique_ptr<LocalCluster>> Create(ClusterOptions options);
  // Kills every daemon still running (and, through PR_SET_PDEATHSIG, its workers).
  ~LocalCluster();

  // Starts daemon `id` (again) with its state folder and port. Errors: those of the spawn.
  Status Start(int id);
  // kill -9 of daemon `id` and reaps it. Errors: FailedPrecondition when it does not run.
  Status Kill(int id);
  // SIGSTOP (`stop` true) or SIGCONT of daemon `id`.
  Status Pause(int id, bool stop);
  // True when daemon `id` was started, has not been killed and has not exited on its own.
  bool Running(int id);
  // Ids that were started and have exited without Kill (each reported once, then forgotten).
  std::vector<int> TakeUnexpectedExits();
  // The ids of daemons that run, are not paused and not cut off (all that run and are not
  // paused when every one is cut off).
  std::vector<int> Responsive();
  // Daemons whose status is not asked for (the minority side of a partition: its view is
  // stale); empty = none.
  void SetCutOff(std::set<int> ids) { cut_off_ = std::move(ids); }

  // Calls `type` with `request` on daemon `id`.
  Result<Json> Call(int id, uint16_t type, const Json& request, Deadline deadline) const;
  // The cluster status from the first responsive daemon that answers.
  // Errors: Unavailable when none answers.
  Result<Json> ClusterStatus(Deadline deadline);

  const ClusterOptions& options() const { return options_; }
  // "127.0.0.1:PORT" of node `id`, or "ADDRESS:7700" in its network namespace.
  std::string Address(int id) const;
  // The address of node `id`'s chunk store (options().store_replication > 0).
  std::string StoreAddress(int id) const;
  // The cluster secret's file (with a network), else "".
  std::string SecretFile() const;
  // Node `id`'s state folder (its daemon.log is in it).
  std::string StateDir(int id) const;

 private:
  explicit LocalCluster(ClusterOptions options) : options_(std::move(options)) {}

  ClusterOptions options_;
  std::map<int, uint16_t> ports_;
  std::map<int, uint16_t> store_ports_;  // with store_replication > 0
  std::map<int, std::unique_ptr<SyncChild>> daemons_;
  std::set<int> paused_;
  std::set<int> cut_off_;
  std::shared_ptr<const net::ClusterSecret> secret_;  // with a network; else null
};

}  // namespace rt::chaos
