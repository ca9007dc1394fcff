// Helpers of the kernels tests: host tensors filled from vectors, deterministic random data,
// and read-back as double.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/element.h"
#include "kernels/ops.h"
#include "kernels/tensor.h"

namespace rt::testing {

// A CPU tensor that owns its buffer.
struct HostTensor {
  Buffer buffer;
  Tensor t;
};

// A zero-filled CPU tensor.
inline HostTensor Make(DType dtype, Shape shape) {
  Result<Buffer> b = Buffer::Allocate(Device::kCpu, shape.numel() * DTypeSize(dtype));
  RT_CHECK(b.ok());
  HostTensor h{std::move(*b), Tensor()};
  h.t = h.buffer.View(dtype, shape);
  return h;
}

// Element i of a floating tensor as double.
inline double Get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32:
      return t.data_as<float>()[i];
    case DType::kBF16:
      return FloatFromBf16(t.data_as<uint16_t>()[i]);
    case DType::kF16:
      return FloatFromHalf(t.data_as<uint16_t>()[i]);
    case DType::kI32:
      return t.data_as<int32_t>()[i];
    default:
      return NAN;
  }
}

// Sets element i (rounded to the tensor's dtype).
inline void Set(const Tensor& t, int64_t i, double v) {
  const float f = static_cast<float>(v);
  switch (t.dtype()) {
    case DType::kF32:
      t.data_as<float>()[i] = f;
      break;
    case DType::kBF16:
      t.data_as<uint16_t>()[i] = Bf16FromFloat(f);
      break;
    case DType::kF16:
      t.data_as<uint16_t>()[i] = HalfFromFloat(f);
      break;
    case DType::kI32:
      t.data_as<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    default:
      break;
  }
}

// All elements as doubles.
inline std::vector<double> ToVec(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = Get(t, i);
  return v;
}

// A tensor filled with values from `v`.
inline HostTensor FromVec(DType dtype, Shape shape, const std::vector<double>& v) {
  HostTensor h = Make(dtype, shape);
  RT_CHECK(static_cast<int64_t>(v.size()) == shape.numel());
  for (int64_t i = 0; i < shape.numel(); ++i) Set(h.t, i, v[i]);
  return h;
}

// n uniform values in [lo, hi), deterministic per seed.
inline std::vector<double> Uniform(int64_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = d(gen);
  return v;
}

// Values exactly representable in float (so the reference sees what the kernel sees).
inline std::vector<double> RoundF32(std::vector<double> v) {
  for (double& x : v) x = static_cast<float>(x);
  return v;
}

// max |a−b| / max(max |b|, floor): the error relative to the scale of the reference.
inline double RelErr(const std::vector<double>& a, const std::vector<double>& b,
                     double floor = 1e-30) {
  RT_CHECK(a.size() == b.size());
  double num = 0.0, den = floor;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

}  // namespace rt::testing

// Asserts that a Status or Result is OK, printing the error otherwise.
#define ASSERT_OK(expr)                                       \
  do {                                                        \
    const ::rt::Status s_ = ::rt::internal::AsStatus((expr)); \
    ASSERT_TRUE(s_.ok()) << s_.ToString();                    \
  } while (0)
