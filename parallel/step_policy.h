// The step policy of both training engines, written once: the single-process Trainer
// (parallel/trainer.h) and the distributed DistTrainer (parallel/engine.h) scale the loss's
// gradient, clip by the global gradient norm, handle fp16 overflow with a dynamic loss scale and
// count AdamW's updates through these functions; only how they sum the gradient norm and apply
// the update differs.
#pragma once

#include <cstdint>
#include <optional>

#include "model/config.h"
#include "parallel/config.h"
#include "parallel/trainer.h"

namespace rt {

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
