// CRC32C of consecutive 64 KiB blocks, several blocks at a time. The SSE4.2 crc32 instruction
// has a latency of three cycles but a throughput of one per cycle, so one block at a time runs
// at a third of the instruction's speed; independent blocks interleaved fill the pipeline (fewer
// than four blocks: the quarters of each block, their CRCs then combined). The results are
// bit-identical to base/crc32c.h's Crc32c of each block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace rt::iofs {

// Writes the CRC32C of every `block_size` piece of data[0, length) (the last one may be shorter)
// to crcs[0, ceil(length / block_size)). `crcs` must hold that many entries.
void BlockCrcs(const std::byte* data, size_t length, size_t block_size, std::span<uint32_t> crcs);

// Copies src[0, length) to dst and computes the block CRCs of the bytes as copied (as BlockCrcs),
// in one pass: each word is loaded once, checksummed and stored, so the CRCs describe exactly
// what lands in dst even if src changes meanwhile.
void CopyBlockCrcs(std::byte* dst, const std::byte* src, size_t length, size_t block_size,
                   std::span<uint32_t> crcs);

// The CRC32C of a whole chunk of `length` bytes from the CRC32C of each of its 64 KiB blocks
// (CRC combination, no pass over the data).
uint32_t CombineBlockCrcs(std::span<const uint32_t> block_crcs, uint64_t length);

// CRC32C of data[0, length), computed as 64 KiB block CRCs interleaved and then combined (the
// same value as base/crc32c.h's Crc32c, about three times faster on large buffers).
uint32_t FastCrc32c(const std::byte* data, size_t length);

// Copies src[0, length) to dst and returns the CRC32C of the bytes as copied (FastCrc32c's value
// of dst afterwards), in one pass over the data.
uint32_t CopyFastCrc32c(std::byte* dst, const std::byte* src, size_t length);

}  // namespace rt::iofs
