// What the training loop (parallel/train_loop.h) drives, whichever engine trains: the
// single-process Trainer (parallel/trainer.h) and one rank's DistTrainer (parallel/engine.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "ckpt/shard.h"

namespace rt {

struct StepStats;
struct TrainerState;

// One rank's training engine, as the loop and the checkpoints see it. Not thread-safe.
class TrainingEngine {
 public:
  virtual ~TrainingEngine() = default;

  // Runs one optimizer step over the global batch. The stats are the global ones (equal on
  // every rank). Errors: the engine's (comm, kernels, a token outside the vocabulary).
  virtual Result<StepStats> Step() = 0;

  // Mean loss over `batches` sequential batches of train.batch_size rows from the start of
  // `tokens`, forward only (equal on every rank; collective over a distributed engine's world).
  virtual Result<double> Evaluate(std::shared_ptr<const std::vector<uint16_t>> tokens,
                                  int batches) = 0;

  // This rank's training state as shards of the named global tensors (ckpt/shard.h), for the
  // checkpoints to save and load in place. The views stay valid while the engine lives.
  virtual ckpt::StateShards Shards() = 0;

  // The position: steps taken, loss scale, data position (what a checkpoint stores).
  virtual const TrainerState& state() const = 0;

  // Continues from `state` once a checkpoint was written into the Shards() views. Errors:
  // those of rebuilding the compute-dtype parameters.
  virtual Status Restore(const TrainerState& state) = 0;
};

}  // namespace rt
