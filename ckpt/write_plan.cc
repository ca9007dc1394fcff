#include "ckpt/write_plan.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

namespace rt::ckpt {

Region RegionOf(const TensorShard& s) {
  Region r;
  r.global_shape = s.global_shape;
  r.box_offset = s.box_offset;
  r.box_size = s.box_size;
  r.has_flat_range = s.has_flat_range;
  r.flat_begin = s.flat_begin;
  r.flat_end = s.flat_end;
  return r;
}

Region RegionOf(const TensorEntry& t, const StoredPiece& p) {
  Region r;
  r.global_shape = t.global_shape;
  r.box_offset = p.box_offset;
  r.box_size = p.box_size;
  r.has_flat_range = p.has_flat_range;
  r.flat_begin = p.flat_begin;
  r.flat_end = p.flat_end;
  return r;
}

Result<std::vector<PlannedPiece>> PlanWrites(const StateShards& shards, size_t piece_bytes) {
  std::vector<PlannedPiece> plan;
  std::map<std::tuple<StateKind, std::string>, std::tuple<Shape, DType>> seen;
  for (size_t i = 0; i < shards.shards.size(); ++i) {
    const TensorShard& s = shards.shards[i];
    const std::string what = std::string("shard ") + std::to_string(i) + " (" +
                             StateKindName(s.kind) + " '" + s.name + "')";
    const Region region = RegionOf(s);
    RETURN_IF_ERROR(CheckRegion(region).WithContext(what));
    if (s.view.numel() != region.numel() || s.view.dtype() != s.dtype)
      return InvalidArgument(what + ": view " + s.view.Describe() + " does not hold its " +
                             std::to_string(region.numel()) + " elements of " +
                             std::string(DTypeName(s.dtype)));
    if (s.replica_count < 1 || s.replica < 0)
      return InvalidArgument(what + ": replica " + std::to_string(s.replica) + " of " +
                             std::to_string(s.replica_count));
    auto [it, fresh] = seen.try_emplace({s.kind, s.name}, s.global_shape, s.dtype);
    if (!fresh && (std::get<0>(it->second) != s.global_shape || std::get<1>(it->second) != s.dtype))
      return InvalidArgument(what + ": shape " + s.global_shape.ToString() +
                             " or dtype differs from another shard of the same tensor");
    if (s.replica >= s.replica_count) continue;  // another holder stores these elements
    const int64_t n = region.numel();
    const int64_t lo = n * s.replica / s.replica_count;
    const int64_t hi = n * (s.replica + 1) / s.replica_count;
    const int64_t chunk =
        std::max<int64_t>(1, static_cast<int64_t>(piece_bytes / DTypeSize(s.dtype)));
    const int64_t base = s.has_flat_range ? s.flat_begin : 0;
    for (int64_t at = lo; at < hi; at += chunk) {
      PlannedPiece p;
      p.shard = i;
      p.begin = at;
      p.end = std::min(hi, at + chunk);
      p.region = region;
      p.region.has_flat_range = !(base + p.begin == 0 && base + p.end == s.box_size.numel());
      p.region.flat_begin = p.region.has_flat_range ? base + p.begin : 0;
      p.region.flat_end = p.region.has_flat_range ? base + p.end : 0;
      plan.push_back(p);
    }
  }
  return plan;
}

}  // namespace rt::ckpt
