// Element math shared by the CPU and CUDA kernels (STYLE.md rule 6): plain inline functions that
// compile as host code in .cc files and as host/device code in .cu files, so the CPU tests
// cover the arithmetic the GPU runs.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define RT_HD __host__ __device__ __forceinline__
#else
#define RT_HD inline
#endif

namespace rt {

// The bits of a float, and back.
RT_HD uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
RT_HD float BitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// fp32 → bf16 with round-to-nearest-even; NaN stays NaN (quiet, sign kept), infinities stay.
RT_HD uint16_t Bf16FromFloat(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// bf16 → fp32 (exact).
RT_HD float FloatFromBf16(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

// fp32 → IEEE fp16 with round-to-nearest-even, subnormals, overflow to infinity, NaN kept quiet.
RT_HD uint16_t HalfFromFloat(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
  if (ax >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7C00u);  // ≥ 65536 → inf
  if (ax < 0x33000000u) return sign;                                    // < 2^-25 → ±0
  uint32_t r, rem, half;
  if (ax < 0x38800000u) {  // fp16 subnormal: units of 2^-24
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - e;
    r = m >> shift;
    rem = m & ((1u << shift) - 1u);
    half = 1u << (shift - 1u);
  } else {  // normal: rebias the exponent from 127 to 15
    const uint32_t base = ax - 0x38000000u;
    r = base >> 13;
    rem = base & 0x1FFFu;
    half = 0x1000u;
  }
  if (rem > half || (rem == half && (r & 1u))) ++r;  // may carry into inf: correct
  return static_cast<uint16_t>(sign | r);
}

// IEEE fp16 → fp32 (exact).
RT_HD float FloatFromHalf(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  const uint32_t m = h & 0x3FFu;
  if (e == 0) {
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // m · 2^-24
    return BitsFloat(FloatBits(v) | sign);
  }
  if (e == 31) return BitsFloat(sign | 0x7F800000u | (m << 13));
  return BitsFloat(sign | ((e + 112u) << 23) | (m << 13));
}

// GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
RT_HD float GeluTanh(float x) {
  const float kS = 0.7978845608028654f;  // √(2/π)
  const float cube = 0.044715f * x * x * x;
  return 0.5f * x * (1.0f + tanhf(kS * (x + cube)));
}

// d GeluTanh(x) / dx.
RT_HD float GeluTanhGrad(float x) {
  const float kS = 0.7978845608028654f;
  const float cube = 0.044715f * x * x * x;
  const float t = tanhf(kS * (x + cube));
  const float sech2 = 1.0f - t * t;
  return 0.5f * (1.0f + t) + 0.5f * x * sech2 * kS * (1.0f + 3.0f * 0.044715f * x * x);
}

// tanh through Eigen's rational approximation (degree 13/6 on x clamped to ±7.9053), within a
// few ulp of tanhf; branch-free so loops over it vectorise. NaN propagates. The GELU kernels of
// both backends use it (through GeluTanhFast / GeluTanhGradFast below).
RT_HD float TanhRational(float x) {
  const float kClamp = 7.90531110763549805f;
  x = x > kClamp ? kClamp : (x < -kClamp ? -kClamp : x);
  const float x2 = x * x;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * x;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return p / q;
}

// GeluTanh with TanhRational: what the GELU forward kernels compute (within 1e-6·(1+|x|) of
// GeluTanh).
RT_HD float GeluTanhFast(float x) {
  const float kS = 0.7978845608028654f;
  const float cube = 0.044715f * x * x * x;
  return 0.5f * x * (1.0f + TanhRational(kS * (x + cube)));
}

// GeluTanhGrad with TanhRational: what the GELU backward kernels compute.
RT_HD float GeluTanhGradFast(float x) {
  const float kS = 0.7978845608028654f;
  const float cube = 0.044715f * x * x * x;
  const float t = TanhRational(kS * (x + cube));
  const float sech2 = 1.0f - t * t;
  return 0.5f * (1.0f + t) + 0.5f * x * sech2 * kS * (1.0f + 3.0f * 0.044715f * x * x);
}

// One AdamW element update with decoupled weight decay (Loshchilov & Hutter):
//   m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//   p ← p − lr·( (m/bc1) / (√(v/bc2) + eps) + wd·p )
// where bc1 = 1−β1^t and bc2 = 1−β2^t are the bias corrections for step t. Returns the new p.
RT_HD float AdamWElement(float p, float g, float* m, float* v, float lr, float beta1, float beta2,
                         float bc1, float bc2, float eps, float weight_decay) {
  const float mt = beta1 * *m + (1.0f - beta1) * g;
  const float vt = beta2 * *v + (1.0f - beta2) * g * g;
  *m = mt;
  *v = vt;
  const float mhat = mt / bc1;
  const float vhat = vt / bc2;
  return p - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);
}

}  // namespace rt
