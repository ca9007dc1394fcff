// What the chaos campaign reads from the cluster: the status (generation, step, members,
// workers) polled until a condition holds, and afterwards the daemons' recovery log lines.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/status.h"
#include "bench/chaos/campaign.h"
#include "bench/chaos/cluster.h"

namespace rt::chaos {

// A worker process as the status lists it.
struct WorkerInfo {
  int node = 0;
  int rank = 0;
  pid_t pid = 0;
};

// Polls a LocalCluster's status (every 100 ms) until a condition holds. Single-threaded.
class Observer {
 public:
  // `hang_limit_ms`: how long one status call may take at most.
  Observer(LocalCluster& cluster, int64_t hang_limit_ms)
      : cluster_(cluster), call_ms_(std::min<int64_t>(hang_limit_ms, 10'000)) {}

  // The training generation of the newest progress ("" when none), its step, the view's
  // member ids (ascending), the workers of every member, whether the job is finished and at
  // which step.
  static std::string Generation(const Json& s);
  // The newest training generation in `s`: that of the newest progress or one a member runs
  // (a generation that started has no progress until its first step).
  static std::string NewestGeneration(const Json& s);
  static int64_t Step(const Json& s);
  // When training went on in the newest progress's generation (Unix ms of rank 0's report of
  // its first step; 0 when the status does not say), and when rank 0 sent that progress.
  static int64_t FirstStepUnixMs(const Json& s);
  static int64_t ProgressUnixMs(const Json& s);
  static std::vector<int> MemberIds(const Json& s);
  static std::vector<WorkerInfo> Workers(const Json& s);
  static bool Finished(const Json& s);
  static int64_t FinishedStep(const Json& s);

  // Until training goes on: the job finished, or progress in a generation other than
  // `generation`, or (when !`new_generation`) a step beyond `step` in the same one.
  // Errors: DeadlineExceeded with the last status seen.
  Result<Json> WaitProgress(const std::string& generation, int64_t step, bool new_generation,
                            Deadline deadline);
  // Until `nodes` daemons are members, each runs a worker of the current generation and its
  // step advanced (or the job finished). Errors: DeadlineExceeded with the last status seen.
  Result<Json> WaitHealthy(int nodes, Deadline deadline);
  // Until the job is finished. Errors: DeadlineExceeded.
  Result<Json> WaitFinished(Deadline deadline);
  // Until the progress step is at least `step`. Errors: DeadlineExceeded.
  Result<Json> WaitStep(int64_t step, Deadline deadline);
  // Until no member runs a worker. Errors: DeadlineExceeded.
  Status WaitNoWorkers(Deadline deadline);
  // Steps per second over `seconds` of a healthy cluster of `nodes` daemons with no change of
  // generation (measured after 5 warm-up steps; retried when the generation changes).
  // Errors: DeadlineExceeded.
  Result<double> MeasureRate(int nodes, double seconds, Deadline deadline);

 private:
  // Polls until `done` holds for a status; `what` names the wait in the error.
  Result<Json> Until(const std::string& what, Deadline deadline,
                     const std::function<bool(const Json&)>& done);

  LocalCluster& cluster_;
  int64_t call_ms_;
};

// The "recovery: ..." lines of every node's daemon.log below `dir`.
std::vector<RecoveryLine> ReadRecoveryLines(const std::string& dir, int nodes);

// (view, epoch) of a generation "job.view.epoch", to order generations; (-1, -1) if malformed.
std::pair<int64_t, int64_t> GenerationOrder(const std::string& generation);

// Fills `r.corrupt_resumes`: generations newer than a flip whose first step says they resumed
// from the step it corrupted.
void CheckCorruptResumes(CampaignResult& r);

}  // namespace rt::chaos
