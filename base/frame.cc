#include "base/frame.h"

#include <cstring>

#include "base/crc32c.h"

namespace rt {
namespace {
template <typename T>
void Store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
template <typename T>
T Load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
}  // namespace

std::array<std::byte, kFrameHeaderSize> EncodeFrameHeader(uint16_t type, uint32_t flags,
                                                          uint32_t request_id,
                                                          std::span<const std::byte> payload) {
  std::array<std::byte, kFrameHeaderSize> h{};
  Store<uint32_t>(h.data() + 0, kFrameMagic);
  Store<uint16_t>(h.data() + 4, kFrameVersion);
  Store<uint16_t>(h.data() + 6, type);
  Store<uint32_t>(h.data() + 8, flags);
  Store<uint32_t>(h.data() + 12, request_id);
  Store<uint32_t>(h.data() + 16, static_cast<uint32_t>(payload.size()));
  Store<uint32_t>(h.data() + 20, Crc32c(payload));
  return h;
}

Result<FrameHeader> DecodeFrameHeader(std::span<const std::byte> header, uint32_t max_payload) {
  if (header.size() < kFrameHeaderSize)
    return OutOfRange("frame header needs " + std::to_string(kFrameHeaderSize) + " bytes, have " +
                      std::to_string(header.size()));
  uint32_t magic = Load<uint32_t>(header.data());
  if (magic != kFrameMagic) return Corruption("frame has bad magic " + std::to_string(magic));
  uint16_t version = Load<uint16_t>(header.data() + 4);
  if (version != kFrameVersion)
    return Corruption("frame version " + std::to_string(version) + " is not supported (expected " +
                      std::to_string(kFrameVersion) + ")");
  FrameHeader h;
  h.type = Load<uint16_t>(header.data() + 6);
  h.flags = Load<uint32_t>(header.data() + 8);
  h.request_id = Load<uint32_t>(header.data() + 12);
  h.length = Load<uint32_t>(header.data() + 16);
  h.crc = Load<uint32_t>(header.data() + 20);
  if (h.length > max_payload)
    return Status(StatusCode::kProtocolError, "frame payload of " + std::to_string(h.length) +
                                                  " bytes exceeds the limit of " +
                                                  std::to_string(max_payload));
  return h;
}

Status VerifyFramePayload(const FrameHeader& header, std::span<const std::byte> payload) {
  if (payload.size() != header.length)
    return Corruption("frame payload is " + std::to_string(payload.size()) +
                      " bytes, header says " + std::to_string(header.length));
  if (Crc32c(payload) != header.crc) return Corruption("frame payload checksum mismatch");
  return Status();
}

std::vector<std::byte> EncodeFrame(uint16_t type, uint32_t flags, uint32_t request_id,
                                   std::span<const std::byte> payload) {
  auto header = EncodeFrameHeader(type, flags, request_id, payload);
  std::vector<std::byte> out(kFrameHeaderSize + payload.size());
  std::memcpy(out.data(), header.data(), kFrameHeaderSize);
  if (!payload.empty()) std::memcpy(out.data() + kFrameHeaderSize, payload.data(), payload.size());
  return out;
}

Result<Frame> DecodeFrame(std::span<const std::byte> bytes, uint32_t max_payload,
                          size_t* consumed) {
  *consumed = 0;
  ASSIGN_OR_RETURN(FrameHeader header, DecodeFrameHeader(bytes, max_payload));
  if (bytes.size() - kFrameHeaderSize < header.length)
    return OutOfRange("frame needs " + std::to_string(header.length) + " payload bytes, have " +
                      std::to_string(bytes.size() - kFrameHeaderSize));
  auto payload = bytes.subspan(kFrameHeaderSize, header.length);
  RETURN_IF_ERROR(VerifyFramePayload(header, payload));
  *consumed = kFrameHeaderSize + header.length;
  return Frame{header, std::vector<std::byte>(payload.begin(), payload.end())};
}

}  // namespace rt
