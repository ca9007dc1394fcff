// The single-process training engine: one model, its optimizer and the data loader, stepped one
// optimizer step at a time with gradient accumulation, clipping, the learning-rate schedule and
// dynamic loss scaling (fp16). Everything that decides the next step is in TrainerState.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "ckpt/shard.h"
#include "data/data_loader.h"
#include "model/gpt.h"
#include "model/optimizer.h"
#include "parallel/config.h"
#include "parallel/training_engine.h"

namespace rt {

// The trainer's position, small and serialisable (checkpoints store it as the manifest's engine
// state): everything besides the tensors that a resumed run needs to continue as if it had never
// stopped. Randomness: the weights are drawn from train.seed only at initialisation (a resumed
// run loads them instead) and the model has no dropout, so the only random stream a run consumes
// is the shuffled data order, which is a pure function of (loader.seed, loader.rows).
struct TrainerState {
  int64_t step = 0;            // optimizer steps taken (including skipped ones): the learning-
                               // rate schedule's position
  int64_t adam_step = 0;       // updates applied (the AdamW bias-correction count)
  double loss_scale = 1.0;     // fp16 dynamic loss scale (1 otherwise)
  int64_t clean_steps = 0;     // fp16: finite steps since the scale last changed (the window)
  int64_t tokens_seen = 0;     // training tokens consumed (B·T per step)
  int64_t schedule_steps = 0;  // the total steps the learning-rate schedule decays over
                               // (train.steps of the run that started it)
  LoaderState loader;          // the global training data position (rows over all dp ranks)

  // Little-endian: version u32 = 2, step i64, adam_step i64, loss_scale f64, clean_steps i64,
  // tokens_seen i64, schedule_steps i64, loader (16 B) — 68 bytes (docs/formats/trainer_state.md).
  std::vector<std::byte> Serialize() const;
  // Errors: Corruption naming what is wrong: a wrong size or version, a negative count, more
  // updates than steps, a loss scale that is not finite and ≥ 1.
  static Result<TrainerState> Deserialize(std::span<const std::byte> bytes);
};

// How an engine's weights start.
enum class WeightInit : uint8_t {
  kFromSeed = 0,  // drawn from train.seed (DESIGN.md's initialisation)
  kForLoad = 1,   // left zero, nothing drawn: a checkpoint is about to be written into the
                  // engine's Shards() views, then Restore called
};

// What one step did.
struct StepStats {
  int64_t step = 0;       // 1-based number of this step
  double loss = 0;        // mean training loss of the batch
  double lr = 0;          // learning rate used
  double grad_norm = 0;   // global gradient norm before clipping (unscaled); inf if overflowed
  bool skipped = false;   // non-finite gradients: no update applied
  double loss_scale = 1;  // loss scale in effect for this step
  int64_t tokens = 0;     // tokens processed (B·T)
};

// Owns the model, optimizer and loader. Not thread-safe. On a device, a step waits for the device
// only at the host's copies: each micro-batch's tokens in and loss out, and the gradient norm.
class Trainer final : public TrainingEngine {
 public:
  // Builds the model for `config` on train.device and initialises its weights from train.seed,
  // or, when `init_from` is non-empty, from that safetensors file, or not at all with
  // WeightInit::kForLoad. `train_tokens` is the training stream. Errors: those of config
  // validation, allocation, the loader and ImportWeights; Unimplemented or Unavailable naming
  // train.device when that device cannot be used here; InvalidArgument for `init_from` with
  // kForLoad.
  static Result<std::unique_ptr<Trainer>> Create(
      const RunConfig& config, std::shared_ptr<const std::vector<uint16_t>> train_tokens,
      const std::string& init_from, WeightInit init = WeightInit::kFromSeed);

  // Runs one optimizer step over train.batch_size rows in train.micro_batches micro-batches.
  // The fault point "parallel.trainer.grad_overflow" (test builds) turns a gradient into inf.
  Result<StepStats> Step() override;

  // Mean loss over `batches` sequential batches of train.batch_size rows from the start of
  // `tokens` (forward only; no state changes besides activations).
  Result<double> Evaluate(std::shared_ptr<const std::vector<uint16_t>> tokens,
                          int batches) override;

  // Writes the fp32 master weights as safetensors, recording `tokenizer` in the metadata.
  Status Export(const std::string& path, const std::string& tokenizer) const;

  const TrainerState& state() const override { return state_; }
  // Continues from `state` (e.g. a checkpoint's) after the master weights and AdamW moments were
  // written in place (Shards() views, or optimizer()): takes the position and rebuilds the
  // bf16/fp16 parameters from the fp32 master. Errors: those of the conversion.
  Status Restore(const TrainerState& state) override;
  // The whole training state as shards of the named global tensors (ckpt/shard.h), the same
  // contract as DistTrainer::Shards with the one-rank layout: full boxes of the parameter
  // (compute dtype), master, AdamW m and v arenas, and the step. Views stay valid while the
  // trainer lives.
  ckpt::StateShards Shards() override;
  const RunConfig& config() const { return config_; }
  Gpt& model() { return *model_; }
  const AdamWOptimizer& optimizer() const { return *optimizer_; }
  // The optimizer, e.g. to restore its master weights and moments from a checkpoint.
  AdamWOptimizer& optimizer() { return *optimizer_; }

 private:
  Trainer() = default;
  RunConfig config_;
  std::unique_ptr<Gpt> model_;
  std::unique_ptr<AdamWOptimizer> optimizer_;
  std::unique_ptr<DataLoader> loader_;
  TrainerState state_;
  std::vector<int32_t> inputs_, targets_;
};

// Mean loss of `model` over `batches` sequential batches of `rows` rows (each run as forwards of
// at most the model's batch) from the start of `tokens`. Errors: InvalidArgument if the stream
// is shorter than one window or holds a token outside the model's vocabulary.
Result<double> EvaluateLoss(Gpt& model, std::shared_ptr<const std::vector<uint16_t>> tokens,
                            int rows, int max_rows_per_forward, int batches);

}  // namespace rt
