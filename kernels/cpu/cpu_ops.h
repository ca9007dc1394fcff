// Internal to kernels/: the CPU backend's entries of the kernel table (impl/backend.h). Each
// takes arguments already checked by kernels/ops.cc; the contracts are those of kernels/ops.h.
// Single-threaded except inside OpenBLAS; safe to call concurrently on disjoint outputs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"
#include "kernels/ops.h"
#include "kernels/tensor.h"

namespace rt::cpu {

// The machine (memory.cc): always available; ops finish on return, nothing to wait for.
Status Available();
Status Synchronize();
// Storage (memory.cc): 64-byte aligned zero-filled allocation, free, and memcpy.
Result<void*> Allocate(size_t bytes);
void Free(void* p);
Status Copy(Tensor dst, Tensor src);

// matmul.cc
Status Gemm(Tensor c, Tensor a, Tensor b, bool trans_a, bool trans_b, float alpha, float beta);
Status MatmulForward(Tensor out, Tensor inp, Tensor weight, Tensor bias);
Status MatmulBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                      Tensor weight);
// layernorm.cc
Status LayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                        Tensor bias);
Status LayerNormBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                         Tensor weight, Tensor mean, Tensor rstd);
// gelu.cc
Status GeluForward(Tensor out, Tensor inp);
Status GeluBackward(Tensor dinp, Tensor inp, Tensor dout, bool accumulate);
// attention.cc
Status AttentionForward(Tensor out, Tensor att, Tensor qkv, int n_head);
Status AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor att, int n_head,
                         bool accumulate);
// embedding.cc
Status EmbeddingForward(Tensor out, Tensor tokens, Tensor wte, int64_t vocab_start);
Status EmbeddingBackward(Tensor dwte, Tensor dout, Tensor tokens, int64_t vocab_start);
Status PositionEmbeddingAdd(Tensor out, Tensor wpe, int64_t pos_start);
Status PositionEmbeddingBackward(Tensor dwpe, Tensor dout, int64_t pos_start);
// crossentropy.cc
Status SoftmaxCrossEntropy(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets,
                           float dloss);
// elementwise.cc
Status Add(Tensor out, Tensor a, Tensor b);
Status Accumulate(Tensor dst, Tensor src);
Status Scale(Tensor x, float s);
Status Zero(Tensor x);
Result<double> SumOfSquares(Tensor x);
Status Convert(Tensor dst, Tensor src);
// adamw.cc
Status AdamW(Tensor param, Tensor grad, Tensor m, Tensor v, Tensor param_copy,
             const AdamWParams& hp);

}  // namespace rt::cpu
