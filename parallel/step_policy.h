// The step policy of both training engines, written once: the single-process Trainer
// (parallel/trainer.h) and the distributed DistTrainer (parallel/engine.h) read the training
// data, start from the same state, scale the loss's gradient, clip by the global gradient norm,
// handle fp16 overflow with a dynamic loss scale, count AdamW's updates and advance their state
// through these functions; only how they sum the gradient norm and apply the update differs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "data/data_loader.h"
#include "model/config.h"
#include "parallel/config.h"
#include "parallel/trainer.h"

namespace rt {

// The training batches of a run: train.batch_size rows of model.seq_len tokens per step (the
// global batch, which both engines read whole) from `tokens` in data.order, shuffled from
// train.seed. Errors: InvalidArgument for an unknown data.order; those of DataLoader::Create.
Result<std::unique_ptr<DataLoader>> CreateTrainLoader(
    const RunConfig& config, std::shared_ptr<const std::vector<uint16_t>> tokens);

// The state of a run before its first step: `loader`'s position, the loss scale
// train.loss_scale_init with `fp16` (1 otherwise) and a schedule over train.steps.
TrainerState InitialTrainerState(const RunConfig& config, bool fp16, const DataLoader& loader);

// What is known of the step about to run from `state`: its number, learning rate, loss scale
// and tokens (train.batch_size · model.seq_len).
StepStats StartStep(const RunConfig& config, const TrainerState& state);

// Counts the step of `stats` in `state` once it ran: the step, its tokens, and the position of
// `loader` after the step's batch.
void CountStep(const StepStats& stats, const DataLoader& loader, TrainerState* state);

// The factor the loss's gradient is multiplied by in the backward (`dloss`): the loss scale over
// the tokens of one optimizer step, so the gradients sum to scale × the mean loss's gradient.
float LossGradientScale(const TrainerState& state, int batch_size, int seq_len);

// Decides the optimizer step from `sumsq`, the sum over every parameter (each counted once) of
// the squared gradients as accumulated (still multiplied by the loss scale). Sets
// stats->grad_norm (unscaled; inf on overflow) and stats->skipped. A non-finite sum skips the
// step (with `fp16`, the loss scale halves, not below 1) and returns nullopt. Otherwise counts
// the update in state->adam_step, doubles the fp16 loss scale after loss_scale_window clean
// steps, and returns the factor AdamW multiplies the gradients by: the clipping factor
// (optim.grad_clip over the norm, when above it) over the loss scale in effect for this step.
std::optional<float> PlanUpdate(const OptimConfig& optim, const TrainConfig& train, bool fp16,
                                double sumsq, TrainerState* state, StepStats* stats);

}  // namespace rt
