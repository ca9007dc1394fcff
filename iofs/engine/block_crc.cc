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
// CRC32C of four blocks of `n` bytes each (n a multiple of 8), interleaved.
__attribute__((target("sse4.2"))) void FourBlocks(const std::byte* a, const std::byte* b,
                                                  const std::byte* c, const std::byte* d, size_t n,
                                                  uint32_t* out) {
  uint64_t ca = 0xffffffffu, cb = 0xffffffffu, cc = 0xffffffffu, cd = 0xffffffffu;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t wa, wb, wc, wd;
    std::memcpy(&wa, a + i, 8);
    std::memcpy(&wb, b + i, 8);
    std::memcpy(&wc, c + i, 8);
    std::memcpy(&wd, d + i, 8);
    ca = _mm_crc32_u64(ca, wa);
    cb = _mm_crc32_u64(cb, wb);
    cc = _mm_crc32_u64(cc, wc);
    cd = _mm_crc32_u64(cd, wd);
  }
  out[0] = ~static_cast<uint32_t>(ca);
  out[1] = ~static_cast<uint32_t>(cb);
  out[2] = ~static_cast<uint32_t>(cc);
  out[3] = ~static_cast<uint32_t>(cd);
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
      FourBlocks(p, p + block_size, p + 2 * block_size, p + 3 * block_size, block_size,
                 crcs.data() + block);
    }
  }
#endif
  for (size_t at = block * block_size; at < length; at += block_size, ++block)
    crcs[block] = Crc32c(data + at, std::min(block_size, length - at));
}

uint32_t FastCrc32c(const std::byte* data, size_t length) {
  if (length < 4 * static_cast<size_t>(kBlockSize)) return Crc32c(data, length);
  std::vector<uint32_t> crcs((length + kBlockSize - 1) / kBlockSize);
  BlockCrcs(data, length, kBlockSize, crcs);
  return CombineBlockCrcs(crcs, length);
}

}  // namespace rt::iofs
