// Text generation from a trained model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "model/gpt.h"

namespace rt {

// How to pick each next token.
struct SampleOptions {
  int tokens = 100;          // tokens to generate; default 100
  double temperature = 1.0;  // softmax temperature; 0 = greedy (argmax); default 1.0
  int top_k = 0;             // sample among the k most likely tokens, 0 = all; default 0
  uint64_t seed = 1337;      // sampling seed; default 1337
};

// Extends `prompt` (at least one token, each inside the model's vocabulary) by options.tokens
// tokens, feeding the model the last seq_len tokens each time. `model` must have been created
// with max_batch ≥ 1. Returns only the generated tokens. Errors: InvalidArgument for an empty
// prompt or a token outside the vocabulary; kernel errors.
Result<std::vector<int32_t>> SampleTokens(Gpt& model, std::span<const int32_t> prompt,
                                          const SampleOptions& options);

}  // namespace rt
