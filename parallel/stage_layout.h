// Which model tensors a pipeline stage holds and where they live in the stage's flat fp32
// parameter (and gradient) buffer. Tensors are grouped into units: the units that ZeRO-3
// gathers, that DDP reduces as one gradient bucket and that ZeRO shards. On the first and last
// stages two auxiliary units come first, {wte} (the last stage's is the tied copy) and {wpe,
// ln_f.weight, ln_f.bias} (those the stage has); then one unit per transformer block. Each unit
// is padded to a multiple of the shard count, and shard r of a unit is its r-th equal slice
// (after llm.c's zero.cuh ShardInfo).
#pragma once

#include <string>
#include <vector>

#include "kernels/tensor.h"
#include "parallel/config.h"

namespace rt::parallel {

// A box of a global tensor held by one tensor-parallel rank: the local tensor is the
// concatenation of its boxes, each stored row-major.
struct TensorBox {
  Shape offset;             // first index per dimension in the global tensor
  Shape size;               // extent per dimension
  int64_t local_begin = 0;  // first element of the box in the local tensor
};

// One tensor of the stage (this tensor-parallel rank's part of it).
struct StageTensor {
  std::string name;              // DESIGN.md name, e.g. "h.1.mlp.c_fc.weight"
  Shape shape;                   // the local shape (the global one when tp = 1 or replicated)
  Shape global_shape;            // the whole tensor's shape
  std::vector<TensorBox> boxes;  // where the local tensor sits in the global one
  bool tp_sharded = false;       // split across tensor-parallel ranks (else replicated there)
  int64_t offset = 0;            // first element in the stage's flat buffer
  int unit = 0;                  // the unit holding it
  bool tied_copy = false;        // the last stage's copy of wte (pp > 1): a replica of stage 0's
  bool decayed = false;          // AdamW weight decay applies (2-D weights)
};

// A unit: a contiguous, padded range of the flat buffer.
struct StageUnit {
  int64_t begin = 0;         // first element
  int64_t size = 0;          // elements including padding (a multiple of the shard count)
  int layer = -1;            // the block index, or -1 for an auxiliary unit
  std::vector<int> tensors;  // indices into StageLayout::tensors, in order
  // Elements of shard r: [begin + r·shard_size(), begin + (r+1)·shard_size()).
  int64_t shard_size(int shards) const { return size / shards; }
};

// One model chunk of a pipeline rank: a virtual stage of the interleaved schedule, or the whole
// stage otherwise. Its blocks are the units [first_unit, first_unit + layers()).
struct StageChunk {
  int virtual_stage = 0;               // chunk c of rank s is virtual stage c·stages + s
  int first_layer = 0, end_layer = 0;  // blocks [first_layer, end_layer)
  int first_unit = 0;
  bool has_embedding = false;  // the first virtual stage
  bool has_head = false;       // the last virtual stage
  int layers() const { return end_layer - first_layer; }
};

// The layout of one stage (pipeline rank).
struct StageLayout {
  int stage = 0, stages = 1;
  std::vector<StageChunk> chunks;  // in order; one unless the schedule is interleaved
  bool has_embedding = false;      // wte + wpe (the first stage)
  bool has_head = false;           // ln_f + the logits through wte (the last stage)
  int tp = 1, tp_rank = 0;         // tensor-parallel size and this rank's index
  int shards = 1;                  // shard count every unit is padded for
  std::vector<StageTensor> tensors;
  std::vector<StageUnit> units;  // aux_units auxiliary units, then one per block, chunk
                                 // by chunk
  int aux_units = 0;             // 2 on the first and last stages, 0 in the middle
  int64_t total = 0;             // flat buffer elements (padded)

  // Blocks over all chunks.
  int layers() const;
  // Elements that are real parameters (no padding).
  int64_t num_params() const;
};

// The first block of stage s of p for L blocks: blocks are spread evenly, a remainder going to
// the middle stages first (the first stage also runs the embedding, the last the head).
int StageFirstLayer(int n_layer, int stages, int stage);

// Builds the layout of `stage` of `stages` for `model` as held by tensor-parallel rank `tp_rank`
// of `tp` (Megatron's split: wte by vocabulary rows; c_attn and c_fc by output rows — c_attn's
// q, k and v each by heads; both c_proj weights by input columns; LayerNorms, wpe and the
// c_proj biases replicated), units padded to multiples of `shards`. `tp` must divide n_head and
// vocab_size. With `virtual_stages` v > 1 the blocks are spread over stages · v virtual stages
// and the stage holds chunks c = 0..v−1, virtual stages c·stages + stage.
StageLayout BuildStageLayout(const ModelConfig& model, int stages, int stage, int shards,
                             int tp = 1, int tp_rank = 0, int virtual_stages = 1);

}  // namespace rt::parallel
