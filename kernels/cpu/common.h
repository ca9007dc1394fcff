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

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(RT_NO_CLONES)
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

// Σ x[i] in fp32 with 16 independent partial sums (so the compiler vectorises it).
template <typename T>
inline float RowSum(const T* __restrict x, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += Load(x[i + j]);
  }
  float s = 0.0f;
  for (int j = 0; j < 16; ++j) s += acc[j];
  for (; i < n; ++i) s += Load(x[i]);
  return s;
}

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
