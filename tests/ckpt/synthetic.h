// Synthetic training states for the ckpt tests: a few tensors of 1-3 dimensions, cut the way the
// engine cuts them (tensor-parallel boxes along rows or columns, data-parallel replicas or
// ZeRO-style flat ranges), with reference values that depend only on (kind, tensor, global
// element), plus the 0-d "step" held by every rank. A naive per-element reference checks loads.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/shard.h"

namespace rt::ckpt::testing {

// How a synthetic layout cuts the state: world = tp * dp.
struct SynthLayout {
  int tp = 1;
  int dp = 1;
  bool zero = false;     // dp ranks hold flat ranges of each box instead of replicas
  bool columns = false;  // tp cuts the last dimension instead of the first
  bool spread = true;    // replicas carry replica_count = dp (else 1: replica 0 writes all)
  int world() const { return tp * dp; }
  std::string Name() const {
    return "tp" + std::to_string(tp) + "dp" + std::to_string(dp) + (zero ? "zero" : "") +
           (columns ? "cols" : "") + (spread ? "" : "nospread");
  }
};

struct SynthTensor {
  std::string name;
  Shape shape;
};

inline std::vector<SynthTensor> SynthModel() {
  return {{"wte", Shape{37, 12}},
          {"h.0.attn.weight", Shape{12, 36}},
          {"h.0.ln_1.bias", Shape{12}},
          {"cube", Shape{5, 6, 7}}};
}

// The reference value of element `g` (global row-major index) of (kind, name).
inline float RefValue(StateKind kind, const std::string& name, int64_t g) {
  uint32_t h = 2166136261u;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  return static_cast<float>(static_cast<int>(kind) + 1) * 0.001f * static_cast<float>(g) +
         static_cast<float>(h % 1000) - 0.37f;
}

// bf16 bits of a float (truncation: enough for a reference).
inline uint16_t Bf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

// The naive global index of the k-th element held by a shard.
inline int64_t NaiveGlobalIndex(const TensorShard& s, int64_t k) {
  const int nd = s.global_shape.ndim;
  if (nd == 0) return 0;
  int64_t in_box = k + (s.has_flat_range ? s.flat_begin : 0);
  std::vector<int64_t> coord(nd);
  for (int d = nd - 1; d >= 0; --d) {
    coord[d] = in_box % s.box_size.dims[d] + s.box_offset.dims[d];
    in_box /= s.box_size.dims[d];
  }
  int64_t g = 0;
  for (int d = 0; d < nd; ++d) g = g * s.global_shape.dims[d] + coord[d];
  return g;
}

constexpr int64_t kSynthStep = 4242;

// The opaque engine state the tests save with `step`.
inline std::string EngineStateOf(int64_t step) { return "engine state at " + std::to_string(step); }

// One rank's state of a synthetic layout, owning its memory.
struct SynthRank {
  std::vector<std::unique_ptr<std::vector<uint8_t>>> memory;
  StateShards shards;
};

// Builds rank `rank`'s shards; with `fill` the reference values, else zeros.
inline SynthRank MakeRank(const SynthLayout& layout, int rank, bool fill) {
  SynthRank out;
  const int tp_id = rank % layout.tp, dp_id = rank / layout.tp;
  auto add = [&](StateKind kind, const SynthTensor& t, DType dtype, Shape box_offset,
                 Shape box_size, bool flat, int64_t fb, int64_t fe, int replica, int count) {
    TensorShard s;
    s.kind = kind;
    s.name = t.name;
    s.global_shape = t.shape;
    s.dtype = dtype;
    s.box_offset = box_offset;
    s.box_size = box_size;
    s.has_flat_range = flat;
    s.flat_begin = flat ? fb : 0;
    s.flat_end = flat ? fe : 0;
    s.replica = replica;
    s.replica_count = count;
    const int64_t n = flat ? fe - fb : box_size.numel();
    out.memory.push_back(std::make_unique<std::vector<uint8_t>>(n * DTypeSize(dtype), 0));
    s.view = Tensor(out.memory.back()->data(), dtype, Shape{n});
    if (fill)
      for (int64_t k = 0; k < n; ++k) {
        const float v = RefValue(kind, t.name, NaiveGlobalIndex(s, k));
        if (dtype == DType::kBF16) {
          s.view.data_as<uint16_t>()[k] = Bf16Bits(v);
        } else {
          s.view.data_as<float>()[k] = v;
        }
      }
    out.shards.shards.push_back(s);
  };
  for (StateKind kind : {StateKind::kParam, StateKind::kMaster, StateKind::kAdamM}) {
    const DType dtype = kind == StateKind::kParam ? DType::kBF16 : DType::kF32;
    for (const SynthTensor& t : SynthModel()) {
      const int dim = layout.columns ? t.shape.ndim - 1 : 0;
      Shape offset = t.shape, size = t.shape;
      for (int d = 0; d < t.shape.ndim; ++d) offset.dims[d] = 0;
      const int64_t n = t.shape.dims[dim];
      offset.dims[dim] = n * tp_id / layout.tp;
      size.dims[dim] = n * (tp_id + 1) / layout.tp - offset.dims[dim];
      if (layout.zero) {
        const int64_t m = size.numel();
        const int64_t fb = m * dp_id / layout.dp, fe = m * (dp_id + 1) / layout.dp;
        if (fb < fe) add(kind, t, dtype, offset, size, fb != 0 || fe != m, fb, fe, 0, 1);
      } else {
        add(kind, t, dtype, offset, size, false, 0, 0, dp_id, layout.spread ? layout.dp : 1);
      }
    }
  }
  TensorShard step;
  step.kind = StateKind::kStep;
  step.name = "step";
  step.dtype = DType::kI64;
  step.replica = rank;
  step.replica_count = layout.spread ? layout.world() : 1;
  out.memory.push_back(std::make_unique<std::vector<uint8_t>>(8, 0));
  step.view = Tensor(out.memory.back()->data(), DType::kI64, Shape());
  if (fill) *step.view.data_as<int64_t>() = kSynthStep;
  out.shards.shards.push_back(step);
  return out;
}

// Empty when every element of `rank` holds its reference value; else the first mismatch.
inline std::string CheckRank(const SynthRank& rank) {
  for (const TensorShard& s : rank.shards.shards) {
    if (s.kind == StateKind::kStep) {
      if (*s.view.data_as<int64_t>() != kSynthStep)
        return "step is " + std::to_string(*s.view.data_as<int64_t>());
      continue;
    }
    for (int64_t k = 0; k < s.view.numel(); ++k) {
      const float v = RefValue(s.kind, s.name, NaiveGlobalIndex(s, k));
      const bool ok = s.dtype == DType::kBF16 ? s.view.data_as<uint16_t>()[k] == Bf16Bits(v)
                                              : s.view.data_as<float>()[k] == v;
      if (!ok)
        return std::string(StateKindName(s.kind)) + " '" + s.name + "' box " +
               s.box_offset.ToString() + "+" + s.box_size.ToString() + " element " +
               std::to_string(k) + " (global " + std::to_string(NaiveGlobalIndex(s, k)) +
               ") is wrong";
    }
  }
  return "";
}

}  // namespace rt::ckpt::testing
