#include "comm/tcp/reduce.h"

#include <algorithm>
#include <cstdint>

#include "kernels/element.h"

namespace rt::comm::tcp {
namespace {

template <typename T>
inline T Apply(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      return a > b ? a : b;
    case ReduceOp::kMin:
      return a < b ? a : b;
    default:
      return static_cast<T>(a + b);
  }
}

template <typename T, ReduceOp kOp>
void Loop(T* __restrict out, const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if constexpr (kOp == ReduceOp::kMax)
      out[i] = a[i] > b[i] ? a[i] : b[i];
    else if constexpr (kOp == ReduceOp::kMin)
      out[i] = a[i] < b[i] ? a[i] : b[i];
    else
      out[i] = static_cast<T>(a[i] + b[i]);
  }
}

template <typename T>
void Typed(T* out, const T* a, const T* b, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      Loop<T, ReduceOp::kMax>(out, a, b, n);
      break;
    case ReduceOp::kMin:
      Loop<T, ReduceOp::kMin>(out, a, b, n);
      break;
    default:
      Loop<T, ReduceOp::kSum>(out, a, b, n);
      break;
  }
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void Half(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n, ReduceOp op) {
  for (size_t i = 0; i < n; ++i) out[i] = FromF(Apply(ToF(a[i]), ToF(b[i]), op));
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void HalfMany(uint16_t* dst, std::span<const void* const> srcs, size_t n, ReduceOp op) {
  constexpr size_t kBlock = 2048;
  float acc[kBlock];
  for (size_t at = 0; at < n; at += kBlock) {
    const size_t m = std::min(kBlock, n - at);
    for (size_t i = 0; i < m; ++i) acc[i] = ToF(dst[at + i]);
    for (const void* s : srcs) {
      const uint16_t* src = static_cast<const uint16_t*>(s) + at;
      switch (op) {
        case ReduceOp::kMax:
          for (size_t i = 0; i < m; ++i) acc[i] = std::max(acc[i], ToF(src[i]));
          break;
        case ReduceOp::kMin:
          for (size_t i = 0; i < m; ++i) acc[i] = std::min(acc[i], ToF(src[i]));
          break;
        default:
          for (size_t i = 0; i < m; ++i) acc[i] += ToF(src[i]);
          break;
      }
    }
    for (size_t i = 0; i < m; ++i) dst[at + i] = FromF(acc[i]);
  }
}

}  // namespace

void ReduceMany(void* dst, std::span<const void* const> srcs, size_t count, DType dtype,
                ReduceOp op) {
  if (srcs.empty() || count == 0) return;
  if (dtype == DType::kBF16)
    return HalfMany<FloatFromBf16, Bf16FromFloat>(static_cast<uint16_t*>(dst), srcs, count, op);
  if (dtype == DType::kF16)
    return HalfMany<FloatFromHalf, HalfFromFloat>(static_cast<uint16_t*>(dst), srcs, count, op);
  // Blocks of 16 KiB: dst stays in L1 while every source streams through it.
  const size_t es = DTypeSize(dtype), block = (16u << 10) / es;
  for (size_t at = 0; at < count; at += block) {
    const size_t m = std::min(block, count - at);
    void* d = static_cast<std::byte*>(dst) + at * es;
    for (const void* s : srcs)
      ReduceInto(d, static_cast<const std::byte*>(s) + at * es, m, dtype, op);
  }
}

void ReduceTo(void* out, const void* a, const void* b, size_t n, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kF32:
      Typed(static_cast<float*>(out), static_cast<const float*>(a), static_cast<const float*>(b), n,
            op);
      break;
    case DType::kI32:
      Typed(static_cast<int32_t*>(out), static_cast<const int32_t*>(a),
            static_cast<const int32_t*>(b), n, op);
      break;
    case DType::kI64:
      Typed(static_cast<int64_t*>(out), static_cast<const int64_t*>(a),
            static_cast<const int64_t*>(b), n, op);
      break;
    case DType::kU8:
      Typed(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(a),
            static_cast<const uint8_t*>(b), n, op);
      break;
    case DType::kBF16:
      Half<FloatFromBf16, Bf16FromFloat>(static_cast<uint16_t*>(out),
                                         static_cast<const uint16_t*>(a),
                                         static_cast<const uint16_t*>(b), n, op);
      break;
    case DType::kF16:
      Half<FloatFromHalf, HalfFromFloat>(static_cast<uint16_t*>(out),
                                         static_cast<const uint16_t*>(a),
                                         static_cast<const uint16_t*>(b), n, op);
      break;
  }
}

void ReduceInto(void* dst, const void* src, size_t n, DType dtype, ReduceOp op) {
  ReduceTo(dst, dst, src, n, dtype, op);
}

void FinishAverage(void* buf, size_t n, DType dtype, ReduceOp op, int ranks) {
  if (op != ReduceOp::kAvg || ranks <= 1) return;
  switch (dtype) {
    case DType::kF32: {
      float* p = static_cast<float*>(buf);
      for (size_t i = 0; i < n; ++i) p[i] /= static_cast<float>(ranks);
      break;
    }
    case DType::kI32: {
      auto* p = static_cast<int32_t*>(buf);
      for (size_t i = 0; i < n; ++i) p[i] /= ranks;
      break;
    }
    case DType::kI64: {
      auto* p = static_cast<int64_t*>(buf);
      for (size_t i = 0; i < n; ++i) p[i] /= ranks;
      break;
    }
    case DType::kU8: {
      auto* p = static_cast<uint8_t*>(buf);
      for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(p[i] / ranks);
      break;
    }
    case DType::kBF16: {
      auto* p = static_cast<uint16_t*>(buf);
      for (size_t i = 0; i < n; ++i)
        p[i] = Bf16FromFloat(FloatFromBf16(p[i]) / static_cast<float>(ranks));
      break;
    }
    case DType::kF16: {
      auto* p = static_cast<uint16_t*>(buf);
      for (size_t i = 0; i < n; ++i)
        p[i] = HalfFromFloat(FloatFromHalf(p[i]) / static_cast<float>(ranks));
      break;
    }
  }
}

}  // namespace rt::comm::tcp
