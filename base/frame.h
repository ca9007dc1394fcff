// The wire frame shared by every ringtrain protocol (comm bootstrap, iofs, control API).
// Format: docs/formats/frame.md. A frame is a fixed 24-byte header followed by a payload:
//   magic u32 "RTF1" | version u16 | type u16 | flags u32 | request id u32 | length u32 | crc u32
// where crc is the CRC32C of the payload. The decoder checks magic, version, length limit and
// checksum, so a corrupt or hostile peer gets an error, never an allocation of its choosing.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace rt {

inline constexpr uint32_t kFrameMagic = 0x31465452;  // "RTF1" little-endian
inline constexpr uint16_t kFrameVersion = 1;
inline constexpr size_t kFrameHeaderSize = 24;
// Default limit on a payload; protocols may pass a smaller or larger one.
inline constexpr uint32_t kDefaultMaxFramePayload = 64u << 20;

// The decoded fixed header of a frame.
struct FrameHeader {
  uint16_t type = 0;        // protocol-defined message type
  uint32_t flags = 0;       // protocol-defined flags
  uint32_t request_id = 0;  // matches a response to its request
  uint32_t length = 0;      // payload bytes
  uint32_t crc = 0;         // CRC32C of the payload
};

// Encodes the header for a payload (computes length and crc).
std::array<std::byte, kFrameHeaderSize> EncodeFrameHeader(uint16_t type, uint32_t flags,
                                                          uint32_t request_id,
                                                          std::span<const std::byte> payload);

// Decodes and validates a header: magic, version and length ≤ max_payload.
// Errors are Corruption (bad magic/version) or ProtocolError (length over the limit).
Result<FrameHeader> DecodeFrameHeader(std::span<const std::byte> header, uint32_t max_payload);

// Checks a payload against its header's length and crc (Corruption on mismatch).
Status VerifyFramePayload(const FrameHeader& header, std::span<const std::byte> payload);

// A whole frame decoded from a contiguous buffer.
struct Frame {
  FrameHeader header;
  std::vector<std::byte> payload;
};

// Encodes a whole frame into one buffer.
std::vector<std::byte> EncodeFrame(uint16_t type, uint32_t flags, uint32_t request_id,
                                   std::span<const std::byte> payload);

// Decodes one frame from the front of `bytes`; sets *consumed to the bytes used. Returns
// NotFound-free semantics: an incomplete buffer is OutOfRange (need more bytes), any invalid
// frame is Corruption/ProtocolError. Used by the fuzz target and by tests.
Result<Frame> DecodeFrame(std::span<const std::byte> bytes, uint32_t max_payload, size_t* consumed);

}  // namespace rt
