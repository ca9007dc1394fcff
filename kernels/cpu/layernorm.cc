// LayerNorm over the last dimension (after llm.c's layernorm_forward/backward), fp32 math.
#include <cmath>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_ops.h"

namespace rt::cpu {

namespace {

constexpr float kEps = 1e-5f;

// out[N,C], mean[N], rstd[N] from inp[N,C], weight[C], bias[C].
template <typename T>
RT_CPU_CLONES void LayerNormForwardKernel(T* out, float* mean, float* rstd, const T* inp,
                                          const T* weight, const T* bias, int64_t n, int64_t c) {
  const float* w = AsF32(weight, c, 0);
  const float* b = AsF32(bias, c, 1);
  float* row = Scratch(2, static_cast<size_t>(c));
  for (int64_t i = 0; i < n; ++i) {
    const T* x = inp + i * c;
    LoadRow(row, x, c);
    const float m = RowSum(row, c) / static_cast<float>(c);
    float acc[16] = {};
    int64_t j = 0;
    for (; j + 16 <= c; j += 16) {
      for (int k = 0; k < 16; ++k) {
        const float d = row[j + k] - m;
        acc[k] += d * d;
      }
    }
    float var = 0.0f;
    for (int k = 0; k < 16; ++k) var += acc[k];
    for (; j < c; ++j) var += (row[j] - m) * (row[j] - m);
    const float s = 1.0f / std::sqrt(var / static_cast<float>(c) + kEps);
    T* y = out + i * c;
    for (int64_t k = 0; k < c; ++k) y[k] = Store<T>((row[k] - m) * s * w[k] + b[k]);
    mean[i] = m;
    rstd[i] = s;
  }
}

// dinp[N,C] (optional) += ..., dweight[C] += ..., dbias[C] += ...
template <typename T>
RT_CPU_CLONES void LayerNormBackwardKernel(T* dinp, T* dweight, T* dbias, const T* dout,
                                           const T* inp, const T* weight, const float* mean,
                                           const float* rstd, int64_t n, int64_t c) {
  const float* w = AsF32(weight, c, 0);
  float* dw = Scratch(1, static_cast<size_t>(c));
  float* db = Scratch(2, static_cast<size_t>(c));
  float* norm = Scratch(3, static_cast<size_t>(c));
  float* dnorm = Scratch(4, static_cast<size_t>(c));
  float* dy = Scratch(5, static_cast<size_t>(c));
  for (int64_t k = 0; k < c; ++k) dw[k] = db[k] = 0.0f;
  const float inv_c = 1.0f / static_cast<float>(c);
  for (int64_t i = 0; i < n; ++i) {
    const float m = mean[i], s = rstd[i];
    LoadRow(norm, inp + i * c, c);
    LoadRow(dy, dout + i * c, c);
    for (int64_t k = 0; k < c; ++k) {
      norm[k] = (norm[k] - m) * s;
      dnorm[k] = w[k] * dy[k];
      db[k] += dy[k];
      dw[k] += norm[k] * dy[k];
    }
    if (dinp == nullptr) continue;
    float a1[16] = {}, a2[16] = {};
    int64_t j = 0;
    for (; j + 16 <= c; j += 16) {
      for (int k = 0; k < 16; ++k) {
        a1[k] += dnorm[j + k];
        a2[k] += dnorm[j + k] * norm[j + k];
      }
    }
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int k = 0; k < 16; ++k) {
      dnorm_mean += a1[k];
      dnorm_norm_mean += a2[k];
    }
    for (; j < c; ++j) {
      dnorm_mean += dnorm[j];
      dnorm_norm_mean += dnorm[j] * norm[j];
    }
    dnorm_mean *= inv_c;
    dnorm_norm_mean *= inv_c;
    T* dx = dinp + i * c;
    for (int64_t k = 0; k < c; ++k) {
      dx[k] = Store<T>(Load(dx[k]) + (dnorm[k] - dnorm_mean - norm[k] * dnorm_norm_mean) * s);
    }
  }
  AccumulateRow(dweight, dw, c);
  AccumulateRow(dbias, db, c);
}

}  // namespace

Status LayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                        Tensor bias) {
  const int64_t c = inp.shape().last(), n = inp.shape().rows();
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
  internal::DispatchFloating(inp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    LayerNormBackwardKernel<T>(dinp.data_as<T>(), dweight.data_as<T>(), dbias.data_as<T>(),
                               dout.data_as<T>(), inp.data_as<T>(), weight.data_as<T>(),
                               mean.data_as<float>(), rstd.data_as<float>(), n, c);
  });
  return Status::Ok();
}

}  // namespace rt::cpu
