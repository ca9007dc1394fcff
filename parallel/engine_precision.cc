// DistTrainer's bf16/fp16 pieces, as the single-process engine defines them (model/gpt.h,
// parallel/trainer.h): parameters, activations and the per-micro-batch gradient accumulation in
// the compute dtype; fp32 master weights (the engine's fp32 parameters), AdamW state and
// gradient reductions.
#include <cmath>

#include "base/fault.h"
#include "kernels/ops.h"
#include "parallel/engine.h"

namespace rt::parallel {

Status DistTrainer::InitializeLowPrecision() {
  if (!lp()) return Status();
  const size_t n = params_.size() / sizeof(float);
  ASSIGN_OR_RETURN(work_, Buffer::Allocate(device_, n * DTypeSize(dt_)));
  RETURN_IF_ERROR(Convert(work_.View(dt_, Shape{static_cast<int64_t>(n)}),
                          params_.View(DType::kF32, Shape{static_cast<int64_t>(n)})));
  if (layout_.zero < 2) {
    ASSIGN_OR_RETURN(lp_grads_,
                     Buffer::Allocate(device_, static_cast<size_t>(stage_.total) * DTypeSize(dt_)));
  }
  return Status();
}

Result<float*> DistTrainer::ReduceGrads(int unit) {
  const size_t u = static_cast<size_t>(unit);
  const int64_t size = stage_.units[u].size;
  float* full = grads_.View(DType::kF32, Shape{1}).data_as<float>() + stage_.units[u].begin;
  if (!lp()) {
    if (layout_.zero < 2) return full;
    ASSIGN_OR_RETURN(std::byte * g, UnitGrads(unit));
    return reinterpret_cast<float*>(g);
  }
  if (layout_.zero < 2) {
    if (!promoted_[u]) {
      ASSIGN_OR_RETURN(std::byte * g, UnitGrads(unit));
      RETURN_IF_ERROR(Convert(F32(full, size), Tensor(g, dt_, Shape{size}, device_)));
      promoted_[u] = true;
    }
    return full;
  }
  if (!promoted_[u]) {
    ASSIGN_OR_RETURN(std::byte * g, UnitGrads(unit));
    ASSIGN_OR_RETURN(Buffer wide, Transient(static_cast<size_t>(size)));
    RETURN_IF_ERROR(
        Convert(wide.View(DType::kF32, Shape{size}), Tensor(g, dt_, Shape{size}, device_)));
    FreeTransient(&unit_grads_[u]);
    unit_grads_[u] = std::move(wide);
    promoted_[u] = true;
  }
  return static_cast<float*>(unit_grads_[u].data());
}

Status DistTrainer::InjectOverflow() {
  if (RT_FAULT_POINT("parallel.dist.grad_overflow").ok() || ownership_.norm.empty())
    return Status();
  const Piece& pc = ownership_.norm.front();
  float* g = grads_.View(DType::kF32, Shape{1}).data_as<float>();
  float inf = INFINITY;
  return Copy(F32(g + (layout_.zero < 2 ? pc.flat : pc.own), 1),
              Tensor(&inf, DType::kF32, Shape{1}));
}

}  // namespace rt::parallel
