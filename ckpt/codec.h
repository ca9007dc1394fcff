// Per-piece codecs of checkpoint data (docs/formats/checkpoint.md): stored as is, zstd, or
// zstd over byte planes ("bgzstd": byte k of every element first, then byte k+1, ...; the
// exponent bytes of floats compress far better on their own). Thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace rt::ckpt {

// Stored values are part of the format: never change them.
enum class Codec : uint8_t { kNone = 0, kZstd = 1, kByteGroupedZstd = 2 };

// "none", "zstd", "bgzstd".
const char* CodecName(Codec codec);
// Parses a config name (as CodecName). Errors: InvalidArgument naming the value.
Result<Codec> ParseCodec(std::string_view name);
// Checks a stored codec byte. Errors: Corruption naming the value.
Result<Codec> CodecFromByte(uint8_t value);

// Encodes `raw`, whose elements are `element_size` bytes (raw.size() a multiple of it), at zstd
// level `level`. kNone returns a copy. Errors: Internal naming zstd's error.
Result<std::vector<uint8_t>> Encode(Codec codec, size_t element_size, std::span<const uint8_t> raw,
                                    int level = 1);
// Decodes `stored` into `raw`, which must be exactly the raw length. Errors: Corruption when the
// bytes do not decode to exactly raw.size() bytes (naming zstd's error).
Status Decode(Codec codec, size_t element_size, std::span<const uint8_t> stored,
              std::span<uint8_t> raw);

}  // namespace rt::ckpt
