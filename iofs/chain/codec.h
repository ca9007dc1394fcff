// Binary payloads of the chain protocol on the wire (docs/formats/iofs_wire.md): replica
// messages and chain configs. Little-endian, bounded: decoders check every length against the
// payload and against the limits below, so a hostile peer gets an error, never a large
// allocation of its choosing.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "base/status.h"
#include "iofs/chain/chain_types.h"

namespace rt::iofs::chain {

// Largest chunk value carried by one message.
inline constexpr size_t kMaxWireValue = 64u << 20;
// Most members of a chain on the wire.
inline constexpr size_t kMaxWireMembers = 16;

// Encodes a replica message (the value's bytes included, with their CRC32C).
std::vector<std::byte> EncodeMessage(const Message& message);
// The same without the value's bytes: EncodeMessage(m) == EncodeMessageHead(m) + the value, so a
// sender can gather the value from where it lies instead of copying it.
std::vector<std::byte> EncodeMessageHead(const Message& message);
// Errors: Corruption naming the field that does not fit; ChecksumMismatch when the value does
// not match its CRC32C.
Result<Message> DecodeMessage(std::span<const std::byte> bytes);

// Encodes and decodes a chain version (Corruption on a bad payload, at most 16 members).
std::vector<std::byte> EncodeConfig(const ChainConfig& config);
Result<ChainConfig> DecodeConfig(std::span<const std::byte> bytes);

}  // namespace rt::iofs::chain
