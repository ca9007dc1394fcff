// LayerNorm over the last dimension (after llm.c's layernorm_forward/backward), fp32 math.
// Rows of f32 tensors are used in place; bf16/f16 rows are widened into per-thread scratch.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_ops.h"

namespace rt::cpu {

namespace {

constexpr float kEps = 1e-5f;

// Row `x` as fp32: itself for f32, else widened into `buf`.
template <typename T>
inline const float* RowF32(const T* x, float* buf, int64_t c) {
  if constexpr (sizeof(T) == 4) {
    return reinterpret_cast<const float*>(x);
  } else {
    LoadRow(buf, x, c);
    return buf;
  }
}

// Rows go through the statistics kRows at a time: their reductions are independent chains that
// overlap, where one row alone waits on the latency of its adds, horizontal sums and sqrt.
constexpr int kRows = 4;

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

// Σ of the 8 lanes as a tree of shuffles (no serial chain of scalar adds).
inline float HSumTree(F8 v) {
  v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3);
  v += __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5);
  v += __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6);
  return v[0];
}

// mean[r] and rstd[r] of rows x[r][0, c) for r < kRows: the mean first, then the variance as the
// mean squared deviation from it (two passes over rows that sit in L1, as accurate as before).
inline void RowStats(const float* const x[kRows], int64_t c, float mean[kRows], float rstd[kRows]) {
  const float fc = static_cast<float>(c);
  F8 a[kRows] = {}, b[kRows] = {};
  int64_t k = 0;
  for (; k + 16 <= c; k += 16) {
    for (int r = 0; r < kRows; ++r) {
      a[r] += LoadF8(x[r] + k);
      b[r] += LoadF8(x[r] + k + 8);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    float s = HSumTree(a[r] + b[r]);
    for (int64_t j = k; j < c; ++j) s += x[r][j];
    mean[r] = s / fc;
    a[r] = F8{};
    b[r] = F8{};
  }
  for (k = 0; k + 16 <= c; k += 16) {
    for (int r = 0; r < kRows; ++r) {
      const F8 d0 = LoadF8(x[r] + k) - mean[r], d1 = LoadF8(x[r] + k + 8) - mean[r];
      a[r] += d0 * d0;
      b[r] += d1 * d1;
    }
  }
  for (int r = 0; r < kRows; ++r) {
    float s = HSumTree(a[r] + b[r]);
    for (int64_t j = k; j < c; ++j) s += (x[r][j] - mean[r]) * (x[r][j] - mean[r]);
    rstd[r] = 1.0f / std::sqrt(s / fc + kEps);
  }
}

// out[N,C], mean[N], rstd[N] from inp[N,C], weight[C], bias[C].
template <typename T>
RT_CPU_CLONES void LayerNormForwardKernel(T* __restrict out, float* __restrict mean,
                                          float* __restrict rstd, const T* __restrict inp,
                                          const T* weight, const T* bias, int64_t n, int64_t c) {
  const float* __restrict w = AsF32(weight, c, 0);
  const float* __restrict b = AsF32(bias, c, 1);
  float* buf = Scratch(2, static_cast<size_t>(kRows * c));
  for (int64_t i0 = 0; i0 < n; i0 += kRows) {
    const int64_t rows = std::min<int64_t>(kRows, n - i0);
    const float* x[kRows];
    // A short last group repeats its last row (computed, not stored).
    for (int r = 0; r < kRows; ++r)
      x[r] = RowF32(inp + (i0 + std::min<int64_t>(r, rows - 1)) * c, buf + r * c, c);
    float m[kRows], s[kRows];
    RowStats(x, c, m, s);
    for (int64_t r = 0; r < rows; ++r) {
      const float* __restrict xr = x[r];
      T* __restrict y = out + (i0 + r) * c;
      const float mr = m[r], sr = s[r];
      for (int64_t k = 0; k < c; ++k) y[k] = Store<T>((xr[k] - mr) * sr * w[k] + b[k]);
      mean[i0 + r] = mr;
      rstd[i0 + r] = sr;
    }
  }
}

// Σ_k w[k]·g[k] and Σ_k w[k]·g[k]·(x[k] − m) of rows r < kRows.
inline void RowDots(const float* const g[kRows], const float* const x[kRows],
                    const float* __restrict w, const float m[kRows], int64_t c, float sum_dn[kRows],
                    float sum_dnx[kRows]) {
  F8 a[kRows] = {}, b[kRows] = {};
  int64_t k = 0;
  for (; k + 8 <= c; k += 8) {
    const F8 wv = LoadF8(w + k);
    for (int r = 0; r < kRows; ++r) {
      const F8 dn = wv * LoadF8(g[r] + k);
      a[r] += dn;
      b[r] += dn * (LoadF8(x[r] + k) - m[r]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    float sa = HSumTree(a[r]), sb = HSumTree(b[r]);
    for (int64_t j = k; j < c; ++j) {
      const float dn = w[j] * g[r][j];
      sa += dn;
      sb += dn * (x[r][j] - m[r]);
    }
    sum_dn[r] = sa;
    sum_dnx[r] = sb;
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// dw += norm·dout, db += dout over all rows and (when dinp is set)
// dx += (w·dout − mean(w·dout) − norm·mean(w·dout·norm))·rstd per row, norm = (x − mean)·rstd;
// kRows rows at a time, dw, db and dx in one pass over each row.
template <typename T>
RT_CPU_CLONES void LayerNormBackwardKernel(T* dinp, T* dweight, T* dbias, const T* dout,
                                           const T* inp, const T* weight, const float* mean,
                                           const float* rstd, int64_t n, int64_t c) {
  const float* __restrict w = AsF32(weight, c, 0);
  float* __restrict dw = Scratch(1, static_cast<size_t>(c));
  float* __restrict db = Scratch(2, static_cast<size_t>(c));
  float* xbuf = Scratch(3, static_cast<size_t>(kRows * c));
  float* gbuf = Scratch(4, static_cast<size_t>(kRows * c));
  for (int64_t k = 0; k < c; ++k) dw[k] = db[k] = 0.0f;
  const float inv_c = 1.0f / static_cast<float>(c);
  for (int64_t i0 = 0; i0 < n; i0 += kRows) {
    const int64_t rows = std::min<int64_t>(kRows, n - i0);
    const float* g[kRows];
    const float* x[kRows];
    float m[kRows];
    for (int r = 0; r < kRows; ++r) {
      const int64_t i = i0 + std::min<int64_t>(r, rows - 1);
      g[r] = RowF32(dout + i * c, gbuf + r * c, c);
      x[r] = RowF32(inp + i * c, xbuf + r * c, c);
      m[r] = mean[i];
    }
    float sum_dn[kRows], sum_dnx[kRows];
    if (dinp != nullptr) RowDots(g, x, w, m, c, sum_dn, sum_dnx);
    for (int64_t r = 0; r < rows; ++r) {
      const float* __restrict gr = g[r];
      const float* __restrict xr = x[r];
      const float mr = m[r], s = rstd[i0 + r];
      // Two loops, not one: GCC does not vectorise a loop that stores through dx, dw and db
      // together (a fused loop ran LayerNorm's backward at a quarter of the speed).
      for (int64_t k = 0; k < c; ++k) {
        db[k] += gr[k];
        dw[k] += (xr[k] - mr) * s * gr[k];
      }
      if (dinp == nullptr) continue;
      const float mean_dn = sum_dn[r] * inv_c;
      const float mean_dnn = sum_dnx[r] * s * inv_c;  // mean(dn·norm)
      T* __restrict dx = dinp + (i0 + r) * c;
      for (int64_t k = 0; k < c; ++k) {
        const float norm = (xr[k] - mr) * s;
        dx[k] = Store<T>(Load(dx[k]) + (w[k] * gr[k] - mean_dn - norm * mean_dnn) * s);
      }
    }
  }
  AccumulateRow(dweight, dw, c);
  AccumulateRow(dbias, db, c);
}

}  // namespace

Status LayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                        Tensor bias) {
  const int64_t c = inp.shape().last(), n = inp.shape().rows();
  if (c == 0) return Status::Ok();
  internal::DispatchFloating(inp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    LayerNormForwardKernel<T>(out.data_as<T>(), mean.data_as<float>(), rstd.data_as<float>(),
                              inp.data_as<T>(), weight.data_as<T>(), bias.data_as<T>(), n, c);
  });
  return Status::Ok();
}

Status LayerNormBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                         Tensor weight, Tensor mean, Tensor rstd) {
  const int64_t c = inp.shape().last(), n = inp.shape().rows();
  if (c == 0) return Status::Ok();
  internal::DispatchFloating(inp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    LayerNormBackwardKernel<T>(dinp.data_as<T>(), dweight.data_as<T>(), dbias.data_as<T>(),
                               dout.data_as<T>(), inp.data_as<T>(), weight.data_as<T>(),
                               mean.data_as<float>(), rstd.data_as<float>(), n, c);
  });
  return Status::Ok();
}

}  // namespace rt::cpu
