#include "parallel/train_loop.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "base/fault.h"
#include "parallel/checkpointing.h"

namespace rt::parallel {
namespace {

// Saves the checkpoint of the step just done, when none was, and finishes the checkpoints for a
// planned stop after `step` (asked for `stop_at`). Errors: those of the checkpoints.
Status StopAsPlanned(RunCheckpoints& checkpoints, TrainingEngine& engine, int64_t step,
                     int64_t stop_at, const TrainLoopOptions& options) {
  if (checkpoints.durable_step() != step)
    RETURN_IF_ERROR(checkpoints.Save(step, engine.Shards(), engine.state()));
  RETURN_IF_ERROR(
      checkpoints.Finish().WithContext("planned stop after step " + std::to_string(step)));
  if (options.print)
    std::printf(
        "%sstopped after step %lld for a planned change (asked for step %lld); its "
        "checkpoint is committed\n",
        options.prefix.c_str(), static_cast<long long>(step), static_cast<long long>(stop_at));
  if (options.on_stopped) options.on_stopped(step);
  return Status();
}

}  // namespace

int64_t EndStep(const RunConfig& config, int64_t stop_after) {
  return stop_after >= 1 ? std::min(stop_after, config.train.steps) : config.train.steps;
}

Status ResumeTraining(TrainingEngine& engine, RunCheckpoints& checkpoints,
                      const TrainLoopOptions& options) {
  ASSIGN_OR_RETURN(TrainerState state, checkpoints.Resume(engine.Shards()));
  RETURN_IF_ERROR(engine.Restore(state));
  if (options.print)
    std::printf("%sresumed from the %s\n", options.prefix.c_str(),
                checkpoints.resumed_from().c_str());
  return Status();
}

Status RunTrainLoop(const RunConfig& config, TrainingEngine& engine, RunCheckpoints* checkpoints,
                    std::shared_ptr<const std::vector<uint16_t>> val_tokens,
                    const TrainLoopOptions& options, TrainLoopReporter& reporter) {
  using Clock = std::chrono::steady_clock;
  double train_seconds = 0;
  const int64_t end = EndStep(config, options.stop_after);
  while (engine.state().step < end) {
    RETURN_IF_ERROR(RT_FAULT_POINT("parallel.train.before_step"));
    const auto start = Clock::now();
    StepReport r;
    ASSIGN_OR_RETURN(r.stats, engine.Step());
    r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    train_seconds += r.seconds;
    r.train_seconds = train_seconds;
    r.tokens_per_s = static_cast<double>(r.stats.tokens) / r.seconds;
    r.last = r.stats.step == end;
    const int64_t step = r.stats.step;
    reporter.StepTaken(r);
    if (config.eval.every > 0 && (step % config.eval.every == 0 || r.last)) {
      ASSIGN_OR_RETURN(r.val_loss, engine.Evaluate(val_tokens, config.eval.batches));
      reporter.Evaluated(step, *r.val_loss);
    }
    if (checkpoints && checkpoints->Due(step, r.last))
      RETURN_IF_ERROR(checkpoints->Save(step, engine.Shards(), engine.state()));
    reporter.StepSaved(r);
    if (!options.stop_at || r.last) continue;
    // Every rank takes the same decision from the same all-reduced step.
    ASSIGN_OR_RETURN(const int64_t stop_at,
                     checkpoints->Reduce(options.stop_at(), comm::ReduceOp::kMin));
    if (stop_at <= step) return StopAsPlanned(*checkpoints, engine, step, stop_at, options);
  }
  reporter.Finished();
  if (checkpoints) {
    RETURN_IF_ERROR(checkpoints->SaveLast(end, engine.Shards(), engine.state()));
    RETURN_IF_ERROR(checkpoints->Finish());
  }
  if (options.print && end < config.train.steps)
    std::printf(
        "%sstopped after step %lld (--stop-after; train.steps is %lld: --resume "
        "continues)\n",
        options.prefix.c_str(), static_cast<long long>(engine.state().step),
        static_cast<long long>(config.train.steps));
  return Status();
}

}  // namespace rt::parallel
