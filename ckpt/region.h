// The geometry of pieces (shard.h): a box of a global tensor, optionally narrowed to a flat range
// of the box's row-major order. Re-sharding is the overlap of two such regions.
#pragma once

#include <cstdint>
#include <functional>

#include "base/status.h"
#include "kernels/tensor.h"

namespace rt::ckpt {

// Where a piece's elements lie in its global tensor.
struct Region {
  Shape global_shape;
  Shape box_offset;
  Shape box_size;
  bool has_flat_range = false;
  int64_t flat_begin = 0;
  int64_t flat_end = 0;

  // Elements held.
  int64_t numel() const { return has_flat_range ? flat_end - flat_begin : box_size.numel(); }
};

// OK when the region is well formed: box dims as the global shape's, inside it, non-empty, and
// the flat range (if any) a non-empty part of the box. Errors: InvalidArgument naming the fault.
Status CheckRegion(const Region& region);

// Calls `run(a_index, b_index, count)` for every maximal run of elements held by both `a` and
// `b` (same global shape), where a_index/b_index are positions among the elements each holds
// (row-major in the box, counted from the flat range's start). Runs come in increasing order.
void ForEachOverlap(const Region& a, const Region& b,
                    const std::function<void(int64_t, int64_t, int64_t)>& run);

// The global row-major element index of the `index`-th element held by `region` (a slow,
// obvious reference for tests and tools).
int64_t GlobalIndexOf(const Region& region, int64_t index);

}  // namespace rt::ckpt
