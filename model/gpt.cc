#include "model/gpt.h"

#include <cmath>

#include "kernels/ops.h"
#include "model/rng.h"

namespace rt {
namespace {

constexpr int kTensorsPerBlock = 12;

// A host array as a CPU tensor (for Copy to and from the model's device).
Tensor HostTensor(const void* data, DType dtype, Shape shape) {
  return Tensor(const_cast<void*>(data), dtype, shape, Device::kCpu);
}

}  // namespace

Result<Precision> ParsePrecision(std::string_view name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  return InvalidArgument("unknown precision '" + std::string(name) +
                         "' (expected fp32, bf16 or fp16)");
}

DType ComputeDType(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return DType::kF32;
    case Precision::kBf16:
      return DType::kBF16;
    case Precision::kFp16:
      return DType::kF16;
  }
  return DType::kF32;
}

void AddGptTensors(const ModelConfig& c, DType dt, Arena* arena) {
  const int64_t C = c.n_embd;
  arena->Add("wte", dt, {c.vocab_size, C});
  arena->Add("wpe", dt, {c.seq_len, C});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    arena->Add(h + "ln_1.weight", dt, {C});
    arena->Add(h + "ln_1.bias", dt, {C});
    arena->Add(h + "attn.c_attn.weight", dt, {3 * C, C});
    arena->Add(h + "attn.c_attn.bias", dt, {3 * C});
    arena->Add(h + "attn.c_proj.weight", dt, {C, C});
    arena->Add(h + "attn.c_proj.bias", dt, {C});
    arena->Add(h + "ln_2.weight", dt, {C});
    arena->Add(h + "ln_2.bias", dt, {C});
    arena->Add(h + "mlp.c_fc.weight", dt, {4 * C, C});
    arena->Add(h + "mlp.c_fc.bias", dt, {4 * C});
    arena->Add(h + "mlp.c_proj.weight", dt, {C, 4 * C});
    arena->Add(h + "mlp.c_proj.bias", dt, {C});
  }
  arena->Add("ln_f.weight", dt, {C});
  arena->Add("ln_f.bias", dt, {C});
}

GptTensors ViewGptTensors(const ModelConfig& c, const Arena& arena) {
  GptTensors t;
  t.wte = arena.Get(0);
  t.wpe = arena.Get(1);
  for (int l = 0; l < c.n_layer; ++l) {
    const int i = 2 + l * kTensorsPerBlock;
    t.h.push_back({arena.Get(i), arena.Get(i + 1), arena.Get(i + 2), arena.Get(i + 3),
                   arena.Get(i + 4), arena.Get(i + 5), arena.Get(i + 6), arena.Get(i + 7),
                   arena.Get(i + 8), arena.Get(i + 9), arena.Get(i + 10), arena.Get(i + 11)});
  }
  const int f = 2 + c.n_layer * kTensorsPerBlock;
  t.ln_f_w = arena.Get(f);
  t.ln_f_b = arena.Get(f + 1);
  return t;
}

bool IsDecayed(const Shape& shape) { return shape.ndim == 2; }

Status CheckTokenRange(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                       int32_t vocab_size) {
  for (const auto& [ids, kind] : {std::pair(tokens, "token"), std::pair(targets, "target")})
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= vocab_size)
        return InvalidArgument(std::string(kind) + " " + std::to_string(ids[i]) + " at position " +
                               std::to_string(i) + " is outside the vocabulary of " +
                               std::to_string(vocab_size));
  return Status();
}

Result<std::unique_ptr<Gpt>> Gpt::Create(const ModelConfig& config, Precision precision,
                                         int max_batch, bool recompute, Device device) {
  if (config.n_layer < 1 || config.n_embd < 1 || config.n_head < 1 || config.seq_len < 1 ||
      config.vocab_size < 1 || config.n_embd % config.n_head != 0 || max_batch < 1)
    return InvalidArgument(
        "GPT config: n_layer, n_embd, n_head, seq_len, vocab_size and the batch "
        "must be positive and n_embd divisible by n_head");
  RETURN_IF_ERROR(CheckDeviceAvailable(device).WithContext("GPT model"));
  std::unique_ptr<Gpt> m(new Gpt());
  m->config_ = config;
  m->precision_ = precision;
  m->recompute_ = recompute;
  m->device_ = device;
  m->max_batch_ = max_batch;
  const DType dt = ComputeDType(precision);
  AddGptTensors(config, dt, &m->params_);
  AddGptTensors(config, dt, &m->grads_);
  RETURN_IF_ERROR(m->params_.Allocate(device).WithContext("GPT parameters"));
  RETURN_IF_ERROR(m->grads_.Allocate(device).WithContext("GPT gradients"));
  m->p_ = ViewGptTensors(config, m->params_);
  m->g_ = ViewGptTensors(config, m->grads_);
  RETURN_IF_ERROR(m->BuildActivations());
  return m;
}

