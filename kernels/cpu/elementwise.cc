// Elementwise ops: residual add, accumulate, scale, zero, sum of squares and dtype conversion.
#include <cstring>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_ops.h"

namespace rt::cpu {

namespace {

// out = a + b; out may alias a or b (so no __restrict).
template <typename T>
RT_CPU_CLONES void AddKernel(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Store<T>(Load(a[i]) + Load(b[i]));
}

template <typename T>
RT_CPU_CLONES void AccumulateKernel(T* __restrict dst, const T* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Store<T>(Load(dst[i]) + Load(src[i]));
}

template <typename T>
RT_CPU_CLONES void ScaleKernel(T* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = Store<T>(Load(x[i]) * s);
}

// Σ x² in double (each square is exact in double), in blocks widened to fp32 for the
// low-precision types.
template <typename T>
RT_CPU_CLONES double SumOfSquaresKernel(const T* x, int64_t n) {
  if constexpr (sizeof(T) == 4) {
    return SumSquaresF64(reinterpret_cast<const float*>(x), n);
  } else {
    constexpr int64_t kBlock = 4096;
    float buf[kBlock];
    double s = 0.0;
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t len = n - i < kBlock ? n - i : kBlock;
      LoadRow(buf, x + i, len);
      s += SumSquaresF64(buf, len);
    }
    return s;
  }
}

template <typename D, typename S>
RT_CPU_CLONES void ConvertKernel(D* __restrict dst, const S* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Store<D>(Load(src[i]));
}

}  // namespace

Status Add(Tensor out, Tensor a, Tensor b) {
  internal::DispatchFloating(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AddKernel<T>(out.data_as<T>(), a.data_as<T>(), b.data_as<T>(), out.numel());
  });
  return Status::Ok();
}

Status Accumulate(Tensor dst, Tensor src) {
  if (dst.data() == src.data()) return cpu::Scale(dst, 2.0f);
  internal::DispatchFloating(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AccumulateKernel<T>(dst.data_as<T>(), src.data_as<T>(), dst.numel());
  });
  return Status::Ok();
}

Status Scale(Tensor x, float s) {
  internal::DispatchFloating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ScaleKernel<T>(x.data_as<T>(), s, x.numel());
  });
  return Status::Ok();
}

Status Zero(Tensor x) {
  std::memset(x.data(), 0, x.nbytes());
  return Status::Ok();
}

Result<double> SumOfSquares(Tensor x) {
  return internal::DispatchFloating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    return SumOfSquaresKernel<T>(x.data_as<T>(), x.numel());
  });
}

Status Convert(Tensor dst, Tensor src) {
  if (dst.dtype() == src.dtype()) return cpu::Copy(dst, src);
  internal::DispatchFloating(dst.dtype(), [&](auto dtag) {
    internal::DispatchFloating(src.dtype(), [&](auto stag) {
      using D = decltype(dtag);
      using S = decltype(stag);
      ConvertKernel<D, S>(dst.data_as<D>(), src.data_as<S>(), src.numel());
    });
  });
  return Status::Ok();
}

}  // namespace rt::cpu
