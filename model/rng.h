// A small deterministic random number generator (SplitMix64) whose whole state is one uint64,
// so trainers and data loaders can store it in checkpoints and resume exactly.
#pragma once

#include <cmath>
#include <cstdint>

namespace rt {

// SplitMix64 (Steele, Lea, Flood 2014). Same sequence on every platform. Not thread-safe.
class Rng {
 public:
  explicit Rng(uint64_t state = 0) : state_(state) {}

  // The next 64 random bits.
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n) (n > 0), without modulo bias worth mentioning for n ≪ 2^64.
  uint64_t Below(uint64_t n) { return static_cast<uint64_t>(Uniform() * static_cast<double>(n)); }
  // Standard normal by Box–Muller (two uniforms per sample, no cached spare).
  double Normal() {
    const double u1 = 1.0 - Uniform();  // (0, 1]
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  uint64_t state() const { return state_; }

 private:
  uint64_t state_;
};

// Mixes two values into a seed (for per-epoch or per-tensor streams).
inline uint64_t MixSeed(uint64_t a, uint64_t b) {
  Rng r(a ^ (b * 0xD1B54A32D192ED03ull));
  return r.Next();
}

}  // namespace rt
