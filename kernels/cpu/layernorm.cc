// LayerNorm over the last dimension (after llm.c's layernorm_forward/backward), fp32 math.
// Rows of f32 tensors are used in place; bf16/f16 rows are widened into per-thread scratch.
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

// out[N,C], mean[N], rstd[N] from inp[N,C], weight[C], bias[C].
template <typename T>
RT_CPU_CLONES void LayerNormForwardKernel(T* __restrict out, float* __restrict mean,
                                          float* __restrict rstd, const T* __restrict inp,
                                          const T* weight, const T* bias, int64_t n, int64_t c) {
  const float* __restrict w = AsF32(weight, c, 0);
  const float* __restrict b = AsF32(bias, c, 1);
  float* buf = Scratch(2, static_cast<size_t>(c));
  for (int64_t i = 0; i < n; ++i) {
    const float* __restrict x = RowF32(inp + i * c, buf, c);
    const float m = SumF32(x, c) / static_cast<float>(c);
    const float s = 1.0f / std::sqrt(SumSqDevF32(x, m, c) / static_cast<float>(c) + kEps);
    T* __restrict y = out + i * c;
    for (int64_t k = 0; k < c; ++k) y[k] = Store<T>((x[k] - m) * s * w[k] + b[k]);
    mean[i] = m;
    rstd[i] = s;
  }
}

// One row of the backward pass: dw += norm·dout, db += dout, and (when dx is set)
// dx += (w·dout − mean(w·dout) − norm·mean(w·dout·norm))·rstd.
template <typename T>
inline void LayerNormBackwardRow(T* __restrict dx, float* __restrict dw, float* __restrict db,
                                 const float* __restrict g, const float* __restrict x,
                                 const float* __restrict w, float m, float s, int64_t c) {
  for (int64_t k = 0; k < c; ++k) {
    db[k] += g[k];
    dw[k] += (x[k] - m) * s * g[k];
  }
  if (dx == nullptr) return;
  F8 a1 = {}, a2 = {}, b1 = {}, b2 = {};
  int64_t j = 0;
  for (; j + 16 <= c; j += 16) {
    const F8 dn0 = LoadF8(w + j) * LoadF8(g + j), dn1 = LoadF8(w + j + 8) * LoadF8(g + j + 8);
    a1 += dn0;
    a2 += dn0 * (LoadF8(x + j) - m);
    b1 += dn1;
    b2 += dn1 * (LoadF8(x + j + 8) - m);
  }
  float sum_dn = HSum(a1 + b1), sum_dnx = HSum(a2 + b2);
  for (; j < c; ++j) {
    const float dn = w[j] * g[j];
    sum_dn += dn;
    sum_dnx += dn * (x[j] - m);
  }
  const float inv_c = 1.0f / static_cast<float>(c);
  const float mean_dn = sum_dn * inv_c;
  const float mean_dnn = sum_dnx * s * inv_c;  // mean(dn·norm), norm = (x − m)·s
  for (int64_t k = 0; k < c; ++k) {
    const float v = (w[k] * g[k] - mean_dn - (x[k] - m) * s * mean_dnn) * s;
    dx[k] = Store<T>(Load(dx[k]) + v);
  }
}

template <typename T>
RT_CPU_CLONES void LayerNormBackwardKernel(T* dinp, T* dweight, T* dbias, const T* dout,
                                           const T* inp, const T* weight, const float* mean,
                                           const float* rstd, int64_t n, int64_t c) {
  const float* w = AsF32(weight, c, 0);
  float* dw = Scratch(1, static_cast<size_t>(c));
  float* db = Scratch(2, static_cast<size_t>(c));
  float* xbuf = Scratch(3, static_cast<size_t>(c));
  float* gbuf = Scratch(4, static_cast<size_t>(c));
  for (int64_t k = 0; k < c; ++k) dw[k] = db[k] = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    LayerNormBackwardRow<T>(dinp ? dinp + i * c : nullptr, dw, db, RowF32(dout + i * c, gbuf, c),
                            RowF32(inp + i * c, xbuf, c), w, mean[i], rstd[i], c);
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
