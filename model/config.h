// The model's and the optimizer's configuration (STYLE.md rule 12): a struct each, every field
// with its default and unit. parallel/config.h binds them to the TOML keys model.* and optim.*.
#pragma once

#include <cstdint>
#include <string>

namespace rt {

// [model]: the GPT-2 architecture (DESIGN.md "The model").
struct ModelConfig {
  int n_layer = 4;       // transformer blocks L; default 4
  int n_embd = 128;      // channels C; default 128; must be divisible by n_head
  int n_head = 4;        // attention heads H; default 4
  int seq_len = 128;     // context length T (rows of wpe); default 128 tokens
  int vocab_size = 256;  // vocabulary size V (rows of wte); default 256 (byte tokens)
};

// [optim]: AdamW, clipping and the learning-rate schedule.
struct OptimConfig {
  double lr = 1e-3;                 // peak learning rate; default 1e-3
  double min_lr = 1e-4;             // final learning rate of the cosine schedule; default 1e-4
  int64_t warmup_steps = 100;       // linear warm-up steps (cosine only); default 100
  std::string schedule = "cosine";  // "constant" or "cosine" (warm-up + cosine); default "cosine"
  double weight_decay = 0.1;        // decoupled decay on 2-D weights only; default 0.1
  double beta1 = 0.9;               // Adam β1; default 0.9
  double beta2 = 0.95;              // Adam β2; default 0.95
  double eps = 1e-8;                // Adam ε; default 1e-8
  double grad_clip = 1.0;           // global gradient-norm clip, 0 = off; default 1.0
};

}  // namespace rt
