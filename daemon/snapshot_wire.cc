#include "daemon/snapshot_wire.h"

#include <cstring>
#include <string>

namespace rt::daemon {

std::vector<std::byte> EncodeSnapshotMessage(nlohmann::json head, std::span<const std::byte> body) {
  head["v"] = kSnapshotWireVersion;
  const std::string text = head.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const uint32_t length = static_cast<uint32_t>(text.size());
  std::vector<std::byte> out(4 + text.size() + body.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<std::byte>((length >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 4, text.data(), text.size());
  if (!body.empty()) std::memcpy(out.data() + 4 + text.size(), body.data(), body.size());
  return out;
}

Result<SnapshotMessage> DecodeSnapshotMessage(std::span<const std::byte> payload,
                                              std::string_view what) {
  const std::string name(what);
  if (payload.size() < 4) return InvalidArgument(name + ": payload shorter than its head length");
  uint32_t length = 0;
  for (int i = 0; i < 4; ++i) length |= static_cast<uint32_t>(payload[i]) << (8 * i);
  if (length > kMaxSnapshotHead)
    return InvalidArgument(name + ": head of " + std::to_string(length) + " bytes is over " +
                           std::to_string(kMaxSnapshotHead));
  if (payload.size() - 4 < length)
    return InvalidArgument(name + ": head of " + std::to_string(length) +
                           " bytes runs past the payload's " + std::to_string(payload.size()));
  const auto* text = reinterpret_cast<const char*>(payload.data() + 4);
  SnapshotMessage m;
  m.head = nlohmann::json::parse(text, text + length, nullptr, /*allow_exceptions=*/false);
  if (m.head.is_discarded() || !m.head.is_object())
    return InvalidArgument(name + ": head is not a JSON object");
  auto v = m.head.find("v");
  if (v == m.head.end() || !v->is_number_integer() || v->get<int64_t>() != kSnapshotWireVersion)
    return InvalidArgument(name + ": head version is not " + std::to_string(kSnapshotWireVersion));
  m.body = payload.subspan(4 + length);
  return m;
}

}  // namespace rt::daemon
