// The counters a worker adds to its `report` requests (docs/formats/control_api.md "Worker API"):
// the checkpoint saves and loads its rank settled and the bytes its process groups moved since
// its previous report, which its daemon adds to the metrics (docs/metrics.md). Every rank
// reports them (counters count what this node's workers did); durations and failed saves come
// from rank 0 only, so that each checkpoint is timed and counted once.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "daemon/control_api.h"
#include "parallel/rank_activity.h"

namespace rt::daemon {

// What one report carries.
struct WorkerCounters {
  // Committed saves and loads; a `seconds` < 0 means not timed by this rank (ranks other than 0).
  std::vector<parallel::CheckpointTransfer> saves, loads;
  std::vector<parallel::CheckpointTransfer> failed;  // failed saves (rank 0's reports only)
  std::vector<parallel::GroupBytes> comm;  // bytes per process group since the last report
  // Nothing to report.
  bool empty() const { return saves.empty() && loads.empty() && failed.empty() && comm.empty(); }
};

// Adds the non-empty parts of `counters` to the report object `report`: "saves", "loads",
// "failed_saves" (arrays of {"tier", "step", "bytes", "seconds"?}) and "comm" ({group:
// {"sent", "received"}}).
void AddCounters(const WorkerCounters& counters, Json* report);

// Reads the counters of a report (none when it has no such keys). Errors: InvalidArgument naming
// the key when one has the wrong type or range (a tier other than "store" or "memory", a
// negative count or duration, a group that is not one of parallel::kProcessGroupNames).
Result<WorkerCounters> ParseCounters(const Json& report);

// A worker's side: turns its rank's activity (parallel/launch.h on_activity) into the counters
// of its next report. Not thread-safe.
class CounterDeltas {
 public:
  // `lead`: the worker runs rank 0 (its reports carry durations and failed saves).
  explicit CounterDeltas(bool lead) : lead_(lead) {}
  // Adds the transfers of `activity` and the growth of its groups' totals since the last Add.
  void Add(const parallel::RankActivity& activity);
  // What is pending, which is then cleared.
  WorkerCounters Take();

 private:
  const bool lead_;
  WorkerCounters pending_;
  std::map<std::string, parallel::GroupBytes> seen_;  // totals at the last Add, by group
};

}  // namespace rt::daemon
