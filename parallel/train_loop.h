// The training loop of every run, written once: `ringtrain train` in one process, and each
// worker of `ringtrain train --layout`, `ringtrain_dist` and the daemon (parallel/launch.h). It
// steps a TrainingEngine until the run's end, evaluating every eval.every steps and after the
// last, saving checkpoints when due (parallel/checkpointing.h: failed saves,
// ckpt.max_failed_saves), stopping early after --stop-after or a planned stop, and tells a
// TrainLoopReporter what happened at fixed points of each step (the callers differ only in what
// they print). The fault point "parallel.train.before_step" (test builds) is hit before each step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "parallel/config.h"
#include "parallel/planned_stop.h"
#include "parallel/trainer.h"
#include "parallel/training_engine.h"

namespace rt::parallel {

class RunCheckpoints;

// One step as the loop saw it.
struct StepReport {
  StepStats stats;           // what the engine's Step returned
  double seconds = 0;        // the Step call's wall time
  double tokens_per_s = 0;   // stats.tokens over `seconds`
  double train_seconds = 0;  // the wall time of this run's Step calls so far, this one included
  bool last = false;         // the run's last step (train.steps or --stop-after)
  std::optional<double> val_loss;  // the evaluation after this step (in StepSaved; when due)
};

// What a caller reports as its run trains: each method is called on the loop's thread at its
// point of the step. The defaults do nothing.
class TrainLoopReporter {
 public:
  virtual ~TrainLoopReporter() = default;
  // Once the step may be reported: after its evaluation (`report.val_loss`, when due) and, when
  // a memory snapshot is due, after the snapshot before it settled (RunCheckpoints::Save), so
  // that the steps a kill makes the run train again were not reported yet, but before the
  // step's checkpoint starts.
  virtual void StepTaken(const StepReport& /*report*/) {}
  // Right after StepTaken of a step whose evaluation was due.
  virtual void Evaluated(int64_t /*step*/, double /*val_loss*/) {}
  // Right before the checkpoint of step `step` starts (a due one or a planned stop's; not before
  // a memory snapshot alone, taken as often as every step): what the reporter recorded of the
  // steps up to it should be on disk before the run can resume from it.
  virtual void Saving(int64_t /*step*/) {}
  // After the step, its evaluation and the saves due after it. A save first waits for the one
  // before to commit, so when every step is saved a step is reported here only once the one
  // before it is saved.
  virtual void StepSaved(const StepReport& /*report*/) {}
  // After the last step (not after a planned stop), before the checkpoints finish.
  virtual void Finished() {}
};

// How a run ends, and what the loop prints.
struct TrainLoopOptions {
  // When ≥ 1: stop after this step (train.steps stays the schedule's), see EndStep.
  int64_t stop_after = -1;
  // Whether this process prints the loop's lines ("stopped after step ..."): rank 0 only.
  bool print = true;
  // What the loop's lines start with ("" for `ringtrain train`, "ringtrain_dist: " for workers).
  std::string prefix;
  // A planned stop (parallel/launch.h DistTrainOptions::stop_at): called after each step but
  // the last; the ranks agree on the smallest step (a min all-reduce through the checkpoints;
  // at one step, a rank that knows it as one needing a checkpoint wins), and once it is at or
  // below the step just done every rank saves that step's checkpoint synchronously — or, when a
  // snapshot is enough, makes sure of its memory snapshot (RunCheckpoints::SnapshotForStop),
  // saving the checkpoint only if that fails — calls `on_stopped` and the loop returns OK.
  // Needs checkpoints that save (ckpt.every > 0). Empty = never (and no extra collective).
  std::function<PlannedStop()> stop_at;
  // Called on every rank after a planned stop's checkpoint (or memory snapshot) of `step`
  // finished; `snapshot_in` is the memory tier's URI when the stop left a memory snapshot only,
  // "" when it left a checkpoint in ckpt.dir.
  std::function<void(int64_t step, const std::string& snapshot_in)> on_stopped;
};

// The step a run ends after: train.steps, or `stop_after` when it is ≥ 1 and smaller.
int64_t EndStep(const RunConfig& config, int64_t stop_after);

// Continues `engine` (created with WeightInit::kForLoad) from the newest committed checkpoint of
// `checkpoints` (RunCheckpoints::Resume, collective with a world) and, with options.print, says
// which ("resumed from the checkpoint of step N in DIR", or "the memory snapshot of step N in
// memtier://..."). Errors: those of Resume and Restore.
Status ResumeTraining(TrainingEngine& engine, RunCheckpoints& checkpoints,
                      const TrainLoopOptions& options);

// Trains `engine` from its state's step to EndStep(config, options.stop_after): before each
// step the fault point; after it, an evaluation over `val_tokens` (eval.batches batches) when
// eval.every > 0 and the step is a multiple of it or the last; then the checkpoint saves due
// (with `checkpoints`, which may be null: none). After the last step the checkpoints finish
// and, for --stop-after, the loop says that --resume continues. Errors: the first failure of
// the fault point, the engine, the evaluation, the checkpoints (a failed save is dropped unless
// ckpt.max_failed_saves were in a row) and the planned stop's collective.
Status RunTrainLoop(const RunConfig& config, TrainingEngine& engine, RunCheckpoints* checkpoints,
                    std::shared_ptr<const std::vector<uint16_t>> val_tokens,
                    const TrainLoopOptions& options, TrainLoopReporter& reporter);

}  // namespace rt::parallel
