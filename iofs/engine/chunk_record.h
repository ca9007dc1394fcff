// The RocksDB records of the chunk engine (docs/formats/iofs_chunk_engine.md): the engine header
// (geometry) and one record per chunk (location, version, length, CRC32C per 64 KiB block and
// per chunk). Each record carries a magic, a format version and its own CRC32C.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "iofs/chunk_engine.h"

namespace rt::iofs {

// Checksum block size: every 64 KiB of a chunk has its own CRC32C.
inline constexpr uint32_t kBlockSize = 64u << 10;
// Alignment of O_DIRECT transfers.
inline constexpr uint32_t kIoAlign = 4096;

// Size classes of slots.
enum class SizeClass : uint8_t { kSmall = 0, kLarge = 1 };

// Where a chunk's data lives.
struct ChunkLocation {
  SizeClass size_class = SizeClass::kLarge;
  uint32_t file = 0;  // data file id
  uint32_t slot = 0;  // slot index within the file
};

// The full metadata record of a chunk.
struct ChunkRecord {
  ChunkLocation loc;
  uint32_t length = 0;
  uint64_t version = 0;
  uint32_t chunk_crc = 0;
  std::vector<uint32_t> block_crcs;  // ceil(length / kBlockSize) entries
};

// The engine geometry stored once per engine.
struct EngineHeader {
  uint32_t chunk_size = 0;
  uint32_t small_chunk_size = 0;
  uint32_t slots_per_file = 0;
};

// RocksDB keys.
inline constexpr std::string_view kHeaderKey = "E";
std::string ChunkKey(ChunkId id);
// Decodes a chunk key; false if `key` is not one.
bool ParseChunkKey(std::string_view key, ChunkId* id);

// Record codecs (docs/formats/iofs_chunk_engine.md).
std::string EncodeChunkRecord(const ChunkRecord& record);
// Errors: Corruption naming `what` (bad magic, version, length, CRC or block count).
Result<ChunkRecord> DecodeChunkRecord(std::string_view bytes, std::string_view what);

std::string EncodeEngineHeader(const EngineHeader& header);
Result<EngineHeader> DecodeEngineHeader(std::string_view bytes);

// Computes per-block CRCs and the chunk CRC of `data` in one pass.
void ComputeChunkCrcs(const std::byte* data, size_t length, std::vector<uint32_t>* block_crcs,
                      uint32_t* chunk_crc);

}  // namespace rt::iofs
