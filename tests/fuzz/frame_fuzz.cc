// Fuzz target: the wire frame decoder must reject or accept any byte string without crashing,
// and whatever it accepts must re-encode to the same bytes.
#include <cstring>
#include <vector>

#include "base/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  size_t consumed = 0;
  rt::Result<rt::Frame> frame = rt::DecodeFrame(bytes, 1 << 16, &consumed);
  if (frame.ok()) {
    auto again = rt::EncodeFrame(frame->header.type, frame->header.flags, frame->header.request_id,
                                 frame->payload);
    if (again.size() != consumed || std::memcmp(again.data(), data, consumed) != 0)
      __builtin_trap();
  }
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  std::vector<std::vector<uint8_t>> seeds;
  for (size_t n : {0, 1, 17, 300}) {
    std::vector<std::byte> payload(n, std::byte{0x5A});
    auto wire = rt::EncodeFrame(3, 0, 9, payload);
    seeds.emplace_back(reinterpret_cast<uint8_t*>(wire.data()),
                       reinterpret_cast<uint8_t*>(wire.data()) + wire.size());
  }
  return seeds;
}
