#include "iofs/engine/chunk_record.h"

#include <algorithm>
#include <array>
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

}  // namespace

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

void ComputeChunkCrcs(const std::byte* data, size_t length, std::vector<uint32_t>* block_crcs,
                      uint32_t* chunk_crc) {
  block_crcs->assign((length + kBlockSize - 1) / kBlockSize, 0);
  BlockCrcs(data, length, kBlockSize, *block_crcs);
  // One pass over the data: the chunk CRC is combined from the block CRCs.
  *chunk_crc = CombineBlockCrcs(*block_crcs, length);
}

}  // namespace rt::iofs
