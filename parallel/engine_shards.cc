// DistTrainer::Shards: the engine's side of the shard contract (ckpt/shard.h), the views of
// PlanRankShards' pieces (shard_plan.h) into this rank's buffers.
#include "parallel/engine.h"

namespace rt::parallel {

ckpt::StateShards DistTrainer::Shards() {
  ckpt::StateShards out;
  for (PlannedShard& p :
       PlanRankShards(stage_, ownership_, layout_, coords_, dt_, groups_.world->rank())) {
    ckpt::TensorShard s = std::move(p.shard);
    const Buffer* buffer = nullptr;
    switch (p.source) {
      case ShardSource::kParams:
        buffer = &params_;
        break;
      case ShardSource::kLowPrecision:
        buffer = &work_;
        break;
      case ShardSource::kAdamM:
        buffer = &m_;
        break;
      case ShardSource::kAdamV:
        buffer = &v_;
        break;
      case ShardSource::kStep:
        break;
    }
    if (buffer == nullptr) {
      s.view = Tensor(&state_.adam_step, DType::kI64, Shape());
    } else {
      s.view = Tensor(Compute(*buffer) + p.element * static_cast<int64_t>(DTypeSize(s.dtype)),
                      s.dtype, Shape{p.count}, device_);
    }
    out.shards.push_back(std::move(s));
  }
  return out;
}

}  // namespace rt::parallel
