#include "iofs/chain/codec.h"

#include "base/bytes.h"
#include "iofs/chain/value_buffer.h"
#include "iofs/engine/block_crc.h"

// GCC 12 reports false array-bounds/stringop-overflow errors inside std::vector::resize as
// inlined into ByteWriter::Put at -O3 (GCC bug 105329 family).
#pragma GCC diagnostic ignored "-Warray-bounds"
#ifndef __clang__  // a GCC-only warning group
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

namespace rt::iofs::chain {
namespace {

constexpr uint32_t kMessageMagic = 0x4d435452;  // "RTCM"
constexpr uint32_t kConfigMagic = 0x43435452;   // "RTCC"
constexpr uint8_t kMessageFormat = 3;  // 2: a CRC32C follows a value's length; 3: staged values
constexpr uint8_t kVersion = 1;        // of configs

// Value flags.
constexpr uint8_t kHasData = 1;
constexpr uint8_t kTombstone = 2;
constexpr uint8_t kStaged = 4;  // length and CRC32C only: the receiver holds the bytes

// Everything of a message up to its value flags.
void PutMessageFields(ByteWriter& w, const Message& m) {
  w.Put<uint32_t>(kMessageMagic);
  w.Put<uint8_t>(kMessageFormat);
  w.Put<uint8_t>(static_cast<uint8_t>(m.kind));
  w.Put<uint32_t>(m.chain);
  w.Put<uint64_t>(m.chain_version);
  w.Put<uint32_t>(m.from);
  w.Put<uint32_t>(m.to);
  w.Put<uint64_t>(m.key);
  w.Put<uint64_t>(m.version);
  w.Put<uint64_t>(m.count);
}

// The value's CRC32C: carried with it when known, computed otherwise.
uint32_t ValueCrc(const Value& v) {
  return v.crc ? *v.crc
               : FastCrc32c(reinterpret_cast<const std::byte*>(v.data->data()), v.data->size());
}

}  // namespace

std::vector<std::byte> EncodeMessage(const Message& m) {
  std::vector<std::byte> bytes = EncodeMessageHead(m);
  if (m.value.data) {
    const auto* p = reinterpret_cast<const std::byte*>(m.value.data->data());
    bytes.insert(bytes.end(), p, p + m.value.data->size());
  }
  return bytes;
}

std::vector<std::byte> EncodeMessageHead(const Message& m) {
  ByteWriter w;
  PutMessageFields(w, m);
  const uint8_t flags =
      static_cast<uint8_t>((m.value.data ? kHasData : 0) | (m.value.tombstone ? kTombstone : 0));
  w.Put<uint8_t>(flags);
  if (m.value.data) {
    w.Put<uint32_t>(static_cast<uint32_t>(m.value.data->size()));
    w.Put<uint32_t>(ValueCrc(m.value));
  }
  return w.Take();
}

std::vector<std::byte> EncodeStagedMessage(const Message& m) {
  ByteWriter w;
  PutMessageFields(w, m);
  w.Put<uint8_t>(kStaged);
  w.Put<uint32_t>(static_cast<uint32_t>(m.value.data->size()));
  w.Put<uint32_t>(ValueCrc(m.value));
  w.Put<uint64_t>(m.value.staged_id);
  return w.Take();
}

Result<Message> DecodeMessage(std::span<const std::byte> bytes,
                              std::optional<StagedValueRef>* staged) {
  ByteReader rd(bytes, "chain message");
  ASSIGN_OR_RETURN(uint32_t magic, rd.Get<uint32_t>());
  ASSIGN_OR_RETURN(uint8_t version, rd.Get<uint8_t>());
  if (magic != kMessageMagic || version != kMessageFormat)
    return Corruption("chain message: bad magic or version");
  Message m;
  ASSIGN_OR_RETURN(uint8_t kind, rd.Get<uint8_t>());
  if (kind < 1 || kind > 4)
    return Corruption("chain message: unknown kind " + std::to_string(kind));
  m.kind = static_cast<Message::Kind>(kind);
  ASSIGN_OR_RETURN(m.chain, rd.Get<uint32_t>());
  ASSIGN_OR_RETURN(m.chain_version, rd.Get<uint64_t>());
  ASSIGN_OR_RETURN(m.from, rd.Get<uint32_t>());
  ASSIGN_OR_RETURN(m.to, rd.Get<uint32_t>());
  ASSIGN_OR_RETURN(m.key, rd.Get<uint64_t>());
  ASSIGN_OR_RETURN(m.version, rd.Get<uint64_t>());
  ASSIGN_OR_RETURN(m.count, rd.Get<uint64_t>());
  ASSIGN_OR_RETURN(uint8_t flags, rd.Get<uint8_t>());
  if (flags == kStaged) {
    if (!staged) return Corruption("chain message: a staged value where none is accepted");
    if (m.kind != Message::Kind::kForward)
      return Corruption("chain message: a staged value outside a forward");
    StagedValueRef ref;
    ASSIGN_OR_RETURN(ref.size, rd.Get<uint32_t>());
    if (ref.size > kMaxWireValue)
      return Corruption("chain message: staged value of " + std::to_string(ref.size) +
                        " bytes exceeds " + std::to_string(kMaxWireValue));
    ASSIGN_OR_RETURN(ref.crc, rd.Get<uint32_t>());
    ASSIGN_OR_RETURN(ref.id, rd.Get<uint64_t>());
    if (rd.remaining() != 0) return Corruption("chain message: trailing bytes");
    *staged = ref;
    return m;
  }
  if (flags & ~(kHasData | kTombstone)) return Corruption("chain message: unknown value flags");
  m.value.tombstone = flags & kTombstone;
  if (flags & kHasData) {
    if (m.value.tombstone) return Corruption("chain message: a tombstone with data");
    ASSIGN_OR_RETURN(uint32_t n, rd.Get<uint32_t>());
    if (n > kMaxWireValue)
      return Corruption("chain message: value of " + std::to_string(n) + " bytes exceeds " +
                        std::to_string(kMaxWireValue));
    ASSIGN_OR_RETURN(uint32_t crc, rd.Get<uint32_t>());
    ASSIGN_OR_RETURN(auto data, rd.GetBytes(n));
    // The frame does not checksum a value (it travels as a bulk frame): this is its check, taken
    // on the bytes as they are copied out of the frame (one pass), so the copy is what was sent.
    auto value = NewValueBuffer(n);
    const uint32_t got =
        CopyFastCrc32c(reinterpret_cast<std::byte*>(value->data()), data.data(), n);
    if (got != crc)
      return Status(StatusCode::kChecksumMismatch,
                    "chain message: value of key " + std::to_string(m.key) + " v" +
                        std::to_string(m.version) + " corrupted in transit");
    m.value.data = std::move(value);
    m.value.crc = crc;
  }
  if (rd.remaining() != 0) return Corruption("chain message: trailing bytes");
  return m;
}

std::vector<std::byte> EncodeConfig(const ChainConfig& c) {
  ByteWriter w;
  w.Put<uint32_t>(kConfigMagic);
  w.Put<uint8_t>(kVersion);
  w.Put<uint32_t>(c.chain);
  w.Put<uint64_t>(c.version);
  w.Put<uint32_t>(static_cast<uint32_t>(c.members.size()));
  for (const Member& m : c.members) {
    w.Put<uint32_t>(m.node);
    w.Put<uint8_t>(static_cast<uint8_t>(m.state));
  }
  return w.Take();
}

Result<ChainConfig> DecodeConfig(std::span<const std::byte> bytes) {
  ByteReader rd(bytes, "chain config");
  ASSIGN_OR_RETURN(uint32_t magic, rd.Get<uint32_t>());
  ASSIGN_OR_RETURN(uint8_t version, rd.Get<uint8_t>());
  if (magic != kConfigMagic || version != kVersion)
    return Corruption("chain config: bad magic or version");
  ChainConfig c;
  ASSIGN_OR_RETURN(c.chain, rd.Get<uint32_t>());
  ASSIGN_OR_RETURN(c.version, rd.Get<uint64_t>());
  ASSIGN_OR_RETURN(uint32_t n, rd.Get<uint32_t>());
  if (n > kMaxWireMembers)
    return Corruption("chain config: " + std::to_string(n) + " members exceed 16");
  for (uint32_t i = 0; i < n; ++i) {
    Member m;
    ASSIGN_OR_RETURN(m.node, rd.Get<uint32_t>());
    ASSIGN_OR_RETURN(uint8_t state, rd.Get<uint8_t>());
    if (state > 1) return Corruption("chain config: bad member state");
    m.state = static_cast<MemberState>(state);
    c.members.push_back(m);
  }
  if (rd.remaining() != 0) return Corruption("chain config: trailing bytes");
  return c;
}

}  // namespace rt::iofs::chain
