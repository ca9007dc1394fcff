// Fuzz target: the trainer state and data loader state that checkpoints store must be accepted
// or refused with an error for any bytes, never crash; what is accepted re-encodes to the same
// bytes.
#include <cstdint>
#include <cstring>
#include <vector>

#include "data/data_loader.h"
#include "parallel/trainer.h"

namespace {

bool SameBytes(const std::vector<std::byte>& encoded, const uint8_t* data, size_t size) {
  return encoded.size() == size && std::memcmp(encoded.data(), data, size) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  if (auto loader = rt::LoaderState::Deserialize(bytes); loader.ok()) {
    if (!SameBytes(loader->Serialize(), data, size)) __builtin_trap();
  }
  if (auto state = rt::TrainerState::Deserialize(bytes); state.ok()) {
    if (!SameBytes(state->Serialize(), data, size)) __builtin_trap();
  }
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  auto as_input = [](const std::vector<std::byte>& b) {
    return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(b.data()),
                                reinterpret_cast<const uint8_t*>(b.data()) + b.size());
  };
  rt::TrainerState state;
  state.step = 1200;
  state.adam_step = 1190;
  state.loss_scale = 32768;
  state.clean_steps = 17;
  state.loader = {9600, 1337};
  return {as_input(state.loader.Serialize()), as_input(state.Serialize()),
          as_input(rt::TrainerState{}.Serialize())};
}
