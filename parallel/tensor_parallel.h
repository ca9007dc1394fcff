// Megatron-style tensor-parallel pieces over a tensor-parallel communicator (after Shoeybi et al.,
// "Megatron-LM", 2019): the collectives of a transformer block (model/block.h) with column-
// parallel c_attn and c_fc (heads and MLP columns split; f = identity forward, all-reduce
// backward) and row-parallel c_proj's (g = all-reduce forward, identity backward), with or
// without sequence parallelism; the vocabulary-parallel embedding; and the
// vocabulary-parallel cross-entropy, which reduces only per-row statistics (max, sum of
// exponentials, target logit) and never gathers the logits. Replicated tensors (LayerNorms, wpe,
// the c_proj biases) see bitwise identical inputs and gradients on every rank, so they stay equal.
// Block tensors are the rank's local parts (parallel/stage_layout.h). Tensors on the CPU (a
// CPU communicator) or a CUDA device (an NCCL one), fp32, or bf16/fp16 (collectives in that
// dtype, comm reducing in fp32), except the cross-entropy: fp32.
#pragma once

#include <chrono>

#include "base/status.h"
#include "comm/communicator.h"
#include "kernels/tensor.h"
#include "model/block.h"

namespace rt::parallel {

// The tensor-parallel group and how long each of its collectives may take.
struct TpGroup {
  comm::Communicator* comm = nullptr;
  std::chrono::milliseconds timeout{120'000};
  int rank() const { return comm->rank(); }
  int size() const { return comm->size(); }
};

// x = Σ over the group of x (in place, x's dtype). Errors name `what`.
Status TpAllReduce(const TpGroup& g, Tensor x, const char* what);

// The block collectives of tensor parallelism (model/block.h runs the block): the column-parallel
// Linears see the whole sequence, the row-parallel outputs and the column-parallel inputs'
// gradients are all-reduced in place over the group, and rank 0 adds the row-parallel biases.
// Block tensors are then the local parts: c_attn [3C/tp, C] (q, k, v heads of this rank),
// c_proj [C, C/tp], c_fc [4C/tp, C], mlp c_proj [C, 4C/tp], with activations of the local
// widths (qkv 3C/tp, atty C/tp, att n_head/tp heads, fch 4C/tp) and n_head/tp heads. A group
// of one is the single-device block.
class TpCollectives final : public BlockCollectives {
 public:
  explicit TpCollectives(TpGroup g) : g_(g) {}
  bool AddsRowBias() const override { return g_.rank() == 0; }
  Tensor Local(Tensor full) const override { return full; }
  Result<Tensor> Gather(Tensor local, Tensor, const char*) const override { return local; }
  Tensor Partial(Tensor fallback) const override { return fallback; }
  // Errors: the all-reduce's, naming `what`.
  Result<Tensor> Reduce(Tensor partial, const char* what) const override;

 private:
  TpGroup g_;
};

// Sequence parallelism (Korthikanti et al., "Reducing Activation Recomputation in Large
// Transformer Models", 2022): between the tensor-parallel regions the residual stream, the
// LayerNorms and the bias adds of the row-parallel outputs work on T/tp of the sequence per rank
// ([B, T/tp, C]: rank r holds positions [r·T/tp, (r+1)·T/tp) of every row); the f/g all-reduces
// become an all-gather before each column-parallel Linear and a reduce-scatter after each
// row-parallel one (and their conjugates in the backward). LayerNorm (and wpe) gradients are then
// partial sums over the ranks' positions, which the engine all-reduces over the group.

// Buffers of the sequence-parallel passes: two full [B,T,C], one local [B,T/tp,C], and the
// [tp, B, T/tp, C] staging buffer of the collectives.
struct SpScratch {
  Tensor full_a, full_b, local, staging;
};

// full[B,T,C] = the ranks' local[B,T/tp,C] placed at their positions.
Status SeqAllGather(const TpGroup& g, Tensor local, Tensor full, Tensor staging);
// local[B,T/tp,C] = Σ over the ranks of full[B,T,C] at this rank's positions.
Status SeqReduceScatter(const TpGroup& g, Tensor full, Tensor local, Tensor staging);

// The block collectives of sequence parallelism: a block's input, output, residual2 and
// LayerNorm statistics are local [B, T/tp, C]; the LayerNorm outputs are all-gathered into the
// activations' full ln_1 and ln_2, the row-parallel partial sums (in sp.full_b) and the column-
// parallel inputs' gradients reduce-scattered into sp.local, and the residual gradient
// all-gathered into sp.full_a. Rank 0 adds the row-parallel biases (they enter the
// reduce-scatter once). The buffers must outlive the object.
class SpCollectives final : public BlockCollectives {
 public:
  SpCollectives(TpGroup g, SpScratch sp) : g_(g), sp_(sp) {}
  bool AddsRowBias() const override { return g_.rank() == 0; }
  Tensor Local(Tensor) const override { return sp_.local; }
  // Errors: the all-gather's, naming `what`.
  Result<Tensor> Gather(Tensor local, Tensor full, const char* what) const override;
  Tensor Partial(Tensor) const override { return sp_.full_b; }
  // Errors: the reduce-scatter's, naming `what`.
  Result<Tensor> Reduce(Tensor partial, const char* what) const override;

 private:
  TpGroup g_;
  SpScratch sp_;
};

// Vocabulary-parallel cross-entropy over logits[N, V/tp] holding vocabulary rows
// [vocab_start, vocab_start + V/tp): losses[N] = −log softmax(all logits)[target] (equal on every
// rank), and, when dloss != 0, logits is overwritten with (softmax − onehot)·dloss for the
// local vocabulary. targets[N] i32 in [0, V). On a device the per-row statistics are computed on
// a host copy of the logits (copied back with the gradient): correct, not fast. Errors:
// InvalidArgument for a bad target; DTypeMismatch for non-f32 logits.
Status VocabParallelCrossEntropy(const TpGroup& g, Tensor losses, Tensor logits, Tensor targets,
                                 int64_t vocab_start, int64_t vocab_size, float dloss);

}  // namespace rt::parallel
