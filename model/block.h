// One transformer block (DESIGN.md "The model"): its tensors, the activations it saves, and the
// one implementation of its forward and backward, after llm.c's train_gpt2.c. Every caller runs
// this code: the single-process model, every pipeline stage, tensor- and sequence-parallel
// blocks and recompute. What differs between them is only where Megatron's f and g operators
// put their collectives (Shoeybi et al., "Megatron-LM", 2019; Korthikanti et al., 2022), which
// the block asks of a BlockCollectives: nothing on one device (NoCollectives), all-reduces with
// tensor parallelism, all-gathers and reduce-scatters with sequence parallelism (their
// implementations are in parallel/tensor_parallel.h).
#pragma once

#include "base/status.h"
#include "kernels/tensor.h"

namespace rt {

// One block's tensors (parameters or their gradients), views into an arena. Linear weights are
// [out, in]. With tensor parallelism: this rank's parts (c_attn and c_fc column-split, the two
// c_proj weights row-split).
struct BlockTensors {
  Tensor ln_1_w, ln_1_b;            // [C]
  Tensor attn_w, attn_b;            // c_attn: [3C, C], [3C]
  Tensor attn_proj_w, attn_proj_b;  // attn.c_proj: [C, C], [C]
  Tensor ln_2_w, ln_2_b;            // [C]
  Tensor fc_w, fc_b;                // mlp.c_fc: [4C, C], [4C]
  Tensor fc_proj_w, fc_proj_b;      // mlp.c_proj: [C, 4C], [C]
};

// Activations one block saves for its backward, for B rows of T tokens (compute dtype except the
// f32 statistics). With tensor parallelism qkv, atty, att and fch have the local widths; with
// sequence parallelism the statistics and residual2 hold this rank's positions, ln_1 and ln_2
// the gathered (full) sequence.
struct BlockActivations {
  Tensor ln_1, ln_1_mean, ln_1_rstd;  // [B,T,C], [B,T], [B,T]
  Tensor qkv;                         // [B,T,3C]
  Tensor atty;                        // [B,T,C] attention output before c_proj
  Tensor att;                         // [B,H,T,T] f32 softmax probabilities
  Tensor residual2;                   // [B,T,C] input + attention branch
  Tensor ln_2, ln_2_mean, ln_2_rstd;  // [B,T,C], [B,T], [B,T]
  Tensor fch, fch_gelu;               // [B,T,4C]
};

// Scratch tensors of a block's backward, shared by all blocks.
struct BlockGradScratch {
  Tensor dln, datty;  // [B,T,C]
  Tensor dqkv;        // [B,T,3C]
  Tensor dfch_gelu;   // [B,T,4C] dL/d gelu(fch), then dL/d fch in place
  Tensor branch;      // [B,T,C] forward scratch for a branch's projection
};

// Where a block's tensors cross between ranks. The block works on two kinds of [B,·,C] tensors:
// the residual stream at this rank's positions ("local"), and the full sequence that the
// column-parallel Linears (c_attn, c_fc) read and the row-parallel ones (the c_proj's) write as
// this rank's partial sums. Gather is Megatron's f forward and g backward, Reduce its g forward
// and f backward. Implementations own whatever buffers they need; calls are made from the
// block's thread only.
class BlockCollectives {
 public:
  virtual ~BlockCollectives() = default;
  // True when this rank adds the row-parallel Linears' biases: their outputs are summed over
  // the ranks, so exactly one rank may.
  virtual bool AddsRowBias() const = 0;
  // Where a LayerNorm writes, at local positions, an output that `full` is to hold gathered:
  // `full` itself unless the positions are split over the ranks.
  virtual Tensor Local(Tensor full) const = 0;
  // The full-sequence view of `local`: gathered into `full` (into a buffer of the
  // implementation when `full` is undefined), or `local` itself when nothing is split. Returns
  // the tensor that holds it. Errors: the collective's, naming `what`.
  virtual Result<Tensor> Gather(Tensor local, Tensor full, const char* what) const = 0;
  // Where a Linear writes a per-rank partial sum over the full sequence that Reduce then sums:
  // `fallback` unless the positions are split.
  virtual Tensor Partial(Tensor fallback) const = 0;
  // The sum over the ranks of `partial` (from Partial) at this rank's positions; returns the
  // tensor that holds it (`partial` itself, summed in place, unless the positions are split).
  // Errors: the collective's, naming `what`.
  virtual Result<Tensor> Reduce(Tensor partial, const char* what) const = 0;
};

// The collectives of a block on one device: none.
class NoCollectives final : public BlockCollectives {
 public:
  bool AddsRowBias() const override { return true; }
  Tensor Local(Tensor full) const override { return full; }
  Result<Tensor> Gather(Tensor local, Tensor, const char*) const override { return local; }
  Tensor Partial(Tensor fallback) const override { return fallback; }
  Result<Tensor> Reduce(Tensor partial, const char*) const override { return partial; }
};

// out = block(inp): pre-LN attention and MLP with residuals; fills `a` for the backward.
// `n_head` is the number of heads this rank computes; `branch` [B,T,C] is scratch (unused when
// the collectives bring their own).
Status BlockForward(const BlockTensors& p, const BlockActivations& a, const BlockCollectives& c,
                    Tensor branch, Tensor out, Tensor inp, int n_head);
// Accumulates the parameter gradients into `g`. `dresidual` holds dL/d out on entry and dL/d inp
// on return (in place: the residual stream's gradient flows through one buffer). `inp` and `a`
// are those of the forward. With split positions the LayerNorm gradients are this rank's
// partial sums.
Status BlockBackward(const BlockTensors& p, const BlockTensors& g, const BlockActivations& a,
                     const BlockGradScratch& s, const BlockCollectives& c, Tensor dresidual,
                     Tensor inp, int n_head);

}  // namespace rt
