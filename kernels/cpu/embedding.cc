// Token and position embeddings (after llm.c's encoder_forward/backward), with the
// vocab-parallel row range of kernels/ops.h.
#include <cstring>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_ops.h"

namespace rt::cpu {

namespace {

template <typename T>
void EmbeddingForwardKernel(T* out, const int32_t* tokens, const T* wte, int64_t n, int64_t v_local,
                            int64_t c, int64_t vocab_start) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_start;
    T* y = out + i * c;
    if (row >= 0 && row < v_local) {
      std::memcpy(y, wte + row * c, static_cast<size_t>(c) * sizeof(T));
    } else {
      std::memset(y, 0, static_cast<size_t>(c) * sizeof(T));
    }
  }
}

template <typename T>
RT_CPU_CLONES void EmbeddingBackwardKernel(T* dwte, const T* dout, const int32_t* tokens, int64_t n,
                                           int64_t v_local, int64_t c, int64_t vocab_start) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_start;
    if (row < 0 || row >= v_local) continue;
    T* dw = dwte + row * c;
    const T* g = dout + i * c;
    for (int64_t k = 0; k < c; ++k) dw[k] = Store<T>(Load(dw[k]) + Load(g[k]));
  }
}

// out[B,T,C] += wpe[pos_start + t].
template <typename T>
RT_CPU_CLONES void PositionAddKernel(T* out, const T* wpe, int64_t b_len, int64_t t_len,
                                     int64_t c) {
  for (int64_t b = 0; b < b_len; ++b) {
    for (int64_t t = 0; t < t_len; ++t) {
      T* y = out + (b * t_len + t) * c;
      const T* w = wpe + t * c;
      for (int64_t k = 0; k < c; ++k) y[k] = Store<T>(Load(y[k]) + Load(w[k]));
    }
  }
}

// dwpe[pos_start + t] += Σ_b dout[b,t].
template <typename T>
RT_CPU_CLONES void PositionBackwardKernel(T* dwpe, const T* dout, int64_t b_len, int64_t t_len,
                                          int64_t c) {
  for (int64_t t = 0; t < t_len; ++t) {
    T* dw = dwpe + t * c;
    for (int64_t b = 0; b < b_len; ++b) {
      const T* g = dout + (b * t_len + t) * c;
      for (int64_t k = 0; k < c; ++k) dw[k] = Store<T>(Load(dw[k]) + Load(g[k]));
    }
  }
}

}  // namespace

Status EmbeddingForward(Tensor out, Tensor tokens, Tensor wte, int64_t vocab_start) {
  internal::DispatchFloating(wte.dtype(), [&](auto tag) {
    using T = decltype(tag);
    EmbeddingForwardKernel<T>(out.data_as<T>(), tokens.data_as<int32_t>(), wte.data_as<T>(),
                              tokens.numel(), wte.dim(0), wte.dim(1), vocab_start);
  });
  return Status::Ok();
}

Status EmbeddingBackward(Tensor dwte, Tensor dout, Tensor tokens, int64_t vocab_start) {
  internal::DispatchFloating(dwte.dtype(), [&](auto tag) {
    using T = decltype(tag);
    EmbeddingBackwardKernel<T>(dwte.data_as<T>(), dout.data_as<T>(), tokens.data_as<int32_t>(),
                               tokens.numel(), dwte.dim(0), dwte.dim(1), vocab_start);
  });
  return Status::Ok();
}

Status PositionEmbeddingAdd(Tensor out, Tensor wpe, int64_t pos_start) {
  const int64_t t_len = out.dim(out.ndim() - 2), c = out.shape().last();
  const int64_t b_len = t_len == 0 ? 0 : out.shape().rows() / t_len;
  internal::DispatchFloating(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    PositionAddKernel<T>(out.data_as<T>(), wpe.data_as<T>() + pos_start * c, b_len, t_len, c);
  });
  return Status::Ok();
}

Status PositionEmbeddingBackward(Tensor dwpe, Tensor dout, int64_t pos_start) {
  const int64_t t_len = dout.dim(dout.ndim() - 2), c = dout.shape().last();
  const int64_t b_len = t_len == 0 ? 0 : dout.shape().rows() / t_len;
  internal::DispatchFloating(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    PositionBackwardKernel<T>(dwpe.data_as<T>() + pos_start * c, dout.data_as<T>(), b_len, t_len,
                              c);
  });
  return Status::Ok();
}

}  // namespace rt::cpu
