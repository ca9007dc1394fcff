// The GPT-2 model (DESIGN.md "The model") with explicit forward and backward passes, after
// llm.c's train_gpt2.c: all parameters live in one arena (gradients in a second arena of the same
// layout), activations in a third; every block is a pair of free functions over explicit
// tensors, and the loss path (ln_f, tied logits, cross-entropy) is separate from the blocks, so
// the parallel engine can split blocks into pipeline stages and the vocabulary across ranks.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/tensor.h"
#include "model/block.h"
#include "model/config.h"
#include "model/pieces.h"

namespace rt {

// Numeric precision of parameters and activations (master weights and Adam state stay fp32).
enum class Precision : uint8_t { kFp32 = 0, kBf16 = 1, kFp16 = 2 };

// Parses "fp32", "bf16" or "fp16". Errors: InvalidArgument naming the value.
Result<Precision> ParsePrecision(std::string_view name);
// The dtype of parameters and activations in `p`.
DType ComputeDType(Precision p);

// All model tensors, views into an arena laid out by AddGptTensors.
struct GptTensors {
  Tensor wte;  // [V, C], also the (tied) output projection
  Tensor wpe;  // [T, C]
  std::vector<BlockTensors> h;
  Tensor ln_f_w, ln_f_b;  // [C]
};

// Adds the model's tensors to `arena` with DESIGN.md's names ("wte", "h.0.ln_1.weight", ...) in a
// fixed order: wte, wpe, the blocks, ln_f.
void AddGptTensors(const ModelConfig& config, DType dtype, Arena* arena);
// Views of an allocated arena built by AddGptTensors.
GptTensors ViewGptTensors(const ModelConfig& config, const Arena& arena);
// True for the tensors AdamW decays, by their (global) shape: the 2-D weights (embeddings and
// Linear weights).
bool IsDecayed(const Shape& shape);
// Checks every token and target (either may be empty) against the vocabulary. Errors:
// InvalidArgument naming the first one outside [0, vocab_size) and its position.
Status CheckTokenRange(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                       int32_t vocab_size);

// The model: parameters, gradients and activations for up to (max_batch, seq_len), all on one
// device; tokens, targets and losses cross to and from the host in Forward. Not thread-safe (on
// CUDA its ops go to the calling thread's current stream). Owns its arenas; views handed out live
// as long as the Gpt.
class Gpt {
 public:
  // Allocates parameters, gradients and activations (zero-filled; see Initialize) on `device`.
  // `recompute` keeps only each block's input and recomputes the rest in Backward.
  // Errors: InvalidArgument for a bad config, ResourceExhausted if memory runs out, Unimplemented
  // or Unavailable when `device` cannot be used here (CheckDeviceAvailable).
  static Result<std::unique_ptr<Gpt>> Create(const ModelConfig& config, Precision precision,
                                             int max_batch, bool recompute, Device device);

  // Fills `master` (an f32 arena of the same layout, e.g. the optimizer's master weights) with
  // DESIGN.md's initialisation from `seed`; each tensor draws from its own stream seeded by
  // (seed, tensor index).
  static Status InitializeWeights(const ModelConfig& config, uint64_t seed, const Arena& master);

  // Runs the model on tokens[B·T] (B ≤ max_batch, T ≤ seq_len, ids < vocab_size). With targets,
  // returns the mean cross-entropy over the B·T targets; if also dloss != 0, leaves
  // dL/dlogits·(dloss·B·T) — the gradient of dloss × the summed loss — ready for Backward
  // (pass dloss = scale / (tokens per optimizer step)). Without targets returns 0 and the
  // logits are in logits(). Errors: InvalidArgument for a token or target outside the
  // vocabulary or a bad B, T; kernel errors.
  Result<double> Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets, int B,
                         int T, float dloss);
  // Accumulates the gradients of the last Forward (which must have had targets and dloss != 0)
  // into grads(). On a device the work is only enqueued (no synchronisation).
  Status Backward();
  // Zeroes every gradient.
  Status ZeroGrads();

  // Logits [B,T,V] of the last Forward (compute dtype, on device(); overwritten by dlogits when
  // dloss != 0).
  Tensor logits() const { return logits_; }
  // Where every tensor of the model lives.
  Device device() const { return device_; }

  const ModelConfig& config() const { return config_; }
  Precision precision() const { return precision_; }
  bool recompute() const { return recompute_; }
  // Parameters (compute dtype) and gradients (same dtype and layout).
  const Arena& params() const { return params_; }
  const Arena& grads() const { return grads_; }
  const GptTensors& param_tensors() const { return p_; }
  const GptTensors& grad_tensors() const { return g_; }
  // Number of parameters.
  int64_t num_params() const;

 private:
  Gpt() = default;
  BlockActivations Acts(int layer, int B, int T) const;
  HeadActivations Head(int B, int T) const;
  Status BuildActivations();

  ModelConfig config_;
  Precision precision_ = Precision::kFp32;
  bool recompute_ = false;
  Device device_ = Device::kCpu;
  int max_batch_ = 0;
  Arena params_, grads_, acts_;
  GptTensors p_, g_;
  // The blocks' activations: the first arena index of each layer's set (one set with recompute).
  BlockShape block_shape_;
  std::vector<int> act_ids_;
  std::vector<int> residual_ids_;  // L+1 residual streams: [0] embeddings, [l+1] block l output
  int io_id_, ln_f_id_, ln_f_mean_id_, ln_f_rstd_id_, logits_id_, losses_id_;
  int dresidual_id_, dln_id_, datty_id_, dqkv_id_, dfch_gelu_id_, branch_id_;
  // Shape of the last Forward.
  int B_ = 0, T_ = 0;
  bool has_dlogits_ = false;
  Tensor logits_;
  std::vector<int32_t> io_host_;  // host staging of the last Forward's tokens, then targets
};

}  // namespace rt
