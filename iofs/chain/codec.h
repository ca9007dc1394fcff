// Binary payloads of the chain protocol on the wire (docs/formats/iofs_wire.md): replica
// messages and chain configs. Little-endian, bounded: decoders check every length against the
// payload and against the limits below, so a hostile peer gets an error, never a large
// allocation of its choosing.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "iofs/chain/chain_types.h"

namespace rt::iofs::chain {

// Largest chunk value carried by one message.
inline constexpr size_t kMaxWireValue = 64u << 20;
// Most members of a chain on the wire.
inline constexpr size_t kMaxWireMembers = 16;

// Encodes a replica message (the value's bytes included, with their CRC32C: value.crc when the
// sender knows it, computed otherwise).
std::vector<std::byte> EncodeMessage(const Message& message);
// The same without the value's bytes: EncodeMessage(m) == EncodeMessageHead(m) + the value, so a
// sender can gather the value from where it lies instead of copying it.
std::vector<std::byte> EncodeMessageHead(const Message& message);
// A forward whose value the receiver holds already (it staged the bytes when it sent the write to
// the chain head): the message names the value's length and CRC32C instead of carrying it.
struct StagedValueRef {
  uint32_t size = 0;
  uint32_t crc = 0;
  uint64_t id = 0;  // the receiver's staged copy (Value::staged_id)
};
// The staged form of a message whose value has data: EncodeMessageHead with the value flagged as
// staged at the receiver, no bytes follow.
std::vector<std::byte> EncodeStagedMessage(const Message& message);
// The decoded value carries its verified CRC32C in value.crc. A staged message is accepted only
// when `staged` is given: it receives the reference, and the caller must supply the value's bytes
// before the message reaches a replica. Errors: Corruption naming the field that does not fit (a
// staged message without `staged` included); ChecksumMismatch when the value does not match its
// CRC32C.
Result<Message> DecodeMessage(std::span<const std::byte> bytes,
                              std::optional<StagedValueRef>* staged = nullptr);

// Encodes and decodes a chain version (Corruption on a bad payload, at most 16 members).
std::vector<std::byte> EncodeConfig(const ChainConfig& config);
Result<ChainConfig> DecodeConfig(std::span<const std::byte> bytes);

}  // namespace rt::iofs::chain
