// CRC32C (Castagnoli), as used by iSCSI, ext4, RocksDB and our on-disk and wire formats.
// Uses the SSE4.2 crc32 instruction when the CPU has it, a table-driven fallback otherwise.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace rt {

// Extends `crc` (the CRC32C of earlier bytes, 0 for none) over `data[0, n)`.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

// The CRC32C of `data[0, n)`.
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }
inline uint32_t Crc32c(std::span<const std::byte> bytes) {
  return Crc32c(bytes.data(), bytes.size());
}

// The portable implementation, exposed so tests compare it with the hardware one.
uint32_t Crc32cExtendSoftware(uint32_t crc, const void* data, size_t n);
// True if Crc32cExtend uses the SSE4.2 instruction on this CPU.
bool Crc32cHardwareAvailable();

}  // namespace rt
