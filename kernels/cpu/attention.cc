// Causal multi-head self-attention on the CPU, per (batch, head): head sizes that are a multiple
// of 16 go through the register tiles of attention_head.cc; the others through sgemm in causal
// row blocks (a block of query rows only meets the keys up to its last row), with a numerically
// stable softmax in between (after llm.c's attention_forward/backward, with the T×T×hs loops
// handed to BLAS). qkv rows are read in place (leading dimension 3C); bf16/f16 inputs are widened
// to fp32 scratch.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/attention_head.h"
#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_ops.h"

namespace rt::cpu {

namespace {

constexpr int64_t kRowBlock = 64;

void Sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// Rows [r0, r1) of one head's score matrix att[T,T] (already scaled): softmax over the causal
// prefix [0, t] of row t, zeros after it.
RT_CPU_CLONES void CausalSoftmaxRows(float* att, int64_t r0, int64_t r1, int64_t t_len) {
  for (int64_t t = r0; t < r1; ++t) {
    float* row = att + t * t_len;
    const int64_t n = t + 1;
    const float mx = MaxF32(row, n);
    for (int64_t j = 0; j < n; ++j) row[j] = ExpFast(row[j] - mx);
    const float sum = SumF32(row, n);
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; ++j) row[j] *= inv;
    for (int64_t j = n; j < t_len; ++j) row[j] = 0.0f;
  }
}

// Softmax backward on rows [r0, r1), in place on datt: datt[t,j] ← scale·att[t,j]·(datt[t,j] −
// Σ_i att[t,i]·datt[t,i]) over the causal prefix, 0 from t+1 to kc.
RT_CPU_CLONES void CausalSoftmaxBackwardRows(float* datt, const float* att, int64_t r0, int64_t r1,
                                             int64_t kc, int64_t t_len, float scale) {
  for (int64_t t = r0; t < r1; ++t) {
    float* d = datt + t * t_len;
    const float* a = att + t * t_len;
    const int64_t n = t + 1;
    const float dot = DotF32(a, d, n);
    int64_t j = 0;
    for (j = 0; j < n; ++j) d[j] = scale * a[j] * (d[j] - dot);
    for (j = n; j < kc; ++j) d[j] = 0.0f;
  }
}

template <typename T>
void AttentionForwardT(const Tensor& out, const Tensor& att_t, const Tensor& qkv, int n_head) {
  const int64_t b_len = qkv.dim(0), t_len = qkv.dim(1), c3 = qkv.dim(2), c = c3 / 3;
  const int64_t hs = c / n_head;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const float* x = AsF32(qkv.data_as<T>(), qkv.numel(), 0);
  float* y = sizeof(T) == 4 ? out.data_as<float>() : Scratch(2, static_cast<size_t>(out.numel()));
  float* att = att_t.data_as<float>();
  for (int64_t b = 0; b < b_len; ++b) {
    for (int64_t h = 0; h < n_head; ++h) {
      const float* q = x + b * t_len * c3 + h * hs;
      const float* k = q + c;
      const float* v = q + 2 * c;
      float* a = att + (b * n_head + h) * t_len * t_len;
      float* o = y + b * t_len * c + h * hs;
      if (AttentionHeadTiled(hs)) {
        AttentionHeadForward({q, k, v, c3, t_len, hs, scale}, a, o, c);
        continue;
      }
      for (int64_t r0 = 0; r0 < t_len; r0 += kRowBlock) {
        const int64_t r1 = std::min(t_len, r0 + kRowBlock), rb = r1 - r0, kc = r1;
        Sgemm(false, true, rb, kc, hs, scale, q + r0 * c3, c3, k, c3, 0.0f, a + r0 * t_len, t_len);
        CausalSoftmaxRows(a, r0, r1, t_len);
        Sgemm(false, false, rb, hs, kc, 1.0f, a + r0 * t_len, t_len, v, c3, 0.0f, o + r0 * c, c);
      }
    }
  }
  if constexpr (sizeof(T) != 4) StoreRow(out.data_as<T>(), y, out.numel());
}

// The tiled heads write each gradient element once, so they can assign it; the sgemm path adds
// over row blocks, into a zeroed output where the result is to be assigned. Low-precision
// gradients are formed in fp32 scratch that way and then added to (or stored in) dqkv.
template <typename T>
void AttentionBackwardT(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& att_t, int n_head, bool accumulate) {
  const int64_t b_len = qkv.dim(0), t_len = qkv.dim(1), c3 = qkv.dim(2), c = c3 / 3;
  const int64_t hs = c / n_head;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const float* x = AsF32(qkv.data_as<T>(), qkv.numel(), 0);
  const float* dy = AsF32(dout.data_as<T>(), dout.numel(), 1);
  const bool tiled = AttentionHeadTiled(hs);
  float* dx = dqkv.data_as<float>();
  if constexpr (sizeof(T) != 4) dx = Scratch(2, static_cast<size_t>(dqkv.numel()));
  const bool assign = sizeof(T) != 4 || !accumulate;
  if (assign && !tiled) std::memset(dx, 0, static_cast<size_t>(dqkv.numel()) * sizeof(float));
  float* datt = Scratch(3, static_cast<size_t>(t_len * t_len));
  const float* att = att_t.data_as<float>();
  for (int64_t b = 0; b < b_len; ++b) {
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t base = b * t_len * c3 + h * hs;
      const float* q = x + base;
      const float* k = q + c;
      const float* v = q + 2 * c;
      float* dq = dx + base;
      float* dk = dq + c;
      float* dv = dq + 2 * c;
      const float* a = att + (b * n_head + h) * t_len * t_len;
      const float* g = dy + b * t_len * c + h * hs;
      if (tiled) {
        AttentionHeadBackward({q, k, v, c3, t_len, hs, scale}, a, g, c, dq, dk, dv, !assign);
        continue;
      }
      for (int64_t r0 = 0; r0 < t_len; r0 += kRowBlock) {
        const int64_t r1 = std::min(t_len, r0 + kRowBlock), rb = r1 - r0, kc = r1;
        float* d = datt + r0 * t_len;
        // datt = dout · Vᵀ; dV += attᵀ · dout.
        Sgemm(false, true, rb, kc, hs, 1.0f, g + r0 * c, c, v, c3, 0.0f, d, t_len);
        Sgemm(true, false, kc, hs, rb, 1.0f, a + r0 * t_len, t_len, g + r0 * c, c, 1.0f, dv, c3);
        CausalSoftmaxBackwardRows(datt, a, r0, r1, kc, t_len, scale);
        // dQ += dpre · K; dK += dpreᵀ · Q.
        Sgemm(false, false, rb, hs, kc, 1.0f, d, t_len, k, c3, 1.0f, dq + r0 * c3, c3);
        Sgemm(true, false, kc, hs, rb, 1.0f, d, t_len, q + r0 * c3, c3, 1.0f, dk, c3);
      }
    }
  }
  if constexpr (sizeof(T) != 4) {
    if (accumulate) {
      AccumulateRow(dqkv.data_as<T>(), dx, dqkv.numel());
    } else {
      StoreRow(dqkv.data_as<T>(), dx, dqkv.numel());
    }
  }
}

}  // namespace

Status AttentionForward(Tensor out, Tensor att, Tensor qkv, int n_head) {
  if (qkv.numel() == 0) return Status::Ok();
  internal::DispatchFloating(
      qkv.dtype(), [&](auto tag) { AttentionForwardT<decltype(tag)>(out, att, qkv, n_head); });
  return Status::Ok();
}

Status AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor att, int n_head,
                         bool accumulate) {
  if (qkv.numel() == 0) return Status::Ok();
  internal::DispatchFloating(qkv.dtype(), [&](auto tag) {
    AttentionBackwardT<decltype(tag)>(dqkv, dout, qkv, att, n_head, accumulate);
  });
  return Status::Ok();
}

}  // namespace rt::cpu
