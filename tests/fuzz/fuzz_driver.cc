// Runs a libFuzzer target without libFuzzer: random inputs of random lengths, then mutations
// (bit flips, truncations, byte overwrites) of the inputs seen so far. A crash, sanitizer report
// or abort fails the ctest test. Usage: <target>_fuzz_test [iterations] [seed].
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// Optional: a target may define valid example inputs to start mutating from.
std::vector<std::vector<uint8_t>> FuzzSeeds() __attribute__((weak));

int main(int argc, char** argv) {
  const long iterations = argc > 1 ? std::atol(argv[1]) : 10000;
  const unsigned seed = argc > 2 ? static_cast<unsigned>(std::atol(argv[2])) : 12345u;
  std::mt19937_64 rng(seed);
  std::vector<std::vector<uint8_t>> pool;
  if (FuzzSeeds) pool = FuzzSeeds();
  for (long i = 0; i < iterations; ++i) {
    std::vector<uint8_t> input;
    if (pool.empty() || rng() % 4 == 0) {
      input.resize(rng() % 512);
      for (auto& b : input) b = static_cast<uint8_t>(rng());
    } else {
      input = pool[rng() % pool.size()];
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !input.empty(); ++e) {
        switch (rng() % 4) {
          case 0: input[rng() % input.size()] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
          case 1: input.resize(rng() % (input.size() + 1)); break;
          case 2: input[rng() % input.size()] = static_cast<uint8_t>(rng()); break;
          default: input.push_back(static_cast<uint8_t>(rng())); break;
        }
      }
    }
    LLVMFuzzerTestOneInput(input.data(), input.size());
    if (pool.size() < 256) pool.push_back(std::move(input));
    else pool[rng() % pool.size()] = std::move(input);
  }
  std::printf("fuzz driver: %ld inputs, no crash\n", iterations);
  return 0;
}
