#include "ckpt/codec.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace rt::ckpt {

const char* CodecName(Codec codec) {
  switch (codec) {
    case Codec::kNone:
      return "none";
    case Codec::kZstd:
      return "zstd";
    case Codec::kByteGroupedZstd:
      return "bgzstd";
  }
  return "?";
}

Result<Codec> ParseCodec(std::string_view name) {
  for (Codec c : {Codec::kNone, Codec::kZstd, Codec::kByteGroupedZstd})
    if (name == CodecName(c)) return c;
  return InvalidArgument("unknown checkpoint codec '" + std::string(name) +
                         "' (expected none, zstd or bgzstd)");
}

Result<Codec> CodecFromByte(uint8_t value) {
  if (value > static_cast<uint8_t>(Codec::kByteGroupedZstd))
    return Corruption("unknown codec value " + std::to_string(value));
  return static_cast<Codec>(value);
}

namespace {

// Elements per block of the plane transposes: the block's input stays in cache while each of its
// planes is gathered.
constexpr size_t kPlaneBlock = 8192;

// out[k * n + i] = in[i * size + k]: byte k of every element together.
void SplitPlanes(std::span<const uint8_t> in, size_t size, uint8_t* out) {
  const size_t n = in.size() / size;
  for (size_t first = 0; first < n; first += kPlaneBlock) {
    const size_t last = std::min(n, first + kPlaneBlock);
    for (size_t k = 0; k < size; ++k) {
      uint8_t* plane = out + k * n;
      const uint8_t* src = in.data() + k;
      for (size_t i = first; i < last; ++i) plane[i] = src[i * size];
    }
  }
}

// The inverse of SplitPlanes.
void JoinPlanes(const uint8_t* in, size_t size, std::span<uint8_t> out) {
  const size_t n = out.size() / size;
  for (size_t first = 0; first < n; first += kPlaneBlock) {
    const size_t last = std::min(n, first + kPlaneBlock);
    for (size_t k = 0; k < size; ++k) {
      const uint8_t* plane = in + k * n;
      uint8_t* dst = out.data() + k;
      for (size_t i = first; i < last; ++i) dst[i * size] = plane[i];
    }
  }
}

Result<std::vector<uint8_t>> Compress(std::span<const uint8_t> raw, int level) {
  std::vector<uint8_t> out(ZSTD_compressBound(raw.size()));
  const size_t n = ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), level);
  if (ZSTD_isError(n)) return Internal(std::string("zstd compress: ") + ZSTD_getErrorName(n));
  out.resize(n);
  return out;
}

Status Decompress(std::span<const uint8_t> stored, std::span<uint8_t> raw) {
  const unsigned long long expected = ZSTD_getFrameContentSize(stored.data(), stored.size());
  if (expected == ZSTD_CONTENTSIZE_ERROR) return Corruption("zstd: not a zstd frame");
  if (expected != ZSTD_CONTENTSIZE_UNKNOWN && expected != raw.size())
    return Corruption("zstd: frame holds " + std::to_string(expected) + " bytes, expected " +
                      std::to_string(raw.size()));
  const size_t n = ZSTD_decompress(raw.data(), raw.size(), stored.data(), stored.size());
  if (ZSTD_isError(n)) return Corruption(std::string("zstd: ") + ZSTD_getErrorName(n));
  if (n != raw.size())
    return Corruption("zstd: decoded " + std::to_string(n) + " bytes, expected " +
                      std::to_string(raw.size()));
  return Status();
}

}  // namespace

Result<std::vector<uint8_t>> Encode(Codec codec, size_t element_size, std::span<const uint8_t> raw,
                                    int level) {
  if (element_size == 0 || raw.size() % element_size != 0)
    return InvalidArgument("codec input of " + std::to_string(raw.size()) +
                           " bytes is not whole elements of " + std::to_string(element_size));
  switch (codec) {
    case Codec::kNone:
      return std::vector<uint8_t>(raw.begin(), raw.end());
    case Codec::kZstd:
      return Compress(raw, level);
    case Codec::kByteGroupedZstd: {
      if (element_size == 1) return Compress(raw, level);
      std::vector<uint8_t> planes(raw.size());
      SplitPlanes(raw, element_size, planes.data());
      return Compress(planes, level);
    }
  }
  return InvalidArgument("unknown codec");
}

Status Decode(Codec codec, size_t element_size, std::span<const uint8_t> stored,
              std::span<uint8_t> raw) {
  if (element_size == 0 || raw.size() % element_size != 0)
    return Corruption("raw length " + std::to_string(raw.size()) + " is not whole elements of " +
                      std::to_string(element_size));
  switch (codec) {
    case Codec::kNone:
      if (stored.size() != raw.size())
        return Corruption("stored " + std::to_string(stored.size()) + " bytes, expected " +
                          std::to_string(raw.size()));
      if (!raw.empty()) std::memcpy(raw.data(), stored.data(), raw.size());
      return Status();
    case Codec::kZstd:
      return Decompress(stored, raw);
    case Codec::kByteGroupedZstd: {
      if (element_size == 1) return Decompress(stored, raw);
      std::vector<uint8_t> planes(raw.size());
      RETURN_IF_ERROR(Decompress(stored, planes));
      JoinPlanes(planes.data(), element_size, raw);
      return Status();
    }
  }
  return Corruption("unknown codec");
}

}  // namespace rt::ckpt
