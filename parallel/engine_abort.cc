// DistTrainer::Abort and the step's abort check (parallel/engine.h).
#include "parallel/engine.h"

namespace rt::parallel {

void DistTrainer::Abort() {
  aborted_.store(true);
  // Aborting the world aborts every group Split from it; each is aborted here too, so a group
  // whose world is another communicator object (or a backend without that link) fails as well.
  comm::Communicator* const groups[] = {groups_.tp.get(),
                                        groups_.dp_shard.get(),
                                        groups_.dp_replicate.get(),
                                        groups_.pp_forward.get(),
                                        groups_.pp_backward.get(),
                                        groups_.embedding.get(),
                                        groups_.world};
  for (comm::Communicator* group : groups)
    if (group) group->Abort();
}

Result<StepStats> DistTrainer::Step() {
  if (aborted_.load())
    return Aborted("step " + std::to_string(state_.step + 1) + ": the engine was aborted");
  Result<StepStats> stats = RunStep();
  if (stats.ok() || !aborted_.load()) return stats;
  return Aborted("step " + std::to_string(state_.step + 1) +
                 " aborted by DistTrainer::Abort(): " + stats.status().ToString());
}

}  // namespace rt::parallel
