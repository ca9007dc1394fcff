// Fuzz target: the safetensors decoder must reject or accept any byte string without crashing;
// every tensor it accepts lies inside the input.
#include <vector>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data),
                               reinterpret_cast<const std::byte*>(data) + size);
  rt::Result<rt::SafetensorsFile> file = rt::DecodeSafetensors(std::move(bytes), "fuzz");
  if (file.ok()) {
    const std::byte* begin = file->bytes.data();
    const std::byte* end = begin + file->bytes.size();
    for (const auto& [name, entry] : file->tensors) {
      if (entry.data.size() &&
          (entry.data.data() < begin || entry.data.data() + entry.data.size() > end))
        __builtin_trap();
    }
  }
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  auto wire = rt::EncodeSafetensors(
      {{"w", rt::DType::kF32, {2, 3}, a.data()}, {"b", rt::DType::kF32, {0}, a.data()}},
      {{"k", "v"}});
  return {std::vector<uint8_t>(reinterpret_cast<uint8_t*>(wire->data()),
                               reinterpret_cast<uint8_t*>(wire->data()) + wire->size())};
}
