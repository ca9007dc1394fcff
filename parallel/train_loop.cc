#include "parallel/train_loop.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "base/fault.h"
#include "parallel/checkpointing.h"

namespace rt::parallel {
namespace {

// For a planned stop after `step` (asked for `stop.step`): makes sure of the memory snapshot of
// the step when that is enough, else (or when it failed) saves the checkpoint of the step, when
// none was, and finishes the checkpoints. Errors: those of the checkpoints.
Status StopAsPlanned(RunCheckpoints& checkpoints, TrainingEngine& engine, int64_t step,
                     const PlannedStop& stop, const TrainLoopOptions& options,
                     TrainLoopReporter& reporter) {
  const auto stopped = [&](const char* what, const std::string& snapshot_in) {
    if (options.print)
      std::printf(
          "%sstopped after step %lld for a planned change (asked for step %lld); its %s is "
          "committed\n",
          options.prefix.c_str(), static_cast<long long>(step), static_cast<long long>(stop.step),
          what);
    if (options.on_stopped) options.on_stopped(step, snapshot_in);
  };
  if (stop.snapshot) {
    ASSIGN_OR_RETURN(const bool snapshot,
                     checkpoints.SnapshotForStop(step, engine.Shards(), engine.state()));
    if (snapshot) {
      stopped("memory snapshot", checkpoints.memory_uri());
      return Status();
    }
  }
  if (checkpoints.durable_step() != step) {
    reporter.Saving(step);
    RETURN_IF_ERROR(checkpoints.Save(step, engine.Shards(), engine.state()));
  }
  RETURN_IF_ERROR(
      checkpoints.Finish().WithContext("planned stop after step " + std::to_string(step)));
  stopped("checkpoint", "");
  return Status();
}

// A planned stop as one number for the min all-reduce: 2 * step, + 1 when a snapshot is enough
// (so that at one step a rank that needs a checkpoint wins); INT64_MAX for none.
int64_t EncodeStop(const PlannedStop& stop) {
  if (stop.step >= INT64_MAX / 2) return INT64_MAX;
  return 2 * stop.step + (stop.snapshot ? 1 : 0);
}
PlannedStop DecodeStop(int64_t code) {
  if (code == INT64_MAX) return PlannedStop{};
  return PlannedStop{code / 2, (code & 1) != 0};
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
    if (config.eval.every > 0 && (step % config.eval.every == 0 || r.last)) {
      ASSIGN_OR_RETURN(r.val_loss, engine.Evaluate(val_tokens, config.eval.batches));
    }
    const auto report = [&](bool checkpoint) {
      reporter.StepTaken(r);
      if (r.val_loss) reporter.Evaluated(step, *r.val_loss);
      if (checkpoint) reporter.Saving(step);
    };
    if (checkpoints && checkpoints->Due(step, r.last))
      RETURN_IF_ERROR(checkpoints->Save(step, engine.Shards(), engine.state(), report));
    else
      report(false);
    reporter.StepSaved(r);
    if (!options.stop_at || r.last) continue;
    // Every rank takes the same decision from the same all-reduced stop.
    ASSIGN_OR_RETURN(const int64_t agreed,
                     checkpoints->Reduce(EncodeStop(options.stop_at()), comm::ReduceOp::kMin));
    if (const PlannedStop stop = DecodeStop(agreed); stop.step <= step)
      return StopAsPlanned(*checkpoints, engine, step, stop, options, reporter);
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
