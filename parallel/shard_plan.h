// What a rank of a layout holds of the training state, computed from the model config and the
// layout alone — no engine, no communicator, no memory. The engine builds its ZeRO ownership and
// its Shards() from these functions, so a plan (e.g. `ringckpt reshard`'s target) and a running
// engine cannot disagree.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "ckpt/shard.h"
#include "model/config.h"
#include "model/gpt.h"
#include "parallel/layout.h"
#include "parallel/stage_layout.h"

namespace rt::parallel {

// A run of elements of one stage tensor inside a unit's owned (or ZeRO shard) range.
struct OwnedPiece {
  int tensor = 0;  // index into StageLayout::tensors
  int unit = 0;
  int64_t flat = 0;  // first element in the stage's flat layout
  int64_t own = 0;   // first element in the rank's owned buffers (AdamW m, v, ZeRO-2/3 shards)
  int64_t count = 0;
};

// What one data-parallel shard rank owns of each unit of its stage.
struct Ownership {
  // Per unit: the owned range relative to the unit ([begin, begin + size)) and where it starts
  // in the owned buffers. ZeRO-0 owns whole units; ZeRO ≥ 1 owns shard `shard` of `shards`.
  std::vector<int64_t> begin, size, offset;
  int64_t total = 0;               // elements of the owned buffers
  std::vector<OwnedPiece> update;  // owned ranges ∩ tensors: what this rank's AdamW updates
  std::vector<OwnedPiece> norm;    // shard ranges ∩ tensors: what it counts in the gradient norm
};

// The ownership of shard `shard` of `shards` (the dp_shard group) under ZeRO stage `zero`.
Ownership PlanOwnership(const StageLayout& stage, int zero, int shards, int shard);

// A range of a rank's fp32 gradient buffer that the global gradient norm sums in one reduction.
struct NormRange {
  // First element in the gradient buffer: the stage's flat layout under ZeRO-0/1, the owned
  // buffer under ZeRO-2/3.
  int64_t begin = 0;
  int64_t count = 0;
  // Counted in the norm. False for copies that another rank counts (replica groups but the
  // first, the tied wte's copy, tensors replicated on tensor-parallel ranks but the first);
  // these are only checked for inf/NaN (fp16).
  bool counted = true;
};

// The gradient norm's ranges of the rank at `coords` with `ownership` (its norm pieces, in
// order). With `merge`, pieces that follow each other in the buffer with the same `counted` form
// one range — one reduction (and on a device one host synchronisation) instead of one per
// tensor, at the price of another summation order; without it, one range per piece.
std::vector<NormRange> PlanNormRanges(const StageLayout& stage, const Ownership& ownership,
                                      int zero, const RankCoords& coords, bool merge);

// Which of the engine's buffers a planned shard's elements live in.
enum class ShardSource : uint8_t {
  kParams = 0,        // the fp32 parameters (the master weights): full stage or ZeRO-3 shard
  kLowPrecision = 1,  // the bf16/fp16 parameter copy (kParams' layout)
  kAdamM = 2,         // AdamW m (the owned buffers)
  kAdamV = 3,         // AdamW v (the owned buffers)
  kStep = 4,          // the optimizer step count (host memory)
};

// One planned piece: its description (TensorShard without a view) and where it lives in the
// engine. shard.replica_count counts the holders of the piece: data-parallel replicas,
// tensor-parallel copies of replicated tensors, the tied wte's copy; every rank for the step.
struct PlannedShard {
  ckpt::TensorShard shard;  // `view` empty
  ShardSource source = ShardSource::kParams;
  int64_t element = 0;  // first element in the source buffer
  int64_t count = 0;    // elements held
};

// The pieces of one rank, in the engine's Shards() order: parameters (bf16/fp16 only: fp32
// parameters are the master weights, described once as those), master,
// AdamW m, v, then the step. `stage` and `ownership` must be this rank's (BuildStageLayout,
// PlanOwnership with the rank's coordinates).
std::vector<PlannedShard> PlanRankShards(const StageLayout& stage, const Ownership& ownership,
                                         const ParallelLayout& layout, const RankCoords& coords,
                                         DType compute, int world_rank);

// The pieces that rank `rank` of `layout` holds for `model` in `precision` (PlanRankShards on
// the rank's stage and ownership). Errors: InvalidArgument for a rank outside the layout or a
// layout that cannot split the model (tp not dividing n_head or vocab_size, more (virtual)
// stages than blocks + 2).
Result<std::vector<PlannedShard>> PlanRankShardsOf(const ModelConfig& model, Precision precision,
                                                   const ParallelLayout& layout, int rank);

// The StateShards that rank `rank` of `layout` holds for `model` in `precision`, without views
// (PlanRankShardsOf's descriptions). Errors: those of PlanRankShardsOf.
Result<ckpt::StateShards> PlanStateShards(const ModelConfig& model, Precision precision,
                                          const ParallelLayout& layout, int rank);

}  // namespace rt::parallel
