#include "parallel/shard_plan.h"

#include <algorithm>
#include <string>

namespace rt::parallel {

Ownership PlanOwnership(const StageLayout& stage, int zero, int shards, int shard) {
  Ownership o;
  const size_t units = stage.units.size();
  o.begin.assign(units, 0);
  o.size.assign(units, 0);
  o.offset.assign(units, 0);
  for (size_t u = 0; u < units; ++u) {
    const StageUnit& unit = stage.units[u];
    const int64_t k = unit.shard_size(shards);
    o.begin[u] = zero == 0 ? 0 : shard * k;
    o.size[u] = zero == 0 ? unit.size : k;
    o.offset[u] = o.total;
    o.total += o.size[u];
  }
  // The intersections of each unit's owned (update) or shard (norm) range with its tensors.
  auto pieces = [&](bool owned) {
    std::vector<OwnedPiece> out;
    for (size_t u = 0; u < units; ++u) {
      const StageUnit& unit = stage.units[u];
      const int64_t k = unit.shard_size(shards);
      const int64_t lo = unit.begin + (owned ? o.begin[u] : shard * k);
      const int64_t hi = lo + (owned ? o.size[u] : k);
      for (int ti : unit.tensors) {
        const StageTensor& t = stage.tensors[static_cast<size_t>(ti)];
        const int64_t a = std::max(lo, t.offset), b = std::min(hi, t.offset + t.shape.numel());
        if (a >= b) continue;
        out.push_back(OwnedPiece{ti, static_cast<int>(u), a,
                                 o.offset[u] + (a - unit.begin - o.begin[u]), b - a});
      }
    }
    return out;
  };
  o.update = pieces(true);
  o.norm = pieces(false);
  return o;
}

std::vector<NormRange> PlanNormRanges(const StageLayout& stage, const Ownership& ownership,
                                      int zero, const RankCoords& coords, bool merge) {
  std::vector<NormRange> out;
  for (const OwnedPiece& pc : ownership.norm) {
    const StageTensor& t = stage.tensors[static_cast<size_t>(pc.tensor)];
    const NormRange r{zero < 2 ? pc.flat : pc.own, pc.count,
                      coords.dp_replicate == 0 && !t.tied_copy && (t.tp_sharded || coords.tp == 0)};
    if (merge && !out.empty() && out.back().counted == r.counted &&
        out.back().begin + out.back().count == r.begin) {
      out.back().count += r.count;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<PlannedShard> PlanRankShards(const StageLayout& stage, const Ownership& ownership,
                                         const ParallelLayout& layout, const RankCoords& coords,
                                         DType compute, int world_rank) {
  std::vector<PlannedShard> out;
  const int zero = layout.zero;
  // The copies of one piece are told apart by the data-parallel ranks holding it (all of them,
  // or the replica groups when ZeRO shards it), the tensor-parallel ranks when the tensor is
  // replicated there, and the tied wte's second set of copies on the last stage.
  auto copies = [&](const StageTensor& t, bool zero_sharded) {
    const int dp_copies = zero_sharded ? layout.dp_replicate : layout.dp();
    const int tp_copies = t.tp_sharded ? 1 : layout.tp;
    return dp_copies * tp_copies * (layout.pp > 1 && t.name == "wte" ? 2 : 1);
  };
  auto replica = [&](const StageTensor& t, bool zero_sharded) {
    const int dp_copies = zero_sharded ? layout.dp_replicate : layout.dp();
    const int dp_id = zero_sharded ? coords.dp_replicate : coords.dp;
    const int tp_copies = t.tp_sharded ? 1 : layout.tp;
    const int tp_id = t.tp_sharded ? 0 : coords.tp;
    return (t.tied_copy ? dp_copies * tp_copies : 0) + dp_id * tp_copies + tp_id;
  };
  // Emits local elements [begin, begin + count) of tensor `ti`, which start at element `at` of
  // `source`, split by box.
  auto emit = [&](ckpt::StateKind kind, ShardSource source, int ti, int64_t begin, int64_t count,
                  int64_t at, DType dtype, bool zero_sharded) {
    const StageTensor& t = stage.tensors[static_cast<size_t>(ti)];
    for (const TensorBox& b : t.boxes) {
      const int64_t lo = std::max(begin, b.local_begin);
      const int64_t hi = std::min(begin + count, b.local_begin + b.size.numel());
      if (lo >= hi) continue;
      PlannedShard p;
      ckpt::TensorShard& s = p.shard;
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
      p.source = source;
      p.element = at + (lo - begin);
      p.count = hi - lo;
      s.replica_count = copies(t, zero_sharded);
      out.push_back(std::move(p));
    }
  };
  const bool low = compute != DType::kF32;
  // Parameters in the compute dtype (bf16/fp16: the low-precision copy in the master's layout)
  // and the fp32 master weights. fp32 parameters are their own master weights, the same
  // memory: they are described once, as the master, so a checkpoint stores them once.
  for (ckpt::StateKind kind : {ckpt::StateKind::kParam, ckpt::StateKind::kMaster}) {
    if (kind == ckpt::StateKind::kParam && !low) continue;
    const bool lp = kind == ckpt::StateKind::kParam;
    const ShardSource source = lp ? ShardSource::kLowPrecision : ShardSource::kParams;
    const DType dtype = lp ? compute : DType::kF32;
    if (zero < 3) {
      for (size_t ti = 0; ti < stage.tensors.size(); ++ti) {
        const StageTensor& t = stage.tensors[ti];
        emit(kind, source, static_cast<int>(ti), 0, t.shape.numel(), t.offset, dtype, false);
      }
    } else {
      for (const OwnedPiece& pc : ownership.update) {
        const int64_t begin = pc.flat - stage.tensors[static_cast<size_t>(pc.tensor)].offset;
        emit(kind, source, pc.tensor, begin, pc.count, pc.own, dtype, true);
      }
    }
  }
  for (ckpt::StateKind kind : {ckpt::StateKind::kAdamM, ckpt::StateKind::kAdamV}) {
    const ShardSource source =
        kind == ckpt::StateKind::kAdamM ? ShardSource::kAdamM : ShardSource::kAdamV;
    for (const OwnedPiece& pc : ownership.update) {
      const int64_t begin = pc.flat - stage.tensors[static_cast<size_t>(pc.tensor)].offset;
      emit(kind, source, pc.tensor, begin, pc.count, pc.own, DType::kF32, zero > 0);
    }
  }
  PlannedShard step;
  step.shard.kind = ckpt::StateKind::kStep;
  step.shard.name = "step";
  step.shard.dtype = DType::kI64;
  step.shard.replica = world_rank;
  step.source = ShardSource::kStep;
  step.count = 1;
  step.shard.replica_count = layout.world();
  out.push_back(std::move(step));
  return out;
}

Result<std::vector<PlannedShard>> PlanRankShardsOf(const ModelConfig& model, Precision precision,
                                                   const ParallelLayout& layout, int rank) {
  if (rank < 0 || rank >= layout.world())
    return InvalidArgument("rank " + std::to_string(rank) + " is outside the layout " +
                           DescribeLayout(layout) + " of " + std::to_string(layout.world()) +
                           " ranks");
  if (model.n_head % layout.tp != 0 || model.vocab_size % layout.tp != 0)
    return InvalidArgument("layout tp=" + std::to_string(layout.tp) +
                           " must divide model.n_head (" + std::to_string(model.n_head) +
                           ") and model.vocab_size (" + std::to_string(model.vocab_size) + ")");
  if (layout.pp * layout.virtual_stages > model.n_layer + 2)
    return InvalidArgument("layout pp=" + std::to_string(layout.pp) + " × vpp=" +
                           std::to_string(layout.virtual_stages) + " exceeds model.n_layer + 2 (" +
                           std::to_string(model.n_layer + 2) + ")");
  const RankCoords coords = CoordsOf(layout, rank);
  const StageLayout stage = BuildStageLayout(model, layout.pp, coords.pp, layout.dp_shard,
                                             layout.tp, coords.tp, layout.virtual_stages);
  const Ownership ownership = PlanOwnership(stage, layout.zero, layout.dp_shard, coords.dp_shard);
  return PlanRankShards(stage, ownership, layout, coords, ComputeDType(precision), rank);
}

Result<ckpt::StateShards> PlanStateShards(const ModelConfig& model, Precision precision,
                                          const ParallelLayout& layout, int rank) {
  ASSIGN_OR_RETURN(std::vector<PlannedShard> planned,
                   PlanRankShardsOf(model, precision, layout, rank));
  ckpt::StateShards out;
  for (PlannedShard& p : planned) out.shards.push_back(std::move(p.shard));
  return out;
}

}  // namespace rt::parallel
