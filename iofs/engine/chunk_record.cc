#include "iofs/engine/chunk_record.h"

#include <cstring>
#include <span>

#include "base/bytes.h"
#include "base/crc32c.h"
#include "iofs/engine/block_crc.h"

namespace rt::iofs {
namespace {

constexpr uint32_t kRecordMagic = 0x4b435452;  // "RTCK"
constexpr uint32_t kHeaderMagic = 0x45435452;  // "RTCE"
constexpr uint16_t kFormatVersion = 1;

std::span<const std::byte> AsBytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::string ToString(ByteWriter& w) {
  return std::string(reinterpret_cast<const char*>(w.bytes().data()), w.size());
}

}  // namespace

std::string ChunkKey(ChunkId id) {
  std::string key(9, '\0');
  key[0] = 'C';
  for (int i = 0; i < 8; ++i) key[1 + i] = static_cast<char>((id >> (56 - 8 * i)) & 0xff);
  return key;
}

bool ParseChunkKey(std::string_view key, ChunkId* id) {
  if (key.size() != 9 || key[0] != 'C') return false;
  ChunkId v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(key[1 + i]);
  *id = v;
  return true;
}

std::string EncodeChunkRecord(const ChunkRecord& r) {
  ByteWriter w;
  w.Put<uint32_t>(kRecordMagic);
  w.Put<uint16_t>(kFormatVersion);
  w.Put<uint8_t>(static_cast<uint8_t>(r.loc.size_class));
  w.Put<uint8_t>(0);
  w.Put<uint32_t>(r.loc.file);
  w.Put<uint32_t>(r.loc.slot);
  w.Put<uint32_t>(r.length);
  w.Put<uint64_t>(r.version);
  w.Put<uint32_t>(r.chunk_crc);
  w.Put<uint32_t>(static_cast<uint32_t>(r.block_crcs.size()));
  for (uint32_t c : r.block_crcs) w.Put<uint32_t>(c);
  w.Put<uint32_t>(Crc32c(w.bytes().data(), w.size()));
  return ToString(w);
}

Result<ChunkRecord> DecodeChunkRecord(std::string_view bytes, std::string_view what) {
  const std::string name = "chunk record " + std::string(what);
  if (bytes.size() < 4) return Corruption(name + ": truncated");
  ByteReader rd(AsBytes(bytes.substr(0, bytes.size() - 4)), name);
  uint32_t stored_crc = 0;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  if (Crc32c(bytes.data(), bytes.size() - 4) != stored_crc)
    return Corruption(name + ": record CRC mismatch");
  ASSIGN_OR_RETURN(uint32_t magic, rd.Get<uint32_t>());
  if (magic != kRecordMagic) return Corruption(name + ": bad magic");
  ASSIGN_OR_RETURN(uint16_t version, rd.Get<uint16_t>());
  if (version != kFormatVersion)
    return Corruption(name + ": unknown format version " + std::to_string(version));
  ChunkRecord r;
  ASSIGN_OR_RETURN(uint8_t size_class, rd.Get<uint8_t>());
  if (size_class > 1) return Corruption(name + ": bad size class");
  r.loc.size_class = static_cast<SizeClass>(size_class);
  ASSIGN_OR_RETURN(uint8_t reserved, rd.Get<uint8_t>());
  (void)reserved;
  ASSIGN_OR_RETURN(r.loc.file, rd.Get<uint32_t>());
  ASSIGN_OR_RETURN(r.loc.slot, rd.Get<uint32_t>());
  ASSIGN_OR_RETURN(r.length, rd.Get<uint32_t>());
  ASSIGN_OR_RETURN(r.version, rd.Get<uint64_t>());
  ASSIGN_OR_RETURN(r.chunk_crc, rd.Get<uint32_t>());
  ASSIGN_OR_RETURN(uint32_t blocks, rd.Get<uint32_t>());
  if (blocks != (r.length + kBlockSize - 1) / kBlockSize)
    return Corruption(name + ": " + std::to_string(blocks) + " block CRCs for " +
                      std::to_string(r.length) + " bytes");
  r.block_crcs.resize(blocks);
  for (uint32_t& c : r.block_crcs) {
    ASSIGN_OR_RETURN(c, rd.Get<uint32_t>());
  }
  if (rd.remaining() != 0) return Corruption(name + ": trailing bytes");
  return r;
}

std::string EncodeEngineHeader(const EngineHeader& h) {
  ByteWriter w;
  w.Put<uint32_t>(kHeaderMagic);
  w.Put<uint16_t>(kFormatVersion);
  w.Put<uint32_t>(h.chunk_size);
  w.Put<uint32_t>(h.small_chunk_size);
  w.Put<uint32_t>(h.slots_per_file);
  return ToString(w);
}

Result<EngineHeader> DecodeEngineHeader(std::string_view bytes) {
  ByteReader rd(AsBytes(bytes), "chunk engine header");
  ASSIGN_OR_RETURN(uint32_t magic, rd.Get<uint32_t>());
  if (magic != kHeaderMagic) return Corruption("chunk engine header: bad magic");
  ASSIGN_OR_RETURN(uint16_t version, rd.Get<uint16_t>());
  if (version != kFormatVersion)
    return Corruption("chunk engine header: unknown format version " + std::to_string(version));
  EngineHeader h;
  ASSIGN_OR_RETURN(h.chunk_size, rd.Get<uint32_t>());
  ASSIGN_OR_RETURN(h.small_chunk_size, rd.Get<uint32_t>());
  ASSIGN_OR_RETURN(h.slots_per_file, rd.Get<uint32_t>());
  return h;
}

void ComputeChunkCrcs(const std::byte* data, size_t length, std::vector<uint32_t>* block_crcs,
                      uint32_t* chunk_crc) {
  block_crcs->assign((length + kBlockSize - 1) / kBlockSize, 0);
  BlockCrcs(data, length, kBlockSize, *block_crcs);
  // One pass over the data: the chunk CRC is combined from the block CRCs.
  *chunk_crc = CombineBlockCrcs(*block_crcs, length);
}

}  // namespace rt::iofs
