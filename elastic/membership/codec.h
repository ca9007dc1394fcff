// Byte encodings of the membership protocol: messages on the wire
// (docs/formats/membership_wire.md) and the durable state file
// (docs/formats/membership_state.md). Little-endian, bounded: decoders check every length
// against the input and the limits below, so a hostile peer or a damaged file gets a Corruption
// error naming the field, never a large allocation of its choosing.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "base/status.h"
#include "elastic/membership/types.h"

namespace rt::elastic::membership {

// Most members of one view.
inline constexpr size_t kMaxMembers = 1024;
// Longest "host:port" address.
inline constexpr size_t kMaxAddress = 256;
// Largest replicated state blob.
inline constexpr size_t kMaxStateBlob = 16u << 20;

// Encodes a message ("RTMB", version 1).
std::vector<std::byte> EncodeMessage(const Message& message);
// Decodes a message. Errors: Corruption naming the field (bad magic, version, kind, a length
// beyond its limit, trailing bytes).
Result<Message> DecodeMessage(std::span<const std::byte> bytes);

// Encodes the durable state ("RTMS", version 1, CRC32C over the body).
std::vector<std::byte> EncodeDurableState(const DurableState& state);
// Decodes it. Errors: Corruption naming what does not verify (magic, version, length, CRC).
Result<DurableState> DecodeDurableState(std::span<const std::byte> bytes);

}  // namespace rt::elastic::membership
