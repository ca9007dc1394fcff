#include "iofs/engine/block_crc.h"

#include <algorithm>
#include <array>
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

// CRC32C of a concatenation from the CRCs of its parts (zlib's crc32_combine, with the
// Castagnoli polynomial): appending n zero bits is a linear map over GF(2), a 32x32 matrix.
using Gf2Matrix = std::array<uint32_t, 32>;

uint32_t Times(const Gf2Matrix& m, uint32_t v) {
  uint32_t sum = 0;
  for (int i = 0; v; v >>= 1, ++i)
    if (v & 1) sum ^= m[i];
  return sum;
}

Gf2Matrix Square(const Gf2Matrix& m) {
  Gf2Matrix out;
  for (int i = 0; i < 32; ++i) out[i] = Times(m, m[i]);
  return out;
}

// The operator that appends `len` zero bytes to a CRC.
Gf2Matrix ZerosOperator(uint64_t len) {
  Gf2Matrix one_bit;  // appends one zero bit
  one_bit[0] = 0x82f63b78u;
  for (int i = 1; i < 32; ++i) one_bit[i] = 1u << (i - 1);
  Gf2Matrix power = Square(Square(Square(one_bit)));  // one zero byte
  Gf2Matrix result{};
  for (int i = 0; i < 32; ++i) result[i] = 1u << i;  // identity
  for (; len; len >>= 1) {
    if (len & 1) {
      Gf2Matrix next;
      for (int i = 0; i < 32; ++i) next[i] = Times(power, result[i]);
      result = next;
    }
    power = Square(power);
  }
  return result;
}

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

// FourBlocks<true> in its fastest form on this CPU.
void CopyFourBlocks(std::byte* const* dst, const std::byte* const* src, size_t n, uint32_t* out) {
  if (HasAvx2()) {
    FourBlocksCopyAvx2(dst, src, n, out);
  } else {
    FourBlocks<true>(dst, src, n, out);
  }
}

// The CRC32C of one block of `block_size` bytes (a multiple of 32) from its four quarters
// checksummed interleaved and then combined; with kCopy, the block is copied to dst as well.
// A lone 64 KiB block (a random read's) takes about a third of the time of one serial pass.
template <bool kCopy>
uint32_t QuarteredBlockCrc(std::byte* dst, const std::byte* src, size_t block_size) {
  static const Gf2Matrix kQuarterShift = ZerosOperator(kBlockSize / 4);
  const size_t q = block_size / 4;
  const std::byte* from[4] = {src, src + q, src + 2 * q, src + 3 * q};
  uint32_t crcs[4];
  if constexpr (kCopy) {
    std::byte* const to[4] = {dst, dst + q, dst + 2 * q, dst + 3 * q};
    CopyFourBlocks(to, from, q, crcs);
  } else {
    FourBlocks<false>(nullptr, from, q, crcs);
  }
  const Gf2Matrix* shift = &kQuarterShift;
  Gf2Matrix other;  // a block size other than kBlockSize (tests)
  if (q != kBlockSize / 4) shift = &(other = ZerosOperator(q));
  uint32_t crc = crcs[0];
  for (int k = 1; k < 4; ++k) crc = Times(*shift, crc) ^ crcs[k];
  return crc;
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
    if (block_size % 32 == 0)
      for (; block < full; ++block)
        crcs[block] = QuarteredBlockCrc<false>(nullptr, data + block * block_size, block_size);
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
      CopyFourBlocks(to, from, block_size, crcs.data() + block);
    }
    if (block_size % 32 == 0)
      for (; block < full; ++block) {
        const size_t at = block * block_size;
        crcs[block] = QuarteredBlockCrc<true>(dst + at, src + at, block_size);
      }
  }
#endif
  const size_t done = block * block_size;
  if (length > done) std::memcpy(dst + done, src + done, length - done);
  for (size_t at = done; at < length; at += block_size, ++block)
    crcs[block] = Crc32c(dst + at, std::min(block_size, length - at));
}

uint32_t CombineBlockCrcs(std::span<const uint32_t> block_crcs, uint64_t length) {
  static const Gf2Matrix kBlockShift = ZerosOperator(kBlockSize);
  uint32_t crc = 0;
  for (size_t i = 0; i < block_crcs.size(); ++i) {
    const uint64_t n = std::min<uint64_t>(kBlockSize, length - i * kBlockSize);
    if (i == 0) {
      crc = block_crcs[0];
    } else {
      crc = Times(n == kBlockSize ? kBlockShift : ZerosOperator(n), crc) ^ block_crcs[i];
    }
  }
  return crc;
}

uint32_t FastCrc32c(const std::byte* data, size_t length) {
  if (length < kBlockSize) return Crc32c(data, length);
  std::vector<uint32_t> crcs((length + kBlockSize - 1) / kBlockSize);
  BlockCrcs(data, length, kBlockSize, crcs);
  return CombineBlockCrcs(crcs, length);
}

uint32_t CopyFastCrc32c(std::byte* dst, const std::byte* src, size_t length) {
  if (length < kBlockSize) {
    if (length > 0) std::memcpy(dst, src, length);
    return Crc32c(dst, length);
  }
  std::vector<uint32_t> crcs((length + kBlockSize - 1) / kBlockSize);
  CopyBlockCrcs(dst, src, length, kBlockSize, crcs);
  return CombineBlockCrcs(crcs, length);
}

}  // namespace rt::iofs
