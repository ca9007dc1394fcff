// Internal to kernels/cpu: helpers shared by the CPU kernels — per-thread scratch memory,
// vectorisable conversions between the storage types and fp32, a vectorisable exp, and the
// RT_CPU_CLONES attribute that compiles a hot loop once per x86-64 level (v4, v3, baseline) and
// picks the best at load time, so the library stays portable and still uses AVX2/AVX-512.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/impl/storage.h"

// GCC only (clang 14 cannot clone templates); not under ASan or TSan (ifunc resolvers run first).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(RT_NO_CLONES) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define RT_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define RT_CPU_CLONES
#endif

namespace rt::cpu {

using internal::Bf16;
using internal::Half;
using internal::Load;
using internal::Store;

// Per-thread scratch: slot `slot` (0..7) grown to at least `n` floats. The memory stays valid
// until the same thread asks for the same slot again. Not zeroed.
float* Scratch(int slot, size_t n);

// dst[i] = src[i] as fp32.
template <typename T>
inline void LoadRow(float* __restrict dst, const T* __restrict src, int64_t n) {
  if constexpr (sizeof(T) == 4) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = Load(src[i]);
  }
}

// dst[i] = src[i] rounded to T.
template <typename T>
inline void StoreRow(T* __restrict dst, const float* __restrict src, int64_t n) {
  if constexpr (sizeof(T) == 4) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = Store<T>(src[i]);
  }
}

// dst[i] += src[i] (math in fp32, rounded back to T).
template <typename T>
inline void AccumulateRow(T* __restrict dst, const float* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Store<T>(Load(dst[i]) + src[i]);
}

// The tensor's elements as fp32: the data itself for f32, else a converted copy in scratch
// slot `slot`.
template <typename T>
inline const float* AsF32(const T* data, int64_t n, int slot) {
  if constexpr (sizeof(T) == 4) {
    return reinterpret_cast<const float*>(data);
  } else {
    float* s = Scratch(slot, static_cast<size_t>(n));
    LoadRow(s, data, n);
    return s;
  }
}

// Reductions over fp32 rows with 8-lane vectors (GCC/Clang vector extensions: one AVX register
// in the v3/v4 clones, two SSE registers in the baseline) and two independent accumulators, so
// they run at load speed instead of the latency of one scalar add chain. Summation order differs
// from a sequential loop (rounding differs in the last bits).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
// The vector helpers are inline and never cross an ABI boundary.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float F8 __attribute__((vector_size(32)));
typedef float F4 __attribute__((vector_size(16)));
typedef double D4 __attribute__((vector_size(32)));

inline F8 LoadF8(const float* p) {
  F8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline float HSum(F8 v) {
  float s = 0.0f;
  for (int k = 0; k < 8; ++k) s += v[k];
  return s;
}

// Σ x[i].
inline float SumF32(const float* x, int64_t n) {
  F8 a = {}, b = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a += LoadF8(x + i);
    b += LoadF8(x + i + 8);
  }
  float s = HSum(a + b);
  for (; i < n; ++i) s += x[i];
  return s;
}

// Σ x[i]·y[i].
inline float DotF32(const float* x, const float* y, int64_t n) {
  F8 a = {}, b = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a += LoadF8(x + i) * LoadF8(y + i);
    b += LoadF8(x + i + 8) * LoadF8(y + i + 8);
  }
  float s = HSum(a + b);
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

// max x[i] (n ≥ 1; NaN-free input assumed, as for softmax rows).
inline float MaxF32(const float* x, int64_t n) {
  float m = x[0];
  int64_t i = 0;
  if (n >= 16) {
    F8 a = LoadF8(x), b = LoadF8(x + 8);
    for (i = 16; i + 16 <= n; i += 16) {
      const F8 u = LoadF8(x + i), v = LoadF8(x + i + 8);
      a = u > a ? u : a;
      b = v > b ? v : b;
    }
    a = b > a ? b : a;
    for (int k = 0; k < 8; ++k) m = a[k] > m ? a[k] : m;
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// Σ x[i]² in double (each square exact).
inline double SumSquaresF64(const float* x, int64_t n) {
  D4 a = {}, b = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    F4 lo, hi;
    std::memcpy(&lo, x + i, sizeof(lo));
    std::memcpy(&hi, x + i + 4, sizeof(hi));
    const D4 dl = __builtin_convertvector(lo, D4), dh = __builtin_convertvector(hi, D4);
    a += dl * dl;
    b += dh * dh;
  }
  const D4 t = a + b;
  double s = t[0] + t[1] + t[2] + t[3];
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// exp(x) for fp32 by Cephes' range reduction and degree-7 polynomial: within 2 ulp of expf for
// x in [-87.3, 88.37]; 0 below, +inf above; NaN propagates. Branch-free for vectorisation.
inline float ExpFast(float x) {
  const float kLog2e = 1.44269504088896341f;
  const float kLn2Hi = 0.693359375f;
  const float kLn2Lo = -2.12194440e-4f;
  const float kRound = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer
  const float xc = x > 88.37f ? 88.37f : (x < -87.3f ? -87.3f : x);
  const float j = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - j * kLn2Hi) - j * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t e = static_cast<int32_t>(j) + 127;
  uint32_t bits = static_cast<uint32_t>(e) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  float y = p * scale;
  y = x < -87.3f ? 0.0f : y;
  y = x > 88.37f ? __builtin_inff() : y;
  return x != x ? x : y;
}

}  // namespace rt::cpu
