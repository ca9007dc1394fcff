// Runs a libFuzzer target without libFuzzer, for ctest in the normal (gcc) build:
//   <target>_fuzz_test [--corpus DIR]... [iterations] [seed]
// first runs every file of each corpus folder (tests/fuzz/corpus/<target>/, the inputs libFuzzer
// starts from), then `iterations` random inputs of random lengths and mutations (bit flips,
// truncations, byte overwrites, appends) of the inputs seen so far, starting from the corpus and
// the target's FuzzSeeds(). A crash, sanitizer report or abort fails the ctest test.
//   <target>_fuzz_test --write-seeds DIR
// writes the target's FuzzSeeds() into DIR as seed-NN files (how the checked-in corpora of the
// targets with seeds were made).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// Optional: a target may define valid example inputs to start mutating from.
std::vector<std::vector<uint8_t>> FuzzSeeds() __attribute__((weak));

namespace {

using Input = std::vector<uint8_t>;

// Every regular file under `dir`, sorted by path so runs are reproducible. Exits on an error.
std::vector<Input> ReadCorpus(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    std::fprintf(stderr, "fuzz driver: corpus %s is not a folder\n", dir.c_str());
    std::exit(2);
  }
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  std::vector<Input> inputs;
  for (const auto& path : paths) {
    std::ifstream in(path, std::ios::binary);
    Input bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.eof() && in.fail()) {
      std::fprintf(stderr, "fuzz driver: cannot read %s\n", path.c_str());
      std::exit(2);
    }
    inputs.push_back(std::move(bytes));
  }
  return inputs;
}

int WriteSeeds(const std::filesystem::path& dir) {
  if (!FuzzSeeds) {
    std::fprintf(stderr, "fuzz driver: this target defines no FuzzSeeds()\n");
    return 2;
  }
  std::filesystem::create_directories(dir);
  std::vector<Input> seeds = FuzzSeeds();
  for (size_t i = 0; i < seeds.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "seed-%02zu", i);
    std::ofstream out(dir / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(seeds[i].data()),
              static_cast<std::streamsize>(seeds[i].size()));
    if (!out) {
      std::fprintf(stderr, "fuzz driver: cannot write %s\n", (dir / name).c_str());
      return 2;
    }
  }
  std::printf("fuzz driver: %zu seeds written to %s\n", seeds.size(), dir.c_str());
  return 0;
}

// One random edit of a non-empty input.
void Mutate(std::mt19937_64& rng, Input& input) {
  switch (rng() % 4) {
    case 0:
      input[rng() % input.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      break;
    case 1:
      input.resize(rng() % (input.size() + 1));
      break;
    case 2:
      input[rng() % input.size()] = static_cast<uint8_t>(rng());
      break;
    default:
      input.push_back(static_cast<uint8_t>(rng()));
      break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Input> pool;
  std::vector<const char*> numbers;
  size_t corpus_inputs = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--write-seeds") == 0 && i + 1 < argc) return WriteSeeds(argv[i + 1]);
    if (std::strcmp(argv[i], "--corpus") == 0 && i + 1 < argc) {
      for (Input& input : ReadCorpus(argv[++i])) {
        LLVMFuzzerTestOneInput(input.data(), input.size());
        pool.push_back(std::move(input));
        ++corpus_inputs;
      }
    } else {
      numbers.push_back(argv[i]);
    }
  }
  const long iterations = numbers.size() > 0 ? std::atol(numbers[0]) : 10000;
  const unsigned seed = numbers.size() > 1 ? static_cast<unsigned>(std::atol(numbers[1])) : 12345u;
  std::mt19937_64 rng(seed);
  if (FuzzSeeds)
    for (Input& input : FuzzSeeds()) pool.push_back(std::move(input));
  for (long i = 0; i < iterations; ++i) {
    Input input;
    if (pool.empty() || rng() % 4 == 0) {
      input.resize(rng() % 512);
      for (auto& b : input) b = static_cast<uint8_t>(rng());
    } else {
      input = pool[rng() % pool.size()];
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !input.empty(); ++e) Mutate(rng, input);
    }
    LLVMFuzzerTestOneInput(input.data(), input.size());
    if (pool.size() < 256)
      pool.push_back(std::move(input));
    else
      pool[rng() % pool.size()] = std::move(input);
  }
  std::printf("fuzz driver: %zu corpus inputs and %ld generated inputs, no crash\n", corpus_inputs,
              iterations);
  return 0;
}
