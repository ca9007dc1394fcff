// The shard contract (DESIGN.md "Parallel layout"): every rank describes its whole training state
// as pieces of named global tensors. The checkpoint layer writes and re-shards state through this
// description only, so it never needs to know the layout that produced it.
//
// A piece is the sub-array `box` (offsets and sizes per dimension of the global shape), optionally
// narrowed to the elements [flat_begin, flat_end) of the box in row-major order (ZeRO's flat
// shards cut tensors without regard to rows). Several ranks may hold the same elements (data
// parallel replicas, the tied embedding's copy on the last pipeline stage): every such copy but
// one has replica > 0, and the union of the replica-0 pieces over all ranks covers each element
// of each tensor exactly once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace rt::ckpt {

// What part of the training state a piece belongs to.
enum class StateKind : uint8_t {
  kParam = 0,   // the model's parameters in a bf16/fp16 compute dtype (fp32 ones: kMaster)
  kMaster = 1,  // fp32 master weights (the parameters themselves when they are fp32)
  kAdamM = 2,   // AdamW first moment
  kAdamV = 3,   // AdamW second moment
  kStep = 4,    // the optimizer step count (a 0-d i64 tensor named "step")
};

// "param", "master", "adam_m", "adam_v", "step".
inline const char* StateKindName(StateKind kind) {
  switch (kind) {
    case StateKind::kParam:
      return "param";
    case StateKind::kMaster:
      return "master";
    case StateKind::kAdamM:
      return "adam_m";
    case StateKind::kAdamV:
      return "adam_v";
    case StateKind::kStep:
      return "step";
  }
  return "?";
}

// One piece of one named global tensor held by this rank.
struct TensorShard {
  StateKind kind = StateKind::kParam;
  std::string name;    // DESIGN.md tensor name ("wte", "h.0.ln_1.weight", ...) or "step"
  Shape global_shape;  // shape of the whole tensor
  DType dtype = DType::kF32;
  Shape box_offset;             // per dimension: first index of the box (ndim as global_shape)
  Shape box_size;               // per dimension: extent of the box
  bool has_flat_range = false;  // whether [flat_begin, flat_end) narrows the box
  int64_t flat_begin = 0;       // first element of the box held (row-major in the box)
  int64_t flat_end = 0;         // one past the last element held
  int replica = 0;              // 0 for the primary copy, 1, 2, ... for further copies
  int replica_count = 1;  // how many ranks hold this same piece (`replica` is this rank's index
                          // among them); the checkpoint writer has each of them store a
                          // 1/replica_count flat slice. Copies with replica >= replica_count
                          // store nothing (only replica 0 when left at 1).
  Tensor view;            // this rank's memory: a 1-D view of the held elements, in order, on
                          // the engine's device (the step: host memory)

  // Elements held.
  int64_t numel() const { return view.numel(); }
};

// Everything a rank holds. Views stay valid while the engine that produced them lives and are
// changed in place by its steps.
struct StateShards {
  std::vector<TensorShard> shards;
};

}  // namespace rt::ckpt
