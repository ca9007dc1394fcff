// Internal to kernels/: the CUDA backend's entries of the kernel table (impl/backend.h), built
// only with RINGTRAIN_WITH_CUDA. Arguments are already checked by kernels/ops.cc; contracts as
// in kernels/ops.h. Work is enqueued on the current stream (kernels/cuda/stream.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"
#include "kernels/ops.h"
#include "kernels/tensor.h"

namespace rt::cuda {

// stream.cu: a usable device (Unavailable naming why not); waiting for the current stream.
Status Available();
Status Synchronize();
// memory.cu: cudaMalloc'ed zero-filled memory, cudaFree, and copies in any direction.
Result<void*> Allocate(size_t bytes);
void Free(void* p);
Status Copy(Tensor dst, Tensor src);

// matmul.cu (cuBLASLt, fp32 accumulation)
Status Gemm(Tensor c, Tensor a, Tensor b, bool trans_a, bool trans_b, float alpha, float beta);
Status MatmulForward(Tensor out, Tensor inp, Tensor weight, Tensor bias);
Status MatmulBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                      Tensor weight);
// layernorm.cu
Status LayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                        Tensor bias);
Status LayerNormBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                         Tensor weight, Tensor mean, Tensor rstd);
// gelu.cu
Status GeluForward(Tensor out, Tensor inp);
Status GeluBackward(Tensor dinp, Tensor inp, Tensor dout, bool accumulate);
// attention.cu
Status AttentionForward(Tensor out, Tensor att, Tensor qkv, int n_head);
Status AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor att, int n_head,
                         bool accumulate);
// embedding.cu
Status EmbeddingForward(Tensor out, Tensor tokens, Tensor wte, int64_t vocab_start);
Status EmbeddingBackward(Tensor dwte, Tensor dout, Tensor tokens, int64_t vocab_start);
Status PositionEmbeddingAdd(Tensor out, Tensor wpe, int64_t pos_start);
Status PositionEmbeddingBackward(Tensor dwpe, Tensor dout, int64_t pos_start);
// crossentropy.cu
Status SoftmaxCrossEntropy(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets,
                           float dloss);
// elementwise.cu
Status Add(Tensor out, Tensor a, Tensor b);
Status Accumulate(Tensor dst, Tensor src);
Status Scale(Tensor x, float s);
Status Zero(Tensor x);
Result<double> SumOfSquares(Tensor x);
Status Convert(Tensor dst, Tensor src);
// adamw.cu
Status AdamW(Tensor param, Tensor grad, Tensor m, Tensor v, Tensor param_copy,
             const AdamWParams& hp);

}  // namespace rt::cuda
