// The memory tier's RPC messages (docs/formats/snapshot_api.md): SnapshotPut/Get/List/Remove,
// which a worker sends its own daemon (loopback) and a daemon sends the other members. Each
// payload, request or response, is a u32 (little-endian) head length, a JSON object (the head:
// the fields) and the body bytes (file data of a put request or a get response).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace rt::daemon {

// Frame types, on the daemon's control port next to the control API (0x0E00..0x0E1F).
inline constexpr uint16_t kSnapshotPut = 0x0E20;   // {job, path, upload, offset, total, scope}
inline constexpr uint16_t kSnapshotGet = 0x0E21;   // {job, path, offset, length, scope} → {size}
inline constexpr uint16_t kSnapshotList = 0x0E22;  // {job, dir, scope} → {names}
inline constexpr uint16_t kSnapshotRemove = 0x0E23;  // {job, path, scope} → {}

// The head's "v": the version of these messages.
inline constexpr int kSnapshotWireVersion = 1;
// Largest head accepted.
inline constexpr size_t kMaxSnapshotHead = 64 << 10;
// File bytes per put request or get response (a file is sent in pieces of at most this size).
inline constexpr size_t kSnapshotPieceBytes = 16 << 20;

// A decoded message: the head object and a view of the body inside the payload.
struct SnapshotMessage {
  nlohmann::json head;
  std::span<const std::byte> body;
};

// The payload of `head` (an object; "v" is added) followed by `body`.
std::vector<std::byte> EncodeSnapshotMessage(nlohmann::json head,
                                             std::span<const std::byte> body = {});

// Parses a payload. Errors: InvalidArgument naming `what` when it is shorter than its head
// length, the head is larger than kMaxSnapshotHead, not a JSON object, or of another version.
Result<SnapshotMessage> DecodeSnapshotMessage(std::span<const std::byte> payload,
                                              std::string_view what);

}  // namespace rt::daemon
