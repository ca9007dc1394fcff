#include "ckpt/region.h"

#include <algorithm>
#include <string>

namespace rt::ckpt {
namespace {

// A 0-d tensor is treated as the 1-d tensor [1] held whole.
Region Normalized(const Region& r) {
  if (r.global_shape.ndim > 0) return r;
  Region n = r;
  n.global_shape = Shape{1};
  n.box_offset = Shape{0};
  n.box_size = Shape{1};
  return n;
}

std::string Describe(const Region& r) {
  std::string s = "box offset " + r.box_offset.ToString() + " size " + r.box_size.ToString() +
                  " of " + r.global_shape.ToString();
  if (r.has_flat_range)
    s += " flat [" + std::to_string(r.flat_begin) + ", " + std::to_string(r.flat_end) + ")";
  return s;
}

}  // namespace

Status CheckRegion(const Region& r) {
  if (r.box_offset.ndim != r.global_shape.ndim || r.box_size.ndim != r.global_shape.ndim)
    return InvalidArgument(Describe(r) + ": box dimensions differ from the tensor's");
  for (int d = 0; d < r.global_shape.ndim; ++d)
    if (r.box_offset.dims[d] < 0 || r.box_size.dims[d] <= 0 ||
        r.box_offset.dims[d] + r.box_size.dims[d] > r.global_shape.dims[d])
      return InvalidArgument(Describe(r) + ": box outside the tensor or empty");
  if (r.has_flat_range &&
      (r.flat_begin < 0 || r.flat_begin >= r.flat_end || r.flat_end > r.box_size.numel()))
    return InvalidArgument(Describe(r) + ": flat range not a non-empty part of the box");
  return Status();
}

void ForEachOverlap(const Region& a_in, const Region& b_in,
                    const std::function<void(int64_t, int64_t, int64_t)>& run) {
  const Region a = Normalized(a_in);
  const Region b = Normalized(b_in);
  const int nd = a.global_shape.ndim;
  int64_t lo[Shape::kMaxDims], hi[Shape::kMaxDims];
  int64_t stride_a[Shape::kMaxDims], stride_b[Shape::kMaxDims];
  for (int d = 0; d < nd; ++d) {
    lo[d] = std::max(a.box_offset.dims[d], b.box_offset.dims[d]);
    hi[d] = std::min(a.box_offset.dims[d] + a.box_size.dims[d],
                     b.box_offset.dims[d] + b.box_size.dims[d]);
    if (lo[d] >= hi[d]) return;
  }
  stride_a[nd - 1] = stride_b[nd - 1] = 1;
  for (int d = nd - 2; d >= 0; --d) {
    stride_a[d] = stride_a[d + 1] * a.box_size.dims[d + 1];
    stride_b[d] = stride_b[d + 1] * b.box_size.dims[d + 1];
  }
  const int64_t a0 = a.has_flat_range ? a.flat_begin : 0;
  const int64_t a1 = a.has_flat_range ? a.flat_end : a.box_size.numel();
  const int64_t b0 = b.has_flat_range ? b.flat_begin : 0;
  const int64_t b1 = b.has_flat_range ? b.flat_end : b.box_size.numel();
  if (nd >= 2) {  // only the rows of dimension 0 that the flat ranges reach
    lo[0] = std::max(
        {lo[0], a.box_offset.dims[0] + a0 / stride_a[0], b.box_offset.dims[0] + b0 / stride_b[0]});
    hi[0] = std::min({hi[0], a.box_offset.dims[0] + (a1 - 1) / stride_a[0] + 1,
                      b.box_offset.dims[0] + (b1 - 1) / stride_b[0] + 1});
    if (lo[0] >= hi[0]) return;
  }
  const int last = nd - 1;
  const int64_t len = hi[last] - lo[last];
  int64_t idx[Shape::kMaxDims];
  for (int d = 0; d < nd; ++d) idx[d] = lo[d];
  for (;;) {
    int64_t pa = 0, pb = 0;
    for (int d = 0; d < nd; ++d) {
      pa += (idx[d] - a.box_offset.dims[d]) * stride_a[d];
      pb += (idx[d] - b.box_offset.dims[d]) * stride_b[d];
    }
    const int64_t c0 = std::max({int64_t{0}, a0 - pa, b0 - pb});
    const int64_t c1 = std::min({len, a1 - pa, b1 - pb});
    if (c0 < c1) run(pa + c0 - a0, pb + c0 - b0, c1 - c0);
    int d = last - 1;  // odometer over every dimension but the last
    for (; d >= 0; --d) {
      if (++idx[d] < hi[d]) break;
      idx[d] = lo[d];
    }
    if (d < 0) return;
  }
}

int64_t GlobalIndexOf(const Region& r_in, int64_t index) {
  const Region r = Normalized(r_in);
  int64_t in_box = index + (r.has_flat_range ? r.flat_begin : 0);
  int64_t global = 0;
  int64_t global_stride = 1;
  for (int d = r.global_shape.ndim - 1; d >= 0; --d) {
    const int64_t coord = in_box % r.box_size.dims[d];
    in_box /= r.box_size.dims[d];
    global += (coord + r.box_offset.dims[d]) * global_stride;
    global_stride *= r.global_shape.dims[d];
  }
  return global;
}

}  // namespace rt::ckpt
