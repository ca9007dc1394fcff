// Fuzz target: the comm wire decoders (data header, hello) must reject or accept any byte string
// without crashing, and whatever they accept must re-encode to the same bytes.
#include <cstring>
#include <vector>

#include "comm/tcp/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto h = rt::comm::tcp::DecodeDataHeader(bytes, 1 << 20);
  if (h.ok()) {
    auto again = rt::comm::tcp::EncodeDataHeader(*h);
    if (std::memcmp(again.data(), data, again.size()) != 0) __builtin_trap();
  }
  auto hello = rt::comm::tcp::DecodeHello(bytes);
  if (hello.ok()) {
    auto again = rt::comm::tcp::EncodeHello(*hello);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  }
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  std::vector<std::vector<uint8_t>> seeds;
  auto h = rt::comm::tcp::EncodeDataHeader(
      {rt::comm::OpKind::kAllReduce, rt::DType::kBF16, 0, 3, 0, 77, 154});
  seeds.emplace_back(reinterpret_cast<uint8_t*>(h.data()),
                     reinterpret_cast<uint8_t*>(h.data()) + h.size());
  auto hello = rt::comm::tcp::EncodeHello({42, 3, 1});
  seeds.emplace_back(reinterpret_cast<uint8_t*>(hello.data()),
                     reinterpret_cast<uint8_t*>(hello.data()) + hello.size());
  return seeds;
}
