// AdamW over the model's arenas with fp32 master weights, global-norm clipping and the learning
// rate schedules. The master weights, m and v each live in one f32 arena with the parameter
// arena's layout, so ZeRO can later hand each rank an offset view of them.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/ops.h"
#include "kernels/tensor.h"
#include "model/config.h"
#include "model/gpt.h"

namespace rt {

// The learning rate at 0-based `step`: `constant` gives lr; `cosine` rises linearly over
// warmup_steps to lr ((step+1)/warmup·lr), then follows a cosine from lr down to min_lr at
// `total_steps`.
double LearningRate(const OptimConfig& config, int64_t step, int64_t total_steps);

// The AdamW hyperparameters of update number `step` (1-based) of a tensor: `config`'s betas and
// eps, its weight decay when `decayed` (IsDecayed: the 2-D weights) and 0 otherwise, gradients
// multiplied by `grad_scale` first (clipping and 1/loss scale).
AdamWParams AdamWUpdateParams(const OptimConfig& config, double lr, float grad_scale, int64_t step,
                              bool decayed);

// AdamW with decoupled weight decay on the 2-D weights only. Owns the master (only when the
// parameters are not fp32; otherwise the parameters are their own master), m and v arenas, on
// the model's device. Not thread-safe.
class AdamWOptimizer {
 public:
  // Allocates state for `model`'s parameter layout. Errors: ResourceExhausted.
  static Result<std::unique_ptr<AdamWOptimizer>> Create(const Gpt& model,
                                                        const OptimConfig& config);

  // The fp32 master weights (the model's parameter arena in fp32 mode).
  const Arena& master() const { return has_master_ ? master_ : *params_; }
  const Arena& m() const { return m_; }
  const Arena& v() const { return v_; }

  // Copies the master weights into the model's (lower-precision) parameters.
  Status SyncParams();

  // Sum of squares of all gradients (as stored, i.e. still multiplied by any loss scale); +inf
  // or NaN when a gradient is not finite. Waits for the device (the host needs the value).
  Result<double> GradSumOfSquares() const;

  // Applies one update to every parameter: gradients are multiplied by `grad_scale` (clipping
  // and 1/loss scale) first; `step` is the 1-based update count for the bias corrections. On a
  // device the update is only enqueued.
  Status Update(double lr, float grad_scale, int64_t step);

 private:
  AdamWOptimizer() = default;
  OptimConfig config_;
  const Arena* params_ = nullptr;
  const Arena* grads_ = nullptr;
  bool has_master_ = false;
  Arena master_, m_, v_;
};

}  // namespace rt
