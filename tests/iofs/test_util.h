// Helpers shared by the iofs tests: temp folders on a real filesystem (O_DIRECT needs one; the
// tests run from the build folder) and deterministic chunk contents.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace rt::iofs::testing {

// A fresh folder under $RINGTRAIN_TEST_TMP or the working directory, removed on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    const char* base = std::getenv("RINGTRAIN_TEST_TMP");
    std::filesystem::path root = base ? base : std::filesystem::current_path() / "iofs-test-tmp";
    std::filesystem::create_directories(root);
    path_ = (root / (name + "-" + std::to_string(getpid()) + "-" + std::to_string(counter_++)))
                .string();
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

// Deterministic content for (id, version) of `length` bytes.
inline std::vector<std::byte> Content(uint64_t id, uint64_t version, size_t length) {
  std::vector<std::byte> out(length);
  std::mt19937_64 rng(id * 1000003 + version);
  for (size_t i = 0; i < length; i += 8) {
    uint64_t v = rng();
    for (size_t j = 0; j < 8 && i + j < length; ++j) out[i + j] = std::byte(v >> (8 * j));
  }
  return out;
}

}  // namespace rt::iofs::testing
