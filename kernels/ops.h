// The math ops of the model, each a forward/backward pair, behind one interface for every
// backend (CPU through OpenBLAS, CUDA through cuBLASLt). Each op checks its arguments' shapes,
// dtypes and devices and returns ShapeMismatch / DTypeMismatch / DeviceMismatch naming the
// argument — never a crash or a wrong answer — then dispatches to the backend of the tensors'
// device. Backward ops ACCUMULATE into their gradient outputs (+=), so gradient accumulation over
// micro-batches needs no extra pass; optional outputs may be passed undefined (Tensor()) to skip.
//
// Dtypes: every op takes f32. Activations and parameters may also be bf16 or f16 (all floating
// arguments of one op share a dtype, except statistics — mean, rstd, attention probabilities,
// losses — which are always f32, and tokens/targets which are i32); math is done in fp32.
// Matrices are row-major; leading dimensions are flattened into rows ("N" below = B·T).
// Thread-safety: ops on disjoint outputs may run concurrently. On CUDA, ops are enqueued on the
// current stream (kernels/cuda/stream.h) and return without synchronising.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor.h"

namespace rt {

// C[M,N] = alpha·op(A)·op(B) + beta·C, where op(A) is A[M,K] or, with trans_a, A[K,M]ᵀ; likewise
// op(B) is B[K,N] or, with trans_b, B[N,K]ᵀ.
Status Gemm(Tensor c, Tensor a, Tensor b, bool trans_a, bool trans_b, float alpha, float beta);

// out[N,OC] = inp[N,IC]·weight[OC,IC]ᵀ + bias[OC] (bias optional).
Status MatmulForward(Tensor out, Tensor inp, Tensor weight, Tensor bias);
// dinp[N,IC] += dout·weight; dweight[OC,IC] += doutᵀ·inp; dbias[OC] += Σ_rows dout.
// dinp and dbias are optional.
Status MatmulBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                      Tensor weight);

// LayerNorm over the last dimension C with eps 1e-5: out[N,C], mean[N] and rstd[N] (f32, saved
// for backward), inp[N,C], weight[C], bias[C].
Status LayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                        Tensor bias);
// dinp[N,C] += ...; dweight[C] += ...; dbias[C] += ... (dinp optional).
Status LayerNormBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                         Tensor weight, Tensor mean, Tensor rstd);

// out = GeluTanh(inp), any shape.
Status GeluForward(Tensor out, Tensor inp);
// dinp += GeluTanhGrad(inp)·dout; with accumulate = false, dinp = GeluTanhGrad(inp)·dout instead
// (no zeroing pass needed, and dinp may then alias dout: the gradient is formed in place).
Status GeluBackward(Tensor dinp, Tensor inp, Tensor dout, bool accumulate = true);

// Causal multi-head self-attention. qkv[B,T,3C] holds q, k, v side by side (each [C] =
// n_head heads of C/n_head); out[B,T,C]; att[B,n_head,T,T] (f32) receives the softmax
// probabilities (saved for backward; entries above the diagonal are 0). Scores are scaled by
// 1/√(C/n_head); the softmax subtracts the row max (numerically stable).
Status AttentionForward(Tensor out, Tensor att, Tensor qkv, int n_head);
// dqkv[B,T,3C] += gradient of out w.r.t. qkv, given dout[B,T,C] and the saved att; with
// accumulate = false, dqkv = the gradient instead (no zeroing pass needed).
Status AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor att, int n_head,
                         bool accumulate = true);

// out[B,T,C] = wte[tokens[b,t] − vocab_start] when that row is inside wte[V_local,C], else 0
// (vocab-parallel embedding: each rank holds rows [vocab_start, vocab_start+V_local)). tokens i32.
// A token outside [0, vocab_size) is the caller's to reject; here it simply selects no row.
Status EmbeddingForward(Tensor out, Tensor tokens, Tensor wte, int64_t vocab_start);
// dwte[V_local,C] += scatter of dout by token (rows outside the range are skipped).
Status EmbeddingBackward(Tensor dwte, Tensor dout, Tensor tokens, int64_t vocab_start);
// out[B,T,C] += wpe[pos_start + t] for wpe[T_max,C] (pos_start ≥ 0 for sequence shards).
Status PositionEmbeddingAdd(Tensor out, Tensor wpe, int64_t pos_start);
// dwpe[pos_start + t] += Σ_b dout[b,t].
Status PositionEmbeddingBackward(Tensor dwpe, Tensor dout, int64_t pos_start);

// Fused softmax cross-entropy over logits[N,V]: losses[N] (f32) = −log softmax(logits)[target];
// if dlogits is defined, dlogits[N,V] = (softmax(logits) − onehot(target))·dloss (assignment, not
// accumulation; dlogits may alias logits). targets[N] i32 must be in [0, V): an out-of-range
// target is InvalidArgument (checked on the CPU; on CUDA the loss is NaN).
Status SoftmaxCrossEntropy(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets,
                           float dloss);

// out = a + b (residual connection), same shapes; out may alias a or b.
Status Add(Tensor out, Tensor a, Tensor b);
// dst += src, same shapes.
Status Accumulate(Tensor dst, Tensor src);
// x *= s.
Status Scale(Tensor x, float s);
// x = 0.
Status Zero(Tensor x);
// Σ x² in double precision (synchronises on CUDA). For the global gradient norm.
Result<double> SumOfSquares(Tensor x);

// Hyper-parameters of one AdamW step (t is the 1-based step, for the bias corrections).
struct AdamWParams {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // 0 for tensors that are not decayed (biases, LayerNorm, ...)
  float grad_scale = 1.0f;    // gradients are multiplied by this first (clipping, loss scale)
  int64_t step = 1;
};
// Fused AdamW on fp32 master weights: param, m, v f32 [n]; grad [n] f32 (or bf16/f16, read in
// fp32). If param_copy is defined (bf16/f16 [n]), it receives the updated weights rounded to
// nearest even — the low-precision working copy.
Status AdamW(Tensor param, Tensor grad, Tensor m, Tensor v, Tensor param_copy,
             const AdamWParams& hp);

// dst = src converted elementwise between f32, bf16 and f16 (round to nearest even); same numel.
Status Convert(Tensor dst, Tensor src);

// Copies src to dst (same dtype and numel), across devices if needed. A copy to or from host
// memory has finished when it returns.
Status Copy(Tensor dst, Tensor src);

// Waits until every op this thread enqueued on `device` (on CUDA: on the current stream) has
// finished, and returns the error of a failed asynchronous kernel. Nothing to wait for on the CPU.
// Errors: Unimplemented for a device this build has no backend for; CudaError.
Status Synchronize(Device device);

}  // namespace rt
