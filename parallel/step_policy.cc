#include "parallel/step_policy.h"

#include <algorithm>
#include <cmath>

#include "model/optimizer.h"

namespace rt {

Result<std::unique_ptr<DataLoader>> CreateTrainLoader(
    const RunConfig& config, std::shared_ptr<const std::vector<uint16_t>> tokens) {
  ASSIGN_OR_RETURN(DataOrder order, ParseDataOrder(config.data.order));
  ASSIGN_OR_RETURN(DataLoader loader, DataLoader::Create(std::move(tokens), config.train.batch_size,
                                                         config.model.seq_len, order,
                                                         static_cast<uint64_t>(config.train.seed)));
  return std::make_unique<DataLoader>(std::move(loader));
}

TrainerState InitialTrainerState(const RunConfig& config, bool fp16, const DataLoader& loader) {
  TrainerState state;
  state.loader = loader.state();
  state.loss_scale = fp16 ? config.train.loss_scale_init : 1.0;
  state.schedule_steps = config.train.steps;
  return state;
}

StepStats StartStep(const RunConfig& config, const TrainerState& state) {
  StepStats stats;
  stats.step = state.step + 1;
  stats.lr = LearningRate(config.optim, state.step, state.schedule_steps);
  stats.loss_scale = state.loss_scale;
  stats.tokens = static_cast<int64_t>(config.train.batch_size) * config.model.seq_len;
  return stats;
}

void CountStep(const StepStats& stats, const DataLoader& loader, TrainerState* state) {
  ++state->step;
  state->tokens_seen += stats.tokens;
  state->loader = loader.state();
}

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
