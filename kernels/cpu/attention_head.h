// Internal to kernels/cpu: causal attention of one (batch, head) pair in fp32 register tiles,
// for head sizes that are a multiple of 16 (the model's 32 and 64). The score, softmax and value
// products of a head stay in L1/L2 and only the causal triangle is computed (in 16-column steps),
// which beats per-head sgemm calls whose K is the small head size. attention.cc uses these for
// such heads and its sgemm path for the others.
#pragma once

#include <cstdint>

namespace rt::cpu {

// Heads of this size go through AttentionHeadForward / AttentionHeadBackward.
inline bool AttentionHeadTiled(int64_t hs) { return hs > 0 && hs % 16 == 0; }

// One head's rows, T tokens, head size hs. q, k, v: row t at q + t·ld_qkv (hs floats each).
struct HeadView {
  const float* q;
  const float* k;
  const float* v;
  int64_t ld_qkv;
  int64_t t_len, hs;
  float scale;  // 1/√hs
};

// att[T,T] = causal softmax(scale·q·kᵀ) (zeros above the diagonal); out row t (at
// out + t·ld_out) = Σ_j att[t,j]·v[j].
void AttentionHeadForward(const HeadView& h, float* att, float* out, int64_t ld_out);

// Given att from the forward and dout (row t at dout + t·ld_out): dq, dk, dv (rows at
// stride ld_qkv) += the gradients of out w.r.t. q, k and v, or = them when !accumulate.
void AttentionHeadBackward(const HeadView& h, const float* att, const float* dout, int64_t ld_out,
                           float* dq, float* dk, float* dv, bool accumulate);

}  // namespace rt::cpu
