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
#include "parallel/config.h"
#include "data/data_loader.h"
#include "model/gpt.h"
#include "model/optimizer.h"

namespace rt {

// The trainer's position, small and serialisable (checkpoints store it).
struct TrainerState {
  int64_t step = 0;         // optimizer steps taken (including skipped ones)
  int64_t adam_step = 0;    // updates applied (the AdamW bias-correction count)
  double loss_scale = 1.0;  // fp16 dynamic loss scale (1 otherwise)
  int64_t clean_steps = 0;  // fp16: finite steps since the scale last changed
  LoaderState loader;       // the training data position

  // Little-endian: version u32 = 1, step, adam_step, loss_scale (f64), clean_steps, loader (16 B).
  std::vector<std::byte> Serialize() const;
  // Errors: Corruption for a wrong size or version.
  static Result<TrainerState> Deserialize(std::span<const std::byte> bytes);
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
class Trainer {
 public:
  // Builds the model for `config` on train.device and initialises its weights from train.seed,
  // or, when `init_from` is non-empty, from that safetensors file. `train_tokens` is the training
  // stream. Errors: those of config validation, allocation, the loader and ImportWeights;
  // Unimplemented or Unavailable naming train.device when that device cannot be used here.
  static Result<std::unique_ptr<Trainer>> Create(
      const RunConfig& config, std::shared_ptr<const std::vector<uint16_t>> train_tokens,
      const std::string& init_from);

  // Runs one optimizer step over train.batch_size rows in train.micro_batches micro-batches.
  // The fault point "parallel.trainer.grad_overflow" (test builds) turns a gradient into inf.
  Result<StepStats> Step();

  // Mean loss over `batches` sequential batches of train.batch_size rows from the start of
  // `tokens` (forward only; no state changes besides activations).
  Result<double> Evaluate(std::shared_ptr<const std::vector<uint16_t>> tokens, int batches);

  // Writes the fp32 master weights as safetensors, recording `tokenizer` in the metadata.
  Status Export(const std::string& path, const std::string& tokenizer) const;

  const TrainerState& state() const { return state_; }
  // Continues from `state` (e.g. from a checkpoint; the weights are restored separately).
  void Restore(const TrainerState& state);
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
