// DistTrainer::Shards: the engine's side of the shard contract (shard.h).
#include <algorithm>

#include "parallel/engine.h"

namespace rt::parallel {

ckpt::StateShards DistTrainer::Shards() {
  ckpt::StateShards out;
  const int zero = layout_.zero;
  // Replica id: the copies of one piece are told apart by the data-parallel ranks holding it
  // (all of them, or the replica groups when ZeRO shards it), the tensor-parallel ranks when
  // the tensor is replicated there, and the tied wte's second set of copies on the last stage.
  auto replica = [&](const StageTensor& t, bool zero_sharded) {
    const int dp_copies = zero_sharded ? layout_.dp_replicate : layout_.dp();
    const int dp_id = zero_sharded ? coords_.dp_replicate : coords_.dp;
    const int tp_copies = t.tp_sharded ? 1 : layout_.tp;
    const int tp_id = t.tp_sharded ? 0 : coords_.tp;
    return (t.tied_copy ? dp_copies * tp_copies : 0) + dp_id * tp_copies + tp_id;
  };
  // Emits local elements [begin, begin+count) of tensor `ti` (viewed at `data`, of `dtype`),
  // split by box.
  auto emit = [&](ckpt::StateKind kind, int ti, int64_t begin, int64_t count, std::byte* data,
                  DType dtype, bool zero_sharded) {
    const StageTensor& t = stage_.tensors[static_cast<size_t>(ti)];
    for (const TensorBox& b : t.boxes) {
      const int64_t lo = std::max(begin, b.local_begin);
      const int64_t hi = std::min(begin + count, b.local_begin + b.size.numel());
      if (lo >= hi) continue;
      ckpt::TensorShard s;
      s.kind = kind;
      s.name = t.name;
      s.global_shape = t.global_shape;
      s.box_offset = b.offset;
      s.box_size = b.size;
      s.has_flat_range = lo != b.local_begin || hi != b.local_begin + b.size.numel();
      s.flat_begin = s.has_flat_range ? lo - b.local_begin : 0;
      s.flat_end = s.has_flat_range ? hi - b.local_begin : 0;
      s.replica = replica(t, zero_sharded);
      s.dtype = dtype;
      s.view = Tensor(data + (lo - begin) * static_cast<int64_t>(DTypeSize(dtype)), dtype,
                      Shape{hi - lo}, device_);
      out.shards.push_back(std::move(s));
    }
  };
  const DType f32 = DType::kF32;
  const size_t fs = sizeof(float);
  // Parameters (the fp32 ones are their own master weights; bf16/fp16 ones are the
  // low-precision copy in the same layout) and the fp32 master weights.
  for (ckpt::StateKind kind : {ckpt::StateKind::kParam, ckpt::StateKind::kMaster}) {
    const bool low = kind == ckpt::StateKind::kParam && lp();
    std::byte* base = Compute(low ? work_ : params_);
    const DType dtype = low ? dt_ : f32;
    const size_t size = DTypeSize(dtype);
    if (zero < 3) {
      for (size_t ti = 0; ti < stage_.tensors.size(); ++ti) {
        const StageTensor& t = stage_.tensors[ti];
        emit(kind, static_cast<int>(ti), 0, t.shape.numel(), base + t.offset * size, dtype, false);
      }
    } else {
      for (const Piece& pc : update_pieces_) {
        const int64_t begin = pc.flat - stage_.tensors[static_cast<size_t>(pc.tensor)].offset;
        emit(kind, pc.tensor, begin, pc.count, base + pc.own * size, dtype, true);
      }
    }
  }
  for (ckpt::StateKind kind : {ckpt::StateKind::kAdamM, ckpt::StateKind::kAdamV}) {
    std::byte* base = Compute(kind == ckpt::StateKind::kAdamM ? m_ : v_);
    for (const Piece& pc : update_pieces_) {
      const int64_t begin = pc.flat - stage_.tensors[static_cast<size_t>(pc.tensor)].offset;
      emit(kind, pc.tensor, begin, pc.count, base + pc.own * fs, f32, zero > 0);
    }
  }
  ckpt::TensorShard step;
  step.kind = ckpt::StateKind::kStep;
  step.name = "step";
  step.dtype = DType::kI64;
  step.replica = groups_.world->rank();
  step.view = Tensor(&state_.adam_step, DType::kI64, Shape());
  out.shards.push_back(std::move(step));
  return out;
}

}  // namespace rt::parallel
