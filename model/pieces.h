// The model's pieces around the blocks, over views of the caller's arenas: the embedding, the
// head's logits (ln_f, then the tied wte) and their backward, and the layout of a block's saved
// activations. With model/block.h they are the one implementation of the model's math that the
// single-process model (model/gpt.h) and every pipeline stage of the parallel engine call; a
// BlockCollectives says where the tensor- and sequence-parallel collectives go (NoCollectives
// on one device). The loss itself is the caller's (one device: SoftmaxCrossEntropy; tensor
// parallelism: the vocabulary-parallel cross-entropy).
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor.h"
#include "model/block.h"

namespace rt {

// out[B,T',C] = wte[tokens] + wpe at positions [pos_start, pos_start + T') of `out` (this rank's
// positions; T' = T without sequence parallelism). With a vocabulary split over the ranks, `wte`
// holds rows [vocab_start, …) and each rank embeds only its tokens before `c` sums them.
// tokens[B,T] i32. Errors: those of the kernels and collectives.
Status EmbedForward(const BlockCollectives& c, Tensor out, Tensor tokens, Tensor wte, Tensor wpe,
                    int64_t vocab_start, int64_t pos_start);
// Accumulates the embeddings' gradients from dout (as EmbedForward's `out`) into g_wte and g_wpe
// (with split positions, g_wpe gets this rank's positions only).
Status EmbedBackward(const BlockCollectives& c, Tensor g_wte, Tensor g_wpe, Tensor dout,
                     Tensor tokens, int64_t vocab_start, int64_t pos_start);

// The head's saved activations: ln_f's output [B,T,C] (gathered over the sequence) and its f32
// statistics [B,T'].
struct HeadActivations {
  Tensor ln_f, mean, rstd;
};
// logits[B,T,V'] = ln_f(x)·wteᵀ for the residual stream x[B,T',C] (V' = this rank's vocabulary
// rows of wte).
Status HeadForward(const BlockCollectives& c, const HeadActivations& a, Tensor logits, Tensor x,
                   Tensor ln_f_w, Tensor ln_f_b, Tensor wte);
// From dL/dlogits (in `dlogits`), accumulates into g_wte, g_ln_f_w and g_ln_f_b and writes
// dx = dL/dx (overwritten). `dln` [B,T,C] is scratch.
Status HeadBackward(const BlockCollectives& c, const HeadActivations& a, Tensor dx, Tensor g_ln_f_w,
                    Tensor g_ln_f_b, Tensor g_wte, Tensor dlogits, Tensor x, Tensor ln_f_w,
                    Tensor wte, Tensor dln);
// The sum of f32 `losses` (on any device), in element order.
Result<double> SumLosses(Tensor losses);

// The widths of one rank's block activations.
struct BlockShape {
  int64_t n_embd = 0;  // C
  int64_t heads = 0;   // attention heads on this rank
  int64_t width = 0;   // this rank's part of C: heads × head size
  int seq_split = 1;   // ranks the residual stream's positions are split over (T' = T/seq_split)
};
// Adds one block's saved activations (BlockActivations' 12 tensors, in its order) for up to
// `rows` × `seq_len` tokens to `arena`; returns the index of the first.
int AddBlockActivations(Arena* arena, const BlockShape& s, int64_t rows, int64_t seq_len,
                        DType dtype);
// Views of the activations added at `first`, for B ≤ rows and T ≤ seq_len (the first elements of
// each tensor). The arena must be allocated.
BlockActivations ViewBlockActivations(const Arena& arena, int first, const BlockShape& s, int64_t B,
                                      int64_t T);
// The first shape.numel() elements of arena tensor `id`, seen as `shape` (which must fit).
Tensor ArenaView(const Arena& arena, int id, Shape shape);

}  // namespace rt
