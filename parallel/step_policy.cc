#include "parallel/step_policy.h"

#include <algorithm>
#include <cmath>

namespace rt {

float LossGradientScale(const TrainerState& state, int batch_size, int seq_len) {
  return static_cast<float>(state.loss_scale / (static_cast<double>(batch_size) * seq_len));
}

std::optional<float> PlanUpdate(const OptimConfig& optim, const TrainConfig& train, bool fp16,
                                double sumsq, TrainerState* state, StepStats* stats) {
  if (!std::isfinite(sumsq)) {
    stats->skipped = true;
    stats->grad_norm = INFINITY;
    if (fp16) {
      state->loss_scale = std::max(1.0, state->loss_scale / 2);
      state->clean_steps = 0;
    }
    return std::nullopt;
  }
  stats->grad_norm = std::sqrt(sumsq) / state->loss_scale;
  double clip = 1.0;
  if (optim.grad_clip > 0 && stats->grad_norm > optim.grad_clip)
    clip = optim.grad_clip / stats->grad_norm;
  const auto grad_scale = static_cast<float>(clip / state->loss_scale);
  ++state->adam_step;
  if (fp16 && ++state->clean_steps >= train.loss_scale_window) {
    state->loss_scale *= 2;
    state->clean_steps = 0;
  }
  return grad_scale;
}

}  // namespace rt
