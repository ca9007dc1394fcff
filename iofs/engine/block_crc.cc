#include "iofs/engine/block_crc.h"

#include <cstring>
#include <vector>

#include "base/crc32c.h"
#include "iofs/engine/chunk_record.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <nmmintrin.h>
#endif

namespace rt::iofs {
namespace {

#if defined(__x86_64__)
// CRC32C of four blocks of `n` bytes each (n a multiple of 8), interleaved; with kCopy, each word
// is also stored to the matching destination block.
template <bool kCopy>
__attribute__((target("sse4.2"))) void FourBlocks(std::byte* const* dst,
                                                  const std::byte* const* src, size_t n,
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

// FourBlocks<true> moving 32 bytes per load and store (AVX2): the scalar form is bound by one
// 8-byte store per cycle, this one copies at memcpy's speed (about 30% faster on 4 MiB buffers).
// The CRC takes the words out of the register that was stored, so it covers exactly the bytes
// copied. `n` must be a multiple of 8.
__attribute__((target("sse4.2,avx2"))) void FourBlocksCopyAvx2(std::byte* const* dst,
                                                               const std::byte* const* src,
                                                               size_t n, uint32_t* out) {
  uint64_t crc[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src[k] + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst[k] + i), v);
      const __m128i lo = _mm256_castsi256_si128(v);
      const __m128i hi = _mm256_extracti128_si256(v, 1);
      crc[k] = _mm_crc32_u64(crc[k], static_cast<uint64_t>(_mm_cvtsi128_si64(lo)));
      crc[k] = _mm_crc32_u64(crc[k], static_cast<uint64_t>(_mm_extract_epi64(lo, 1)));
      crc[k] = _mm_crc32_u64(crc[k], static_cast<uint64_t>(_mm_cvtsi128_si64(hi)));
      crc[k] = _mm_crc32_u64(crc[k], static_cast<uint64_t>(_mm_extract_epi64(hi, 1)));
    }
  }
  for (; i < n; i += 8) {
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, src[k] + i, 8);
      crc[k] = _mm_crc32_u64(crc[k], w);
      std::memcpy(dst[k] + i, &w, 8);
    }
  }
  for (int k = 0; k < 4; ++k) out[k] = ~static_cast<uint32_t>(crc[k]);
}

// True when this CPU runs FourBlocksCopyAvx2.
bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
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
      if (HasAvx2()) {
        FourBlocksCopyAvx2(to, from, block_size, crcs.data() + block);
      } else {
        FourBlocks<true>(to, from, block_size, crcs.data() + block);
      }
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
