// A local cluster of real ringtraind processes on loopback for the chaos campaign: start,
// kill -9, SIGSTOP/SIGCONT and restart daemons by node id, and ask any live one for the status.
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
#include "base/subprocess.h"
#include "base/status.h"
#include "daemon/control_api.h"

namespace rt::chaos {

using Json = daemon::Json;

// What the cluster is made of.
struct ClusterOptions {
  std::string dir;            // every daemon's state folder and log live below it
  std::string ringtraind;     // the daemon binary
  int nodes = 5;              // daemons, ids 1..nodes; node 1 bootstraps, the others join it
  int slots = 1;              // CPU worker slots per daemon
  int stop_grace_ms = 500;    // [worker] stop_grace_ms
  // Extra environment of every daemon (and so of its workers), "NAME=value".
  std::vector<std::string> env;
};

class LocalCluster {
 public:
  // Makes the folders and picks a free loopback port per node; starts nothing.
  // Errors: IoError naming a folder that cannot be made.
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
  // The ids of daemons that run and are not paused.
  std::vector<int> Responsive();

  // Calls `type` with `request` on daemon `id`.
  Result<Json> Call(int id, uint16_t type, const Json& request, Deadline deadline) const;
  // The cluster status from the first responsive daemon that answers.
  // Errors: Unavailable when none answers.
  Result<Json> ClusterStatus(Deadline deadline);

  const ClusterOptions& options() const { return options_; }
  // "127.0.0.1:PORT" of node `id`.
  std::string Address(int id) const;
  // Node `id`'s state folder (its daemon.log is in it).
  std::string StateDir(int id) const;

 private:
  explicit LocalCluster(ClusterOptions options) : options_(std::move(options)) {}

  ClusterOptions options_;
  std::map<int, uint16_t> ports_;
  std::map<int, std::unique_ptr<SyncChild>> daemons_;
  std::set<int> paused_;
};

}  // namespace rt::chaos
