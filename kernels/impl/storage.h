// Internal to kernels/: the storage types of the floating dtypes and their load/store to fp32,
// shared by the CPU (.cc) and CUDA (.cu) kernels through element.h's host/device functions.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/element.h"

namespace rt::internal {

// bf16 and IEEE fp16 values as stored: the raw 16 bits.
struct Bf16 {
  uint16_t bits;
};
struct Half {
  uint16_t bits;
};

// Storage → fp32 (exact).
RT_HD float Load(float x) { return x; }
RT_HD float Load(Bf16 x) { return FloatFromBf16(x.bits); }
RT_HD float Load(Half x) { return FloatFromHalf(x.bits); }

// fp32 → storage, rounding to nearest even.
template <typename T>
RT_HD T Store(float x);
template <>
RT_HD float Store<float>(float x) {
  return x;
}
template <>
RT_HD Bf16 Store<Bf16>(float x) {
  return Bf16{Bf16FromFloat(x)};
}
template <>
RT_HD Half Store<Half>(float x) {
  return Half{HalfFromFloat(x)};
}

// The DType of a storage type.
template <typename T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<float>() {
  return DType::kF32;
}
template <>
constexpr DType DTypeOf<Bf16>() {
  return DType::kBF16;
}
template <>
constexpr DType DTypeOf<Half>() {
  return DType::kF16;
}

// Calls f(T{}) with T the storage type of floating dtype `t`; returns f's result. `t` must be
// floating (the op checks guarantee it).
template <typename F>
auto DispatchFloating(DType t, F&& f) {
  switch (t) {
    case DType::kBF16:
      return f(Bf16{});
    case DType::kF16:
      return f(Half{});
    default:
      return f(float{});
  }
}

}  // namespace rt::internal