Status Gpt::BuildActivations() {
  const int64_t B = max_batch_, T = config_.seq_len, C = config_.n_embd, H = config_.n_head,
                V = config_.vocab_size, L = config_.n_layer;
  const DType dt = ComputeDType(precision_), f32 = DType::kF32;
  Arena& a = acts_;
  io_id_ = a.Add("tokens_targets", DType::kI32, {2 * B * T});
  for (int64_t l = 0; l <= L; ++l) residual_ids_.push_back(a.Add("residual", dt, {B, T, C}));
  const int64_t sets = recompute_ ? 1 : L;
  block_shape_ = {C, H, C, 1};
  for (int64_t l = 0; l < sets; ++l)
    act_ids_.push_back(AddBlockActivations(&a, block_shape_, B, T, dt));
  ln_f_id_ = a.Add("ln_f", dt, {B, T, C});
  ln_f_mean_id_ = a.Add("ln_f_mean", f32, {B, T});
  ln_f_rstd_id_ = a.Add("ln_f_rstd", f32, {B, T});
  logits_id_ = a.Add("logits", dt, {B, T, V});
  losses_id_ = a.Add("losses", f32, {B, T});
  dresidual_id_ = a.Add("dresidual", dt, {B, T, C});
  dln_id_ = a.Add("dln", dt, {B, T, C});
  datty_id_ = a.Add("datty", dt, {B, T, C});
  dqkv_id_ = a.Add("dqkv", dt, {B, T, 3 * C});
  dfch_gelu_id_ = a.Add("dfch_gelu", dt, {B, T, 4 * C});
  branch_id_ = a.Add("branch", dt, {B, T, C});
  return a.Allocate(device_).WithContext("GPT activations");
}

HeadActivations Gpt::Head(int B, int T) const {
  return {ArenaView(acts_, ln_f_id_, {B, T, config_.n_embd}),
          ArenaView(acts_, ln_f_mean_id_, {B, T}), ArenaView(acts_, ln_f_rstd_id_, {B, T})};
}

BlockActivations Gpt::Acts(int layer, int B, int T) const {
  return ViewBlockActivations(acts_, act_ids_[recompute_ ? 0 : layer], block_shape_, B, T);
}

Status Gpt::InitializeWeights(const ModelConfig& config, uint64_t seed, const Arena& master) {
  const double proj_std = 0.02 / std::sqrt(2.0 * config.n_layer);
  for (int i = 0; i < master.size(); ++i) {
    const std::string& name = master.name(i);
    const Tensor t = master.Get(i);
    if (t.dtype() != DType::kF32)
      return InvalidArgument("InitializeWeights: '" + name + "' is not f32");
    std::vector<float> values(static_cast<size_t>(t.numel()), 0.0f);
    const bool is_bias = name.ends_with(".bias");
    const bool is_norm = name.find("ln_") != std::string::npos;
    if (is_norm && !is_bias) {
      std::fill(values.begin(), values.end(), 1.0f);
    } else if (!is_bias) {
      const double std = name.ends_with("c_proj.weight") ? proj_std : 0.02;
      Rng rng(MixSeed(seed, static_cast<uint64_t>(i)));
      for (float& v : values) v = static_cast<float>(rng.Normal() * std);
    }
    RETURN_IF_ERROR(Copy(t, HostTensor(values.data(), DType::kF32, t.shape())));
  }
  return Status();
}

int64_t Gpt::num_params() const {
  int64_t n = 0;
  for (int i = 0; i < params_.size(); ++i) n += params_.Get(i).numel();
  return n;
}

Status Gpt::ZeroGrads() {
  return Zero(grads_.All());  // one pass over the arena (its padding is zero already)
}

