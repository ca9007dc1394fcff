// Element types shared by kernels, comm and checkpoints. Values are stored in formats
// (checkpoint manifests, wire frames): never change the meaning of one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace rt {

enum class DType : uint8_t {
  kF32 = 0,
  kBF16 = 1,
  kF16 = 2,
  kI32 = 3,
  kI64 = 4,
  kU8 = 5,
};

// Bytes per element.
constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
  }
  return 0;
}

// Lower-case name: "f32", "bf16", "f16", "i32", "i64", "u8" (as in safetensors: F32, BF16, ...).
constexpr std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU8:
      return "u8";
  }
  return "?";
}

// True for the floating-point types.
constexpr bool IsFloating(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
}

}  // namespace rt
