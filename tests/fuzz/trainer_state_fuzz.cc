// Fuzz target: the trainer state decoder (a checkpoint's engine state) must reject or accept any
// byte string without crashing, and whatever it accepts must re-encode to the same bytes.
#include <cstring>
#include <vector>

#include "parallel/trainer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  rt::Result<rt::TrainerState> state = rt::TrainerState::Deserialize(bytes);
  if (state.ok()) {
    const std::vector<std::byte> again = state->Serialize();
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  }
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  std::vector<std::vector<uint8_t>> seeds;
  rt::TrainerState s;
  seeds.push_back({});
  for (int64_t step : {0, 7, 1000}) {
    s.step = step;
    s.adam_step = step / 2;
    s.loss_scale = 65536;
    s.clean_steps = step % 5;
    s.tokens_seen = step * 256;
    s.schedule_steps = 1000;
    s.loader = {static_cast<uint64_t>(step) * 8, 1337};
    const std::vector<std::byte> wire = s.Serialize();
    seeds.emplace_back(reinterpret_cast<const uint8_t*>(wire.data()),
                       reinterpret_cast<const uint8_t*>(wire.data()) + wire.size());
  }
  return seeds;
}
