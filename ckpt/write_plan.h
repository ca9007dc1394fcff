// The write plan (after PyTorch DCP's deduplicating planner, without its communication): which
// elements of its shards a rank stores. Only replica-0 data reaches the checkpoint, but the
// writing of a piece held by R ranks is spread over them: holder `replica` of `replica_count`
// stores the flat slice [n*replica/R, n*(replica+1)/R) of the piece's n elements, so every holder
// decides alone and the slices cover the piece exactly once. Slices are cut further into chunks
// of at most `piece_bytes`, each its own stored piece with its own CRC32C, so that a reader can
// read and verify just the pieces it needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "ckpt/manifest.h"
#include "ckpt/region.h"
#include "ckpt/shard.h"

namespace rt::ckpt {

// One stored piece to write: elements [begin, end) of shards[shard].view, stored as `region`.
struct PlannedPiece {
  size_t shard = 0;
  int64_t begin = 0;
  int64_t end = 0;
  Region region;
};

// The pieces this rank stores, in shard order. Errors: InvalidArgument naming the shard when one
// is malformed (box outside its tensor, a view whose size is not the held element count, a
// replica index out of range or a name used with two shapes or dtypes).
Result<std::vector<PlannedPiece>> PlanWrites(const StateShards& shards, size_t piece_bytes);

// The region of a shard (its box and flat range).
Region RegionOf(const TensorShard& shard);
// The region of stored piece `piece` of `tensor` (its box and flat range).
Region RegionOf(const TensorEntry& tensor, const StoredPiece& piece);

}  // namespace rt::ckpt