Result<double> Gpt::Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                            int B, int T, float dloss) {
  if (B < 1 || B > max_batch_ || T < 1 || T > config_.seq_len)
    return InvalidArgument("GPT forward: batch " + std::to_string(B) + " x " + std::to_string(T) +
                           " tokens exceeds the model's " + std::to_string(max_batch_) + " x " +
                           std::to_string(config_.seq_len));
  const size_t n = static_cast<size_t>(B) * T;
  if (tokens.size() != n || (!targets.empty() && targets.size() != n))
    return InvalidArgument("GPT forward: expected " + std::to_string(n) + " tokens and targets");
  const int32_t V = config_.vocab_size;
  RETURN_IF_ERROR(CheckTokenRange(tokens, targets, V));
  B_ = B;
  T_ = T;
  const int64_t C = config_.n_embd;
  const auto residual = [&](int l) { return ArenaView(acts_, residual_ids_[l], {B, T, C}); };
  // Tokens and targets go to the device side by side, in one copy.
  io_host_.assign(tokens.begin(), tokens.end());
  io_host_.insert(io_host_.end(), targets.begin(), targets.end());
  const auto io_len = static_cast<int64_t>(io_host_.size());
  RETURN_IF_ERROR(
      Copy(ArenaView(acts_, io_id_, {io_len}), HostTensor(io_host_.data(), DType::kI32, {io_len})));
  const Tensor tok = ArenaView(acts_, io_id_, {B, T});
  const NoCollectives none;
  RETURN_IF_ERROR(EmbedForward(none, residual(0), tok, p_.wte, p_.wpe, 0, 0));
  const Tensor branch = ArenaView(acts_, branch_id_, {B, T, C});
  for (int l = 0; l < config_.n_layer; ++l) {
    RETURN_IF_ERROR(BlockForward(p_.h[l], Acts(l, B, T), none, branch, residual(l + 1), residual(l),
                                 config_.n_head));
  }
  logits_ = ArenaView(acts_, logits_id_, {B, T, V});
  RETURN_IF_ERROR(HeadForward(none, Head(B, T), logits_, residual(config_.n_layer), p_.ln_f_w,
                              p_.ln_f_b, p_.wte));
  has_dlogits_ = false;
  if (targets.empty()) return 0.0;
  ASSIGN_OR_RETURN(Tensor tgt, acts_.Get(io_id_).Flat(static_cast<int64_t>(n), n));
  ASSIGN_OR_RETURN(tgt, tgt.Reshape({B, T}));
  const Tensor losses = ArenaView(acts_, losses_id_, {B, T});
  RETURN_IF_ERROR(
      SoftmaxCrossEntropy(losses, dloss != 0 ? logits_ : Tensor(), logits_, tgt, dloss));
  has_dlogits_ = dloss != 0;
  ASSIGN_OR_RETURN(const double sum, SumLosses(losses));
  return sum / static_cast<double>(n);
}

Status Gpt::Backward() {
  if (!has_dlogits_)
    return FailedPrecondition("GPT backward: the last forward computed no loss gradient");
  has_dlogits_ = false;
  const int B = B_, T = T_;
  const int64_t C = config_.n_embd;
  const auto residual = [&](int l) { return ArenaView(acts_, residual_ids_[l], {B, T, C}); };
  const BlockGradScratch s{
      ArenaView(acts_, dln_id_, {B, T, C}), ArenaView(acts_, datty_id_, {B, T, C}),
      ArenaView(acts_, dqkv_id_, {B, T, 3 * C}), ArenaView(acts_, dfch_gelu_id_, {B, T, 4 * C}),
      ArenaView(acts_, branch_id_, {B, T, C})};
  const NoCollectives none;
  const Tensor dresidual = ArenaView(acts_, dresidual_id_, {B, T, C});
  RETURN_IF_ERROR(HeadBackward(none, Head(B, T), dresidual, g_.ln_f_w, g_.ln_f_b, g_.wte, logits_,
                               residual(config_.n_layer), p_.ln_f_w, p_.wte, s.dln));
  for (int l = config_.n_layer - 1; l >= 0; --l) {
    const BlockActivations a = Acts(l, B, T);
    if (recompute_) {
      RETURN_IF_ERROR(
          BlockForward(p_.h[l], a, none, s.branch, residual(l + 1), residual(l), config_.n_head));
    }
    RETURN_IF_ERROR(
        BlockBackward(p_.h[l], g_.h[l], a, s, none, dresidual, residual(l), config_.n_head));
  }
  return EmbedBackward(none, g_.wte, g_.wpe, dresidual, ArenaView(acts_, io_id_, {B, T}), 0, 0);
}

}  // namespace rt
