// What `ringtrain demo` shows while the job runs: live progress lines from the cluster's status,
// and the daemons' recovery lines from their logs (tools/ringtrain/demo_command.cc).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/deadline.h"
#include "base/status.h"
#include "tools/ringtrain/local_cluster.h"

namespace rt::cli {

// The job's step in a cluster status (0 before any report).
int64_t Step(const nlohmann::json& status);
// The training generation of the newest progress report ("" before any).
std::string Generation(const nlohmann::json& status);
// The job's plan as the daemons describe it ("tp=1,pp=2,dp=2,... on nodes 1,2,3,4 (...)"), or "".
std::string Plan(const nlohmann::json& status);
// The pids of node `id`'s workers in a status.
std::vector<pid_t> WorkerPids(const nlohmann::json& status, int id);

// Watches one cluster for the demo. Not thread-safe; lives on the demo's thread.
class DemoWatch {
 public:
  // `cluster` must outlive this; `steps` is the job's step count (shown in progress lines).
  DemoWatch(LocalCluster& cluster, int steps) : cluster_(cluster), steps_(steps) {}

  // Polls the status until `done` holds (as LocalCluster::WaitFor, interrupted by
  // StopRequested), printing a progress line (step, loss, tokens/s, layout, generation) when the
  // generation changes and at most every 2 s otherwise. Errors: WaitFor's.
  Result<nlohmann::json> Until(const std::string& what,
                               const std::function<bool(const nlohmann::json&)>& done,
                               Deadline deadline);

  // Remembers how far every node's daemon log has been read; PrintRecovery reads past it.
  void MarkLogs();

  // Waits (up to 10 s, or `deadline`) for a daemon's "recovery: " line written since MarkLogs,
  // prints it and what it says (loaded from, steps lost). Errors: DeadlineExceeded when no
  // daemon logged one.
  Status PrintRecovery(Deadline deadline);

 private:
  LocalCluster& cluster_;
  int steps_;
  std::string shown_generation_;
  int64_t shown_step_ = -1;
  std::chrono::steady_clock::time_point shown_at_{};
  std::map<int, uintmax_t> log_marks_;  // node id → bytes of its log already read
};

}  // namespace rt::cli
