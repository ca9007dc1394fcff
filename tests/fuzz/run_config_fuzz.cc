// Fuzz target: a run config's TOML text (configs/*.toml: the model, train, optim, data, eval,
// metrics and ckpt sections, read through base/config's schema) and a `--set key=value`
// override must be accepted or refused with an error, never crash; an accepted config's
// effective TOML (what the log prints at start) must read back to the same config.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/config.h"
#include "parallel/config.h"

namespace {

// Reads `file` into a fresh RunConfig the way LoadRunConfig does for a config file.
rt::Result<rt::RunConfig> ReadRunConfig(const rt::ConfigFile& file) {
  rt::RunConfig config;
  rt::ConfigSchema schema;
  rt::BindRunConfig(&config, &schema);
  rt::RequireModelKeys(&schema);
  RETURN_IF_ERROR(schema.Read(file));
  RETURN_IF_ERROR(rt::ValidateRunConfig(config));
  return config;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  // The first line is also tried as a command-line override on top of the text.
  std::string_view first_line = text.substr(0, text.find('\n'));
  auto file = rt::ConfigFile::Parse(text, "fuzz");
  if (!file.ok()) return 0;
  auto config = ReadRunConfig(*file);
  if (config.ok()) {
    std::string effective = rt::DescribeRunConfig(*config);
    auto again_file = rt::ConfigFile::Parse(effective, "effective");
    if (!again_file.ok()) __builtin_trap();
    auto again = ReadRunConfig(*again_file);
    if (!again.ok() || rt::DescribeRunConfig(*again) != effective) __builtin_trap();
  }
  if (file->ApplyOverride(first_line).ok()) (void)ReadRunConfig(*file);
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  std::vector<std::string> texts = {
      "[model]\nn_layer = 2\nn_embd = 64\nn_head = 4\nseq_len = 32\n",
      "train.steps=5\n[model]\nn_layer = 1\nn_embd = 8\nn_head = 2\nseq_len = 4\n"
      "[train]\nbatch_size = 4\nmicro_batches = 2\nprecision = \"bf16\"\n"
      "[optim]\nlr = 3e-4\n[data]\ndir = \"d\"\norder = \"sequential\"\n"
      "[ckpt]\ndir = \"file:///tmp/c\"\nevery = 10\ncodec = \"zstd\"\n",
  };
  std::vector<std::vector<uint8_t>> seeds;
  for (const std::string& t : texts) seeds.emplace_back(t.begin(), t.end());
  return seeds;
}
