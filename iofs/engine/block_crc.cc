#include "iofs/engine/block_crc.h"

#include <cstring>
#include <vector>

#include "base/crc32c.h"
#include "iofs/engine/chunk_record.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace rt::iofs {
namespace {

#if defined(__x86_64__)
// CRC32C of four blocks of `n` bytes each (n a multiple of 8), interleaved; with kCopy, each word
// is also stored to the matching destination block.
template <bool kCopy>
__attribute__((target("sse4.2"))) void FourBlocks(std::byte* const* dst, const std::byte* const* src, size_t n,
                                                  uint32_t* out) {
  uint64_t crc[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w[4];
    for (int k = 0; k < 4; ++k) std::memcpy(&w[k], src[k] + i, 8);
    for (int k = 0; k < 4; ++k) crc[k] = _mm_crc32_u64(crc[k], w[k]);
    if constexpr (kCopy)
      for (int k = 0; k < 4; ++k) std::memcpy(dst[k] + i, &w[k], 8);
  }
  for (int k = 0; k < 4; ++k) out[k] = ~static_cast<uint32_t>(crc[k]);
}
#endif

}  // namespace

void BlockCrcs(const std::byte* data, size_t length, size_t block_size, std::span<uint32_t> crcs) {
  size_t block = 0;
  const size_t full = length / block_size;
#if defined(__x86_64__)
  if (Crc32cHardwareAvailable() && block_size % 8 == 0) {
    for (; block + 4 <= full; block += 4) {
      const std::byte* p = data + block * block_size;
      const std::byte* src[4] = {p, p + block_size, p + 2 * block_size, p + 3 * block_size};
      FourBlocks<false>(nullptr, src, block_size, crcs.data() + block);
    }
  }
#endif
  for (size_t at = block * block_size; at < length; at += block_size, ++block)
    crcs[block] = Crc32c(data + at, std::min(block_size, length - at));
}

void CopyBlockCrcs(std::byte* dst, const std::byte* src, size_t length, size_t block_size,
                   std::span<uint32_t> crcs) {
  size_t block = 0;
  const size_t full = length / block_size;
#if defined(__x86_64__)
  if (Crc32cHardwareAvailable() && block_size % 8 == 0) {
    for (; block + 4 <= full; block += 4) {
      const size_t at = block * block_size;
      const std::byte* s = src + at;
      std::byte* d = dst + at;
      const std::byte* from[4] = {s, s + block_size, s + 2 * block_size, s + 3 * block_size};
      std::byte* const to[4] = {d, d + block_size, d + 2 * block_size, d + 3 * block_size};
      FourBlocks<true>(to, from, block_size, crcs.data() + block);
    }
  }
#endif
  const size_t done = block * block_size;
  if (length > done) std::memcpy(dst + done, src + done, length - done);
  for (size_t at = done; at < length; at += block_size, ++block)
    crcs[block] = Crc32c(dst + at, std::min(block_size, length - at));
}

uint32_t FastCrc32c(const std::byte* data, size_t length) {
  if (length < 4 * static_cast<size_t>(kBlockSize)) return Crc32c(data, length);
  std::vector<uint32_t> crcs((length + kBlockSize - 1) / kBlockSize);
  BlockCrcs(data, length, kBlockSize, crcs);
  return CombineBlockCrcs(crcs, length);
}

uint32_t CopyFastCrc32c(std::byte* dst, const std::byte* src, size_t length) {
  if (length < 4 * static_cast<size_t>(kBlockSize)) {
    if (length > 0) std::memcpy(dst, src, length);
    return Crc32c(dst, length);
  }
  std::vector<uint32_t> crcs((length + kBlockSize - 1) / kBlockSize);
  CopyBlockCrcs(dst, src, length, kBlockSize, crcs);
  return CombineBlockCrcs(crcs, length);
}

}  // namespace rt::iofs
