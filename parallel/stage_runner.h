// The forward and backward passes of one pipeline stage over micro-batches, piece by piece
// (embedding, each block, the head), so the engine can gather ZeRO-3 parameters before a piece,
// reduce a block's gradients as soon as its backward is done, and send activations between
// stages. Activations live in `slots` independent sets (one per micro-batch in flight); the
// backward scratch is shared. The math is the single-process model's own functions
// (model/block.h's blocks, model/pieces.h's embedding and head), with tensor parallelism given
// the Megatron collectives of tensor_parallel.h and local activation widths; only the
// vocabulary-parallel loss is this file's. Activations are in the compute dtype (fp32, bf16 or
// fp16) except the f32 statistics, as in the single-process model. Not thread-safe.
#pragma once

#include <memory>
#include <span>

#include "base/status.h"
#include "kernels/tensor.h"
#include "model/gpt.h"
#include "model/pieces.h"
#include "parallel/config.h"
#include "parallel/stage_layout.h"
#include "parallel/tensor_parallel.h"

namespace rt::parallel {

// Activations and scratch of one model chunk of a stage for micro-batches of `rows` × seq_len
// tokens.
class StageRunner {
 public:
  // Allocates `slots` activation sets of model chunk `chunk` of `layout` (its blocks, and the
  // head when it has it) for the local widths of layout.tp ranks (whose collectives go over
  // `tp`); with `sequence_parallel` (and tp > 1) the residual stream holds seq_len / tp
  // positions per rank. With `recompute` only the blocks' inputs are kept per slot and
  // BlockBackward runs the block's forward again first. Activations are `dtype`, on `device`.
  // Errors: ResourceExhausted; those of allocation on `device`.
  static Result<std::unique_ptr<StageRunner>> Create(const ModelConfig& model,
                                                     const StageLayout& layout, int chunk, int rows,
                                                     int slots, TpGroup tp, bool sequence_parallel,
                                                     bool recompute, DType dtype, Device device);

  // (With sequence parallelism every [rows,T,C] of the residual stream below is this rank's
  // [rows,T/tp,C].) The stage input [rows,T,C] of `slot` (the embedding output on the first stage;
  // what the previous stage sent otherwise) and its output (what goes to the next stage).
  Tensor input(int slot) const;
  Tensor output(int slot) const;
  // dL/d output [rows,T,C]: what the next stage sends back (or the head's backward writes).
  Tensor dout(int slot) const;
  // dL/d input [rows,T,C] after the backward of every block (what goes to the previous stage):
  // the same buffer as dout — the residual gradient flows through it in place.
  Tensor dinput(int slot) const;
  // Input tokens and targets [rows,T] (i32) of `slot`.
  Tensor tokens(int slot) const;
  Tensor targets(int slot) const;

  // input(slot) = wte[tokens] + wpe (first stage).
  Status EmbeddingForward(int slot, Tensor wte, Tensor wpe);
  // Runs the chunk's block `j` (0-based within the chunk) of `slot`.
  Status BlockForward(int slot, int j, const BlockTensors& p);
  // The loss path on output(slot): ln_f, logits through wte, cross-entropy against targets(slot).
  // Leaves dloss·dL/dlogits for HeadBackward and returns the sum of the per-token losses.
  Result<double> HeadForward(int slot, Tensor ln_f_w, Tensor ln_f_b, Tensor wte, float dloss);
  // Accumulates the head's gradients into g_* and writes dout(slot).
  Status HeadBackward(int slot, Tensor ln_f_w, Tensor wte, Tensor g_ln_f_w, Tensor g_ln_f_b,
                      Tensor g_wte);
  // Backward of block `j` (call for j = layers-1 down to 0): accumulates into `g` and turns
  // the residual gradient in dout(slot) into dL/d block input.
  Status BlockBackward(int slot, int j, const BlockTensors& p, const BlockTensors& g);
  // Accumulates the embedding gradients from dinput(slot) (first stage).
  Status EmbeddingBackward(int slot, Tensor g_wte, Tensor g_wpe);

  int rows() const { return rows_; }
  int slots() const { return slots_; }
  // Bytes of activations and scratch held.
  size_t bytes() const { return acts_.bytes(); }

 private:
  StageRunner() = default;
  struct SlotIds {
    std::vector<int> residual;  // layers+1 streams: [0] input, [j+1] block j's output
    int tokens, targets, lnf, lnf_mean, lnf_rstd, logits, losses, dout;
  };
  Tensor Get(int id) const { return acts_.Get(id); }
  BlockActivations Acts(int slot, int j) const;
  HeadActivations Head(int slot) const;
  BlockGradScratch Scratch() const;

  ModelConfig model_;
  TpGroup tp_;
  int layers_ = 0, rows_ = 0, slots_ = 0;
  int n_head_local_ = 0;
  int64_t vocab_start_ = 0;
  bool sp_ = false;               // sequence parallelism
  bool recompute_ = false;        // one shared set of block activations, rebuilt in the backward
  int64_t pos_start_ = 0;         // first position of this rank's sequence part
  int sp_ids_[4] = {0, 0, 0, 0};  // SpScratch: full_a, full_b, local, staging
  SpScratch Sp() const;
  Arena acts_;
  // The blocks' collectives: tensor- or sequence-parallel over tp_ (none for a group of one).
  std::unique_ptr<BlockCollectives> collectives_;
  std::vector<SlotIds> slot_ids_;
  BlockShape block_shape_;                   // this rank's widths of the blocks' activations
  std::vector<std::vector<int>> block_ids_;  // per slot, per block: the first activation id
  int logits32_ = -1;  // f32 logits for the vocabulary-parallel cross-entropy (tp > 1, not f32)
  int dln_ = 0, datty_ = 0, dqkv_ = 0, dfch_gelu_ = 0, branch_ = 0;
};

}  // namespace rt::parallel
