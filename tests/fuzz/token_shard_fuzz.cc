// Fuzz target: the token shard decoder must reject or accept any byte string without crashing,
// and whatever it accepts must re-encode to the same bytes.
#include <cstring>
#include <vector>

#include "data/token_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  rt::Result<rt::TokenShard> shard = rt::DecodeTokenShard(bytes, "fuzz");
  if (shard.ok()) {
    auto again = rt::EncodeTokenShard(shard->tokens, shard->vocab_size);
    if (!again.ok() || again->size() != size || std::memcmp(again->data(), data, size) != 0)
      __builtin_trap();
  }
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  std::vector<std::vector<uint8_t>> seeds;
  for (size_t n : {0, 1, 9, 100}) {
    std::vector<uint16_t> tokens(n);
    for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<uint16_t>(i * 7 % 256);
    auto wire = rt::EncodeTokenShard(tokens, 256);
    seeds.emplace_back(reinterpret_cast<uint8_t*>(wire->data()),
                       reinterpret_cast<uint8_t*>(wire->data()) + wire->size());
  }
  return seeds;
}
