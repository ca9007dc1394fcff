#include "model/optimizer.h"

#include <cmath>

#include "kernels/ops.h"

namespace rt {

double LearningRate(const OptimConfig& c, int64_t step, int64_t total_steps) {
  if (c.schedule == "constant") return c.lr;
  if (step < c.warmup_steps) return c.lr * static_cast<double>(step + 1) / c.warmup_steps;
  const int64_t decay = std::max<int64_t>(1, total_steps - c.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / decay);
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(M_PI * progress));
}

Result<std::unique_ptr<AdamWOptimizer>> AdamWOptimizer::Create(const Gpt& model,
                                                               const OptimConfig& config) {
  std::unique_ptr<AdamWOptimizer> opt(new AdamWOptimizer());
  opt->config_ = config;
  opt->params_ = &model.params();
  opt->grads_ = &model.grads();
  opt->has_master_ = model.precision() != Precision::kFp32;
  const Device device = model.device();
  if (opt->has_master_) {
    AddGptTensors(model.config(), DType::kF32, &opt->master_);
    RETURN_IF_ERROR(opt->master_.Allocate(device).WithContext("AdamW master weights"));
  }
  AddGptTensors(model.config(), DType::kF32, &opt->m_);
  AddGptTensors(model.config(), DType::kF32, &opt->v_);
  RETURN_IF_ERROR(opt->m_.Allocate(device).WithContext("AdamW m"));
  RETURN_IF_ERROR(opt->v_.Allocate(device).WithContext("AdamW v"));
  return opt;
}

Status AdamWOptimizer::SyncParams() {
  if (!has_master_) return Status();
  for (int i = 0; i < master_.size(); ++i)
    RETURN_IF_ERROR(Convert(params_->Get(i), master_.Get(i)));
  return Status();
}

Result<double> AdamWOptimizer::GradSumOfSquares() const {
  const Tensor all = grads_->All();
  if (all.device() != Device::kCpu) {
    // One reduction over the whole arena, so one synchronisation per step instead of one per
    // tensor; the alignment padding between the tensors is zero and adds nothing.
    const DType dt = grads_->Get(0).dtype();
    const auto count = static_cast<int64_t>(grads_->bytes() / DTypeSize(dt));
    return SumOfSquares(Tensor(all.data(), dt, Shape{count}, all.device()));
  }
  double sum = 0;
  for (int i = 0; i < grads_->size(); ++i) {
    ASSIGN_OR_RETURN(double s, SumOfSquares(grads_->Get(i)));
    sum += s;
  }
  return sum;
}

AdamWParams AdamWUpdateParams(const OptimConfig& config, double lr, float grad_scale, int64_t step,
                              bool decayed) {
  AdamWParams hp;
  hp.lr = static_cast<float>(lr);
  hp.beta1 = static_cast<float>(config.beta1);
  hp.beta2 = static_cast<float>(config.beta2);
  hp.eps = static_cast<float>(config.eps);
  hp.weight_decay = decayed ? static_cast<float>(config.weight_decay) : 0.0f;
  hp.grad_scale = grad_scale;
  hp.step = step;
  return hp;
}

Status AdamWOptimizer::Update(double lr, float grad_scale, int64_t step) {
  const Arena& master_arena = master();
  for (int i = 0; i < master_arena.size(); ++i) {
    const Tensor param = master_arena.Get(i);
    const AdamWParams hp =
        AdamWUpdateParams(config_, lr, grad_scale, step, IsDecayed(param.shape()));
    RETURN_IF_ERROR(rt::AdamW(param, grads_->Get(i), m_.Get(i), v_.Get(i),
                              has_master_ ? params_->Get(i) : Tensor(), hp)
                        .WithContext("AdamW on '" + master_arena.name(i) + "'"));
  }
  return Status();
}

}  // namespace rt
