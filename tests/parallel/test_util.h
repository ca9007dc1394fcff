// Helpers shared by the parallel/ tests: the tiny config and synthetic token streams.
#pragma once

#include <memory>
#include <vector>

#include "model/rng.h"
#include "parallel/config.h"

namespace rt::testing {

// DESIGN.md's tiny config (L=2, C=64, H=4, T=32, V=256) with batch 8 and a constant lr.
inline RunConfig TinyConfig() {
  RunConfig c;
  c.model = {2, 64, 4, 32, 256};
  c.train.batch_size = 8;
  c.train.steps = 100;
  c.train.seed = 42;
  c.optim.schedule = "constant";
  c.optim.lr = 1e-3;
  c.optim.min_lr = 1e-4;
  c.eval.every = 0;
  return c;
}

// TinyConfig as the parity tests train it: `steps` steps, clipping on, Adam's ε = 1e-6 instead
// of 1e-8. With 1e-8, elements whose gradient is rounding noise (the key bias: softmax is
// invariant to it, so its exact gradient is 0) take whole-size Adam steps in the direction of
// the noise, so any change in summation order moves them by a fraction of lr per step: the
// single process with 2 micro-batches instead of 1 already differs by 2.4e-6 (max-abs
// relative), tp=2 by 1.15e-5. At ε = 1e-6 those elements stay put and a comparison measures the
// engine (tp=2: 5.9e-7).
inline RunConfig TinyParityConfig(int steps) {
  RunConfig c = TinyConfig();
  c.train.steps = steps;
  c.optim.grad_clip = 1.0;
  c.optim.eps = 1e-6;
  return c;
}

// A learnable stream: a repeated pseudo-random "sentence" of `period` bytes.
inline std::shared_ptr<const std::vector<uint16_t>> PatternTokens(size_t n, size_t period,
                                                                  uint64_t seed) {
  Rng rng(seed);
  std::vector<uint16_t> sentence(period);
  for (auto& t : sentence) t = static_cast<uint16_t>(97 + rng.Below(26));
  auto v = std::make_shared<std::vector<uint16_t>>(n);
  for (size_t i = 0; i < n; ++i) (*v)[i] = sentence[i % period];
  return v;
}

// Uniformly random tokens below `vocab`.
inline std::vector<int32_t> RandomTokens(size_t n, int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> v(n);
  for (auto& t : v) t = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(vocab)));
  return v;
}

}  // namespace rt::testing
