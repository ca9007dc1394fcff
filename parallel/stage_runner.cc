#include "parallel/stage_runner.h"

#include <vector>

#include "kernels/ops.h"

namespace rt::parallel {

Result<std::unique_ptr<StageRunner>> StageRunner::Create(const ModelConfig& model,
                                                         const StageLayout& layout, int chunk,
                                                         int rows, int slots, TpGroup tp,
                                                         bool sequence_parallel, bool recompute,
                                                         DType dtype, Device device) {
  std::unique_ptr<StageRunner> r(new StageRunner());
  r->model_ = model;
  r->tp_ = tp;
  const int t = layout.tp;
  r->n_head_local_ = model.n_head / t;
  r->vocab_start_ = static_cast<int64_t>(layout.tp_rank) * (model.vocab_size / t);
  r->sp_ = sequence_parallel && t > 1;
  r->recompute_ = recompute;
  const StageChunk& c = layout.chunks[static_cast<size_t>(chunk)];
  r->layers_ = c.layers();
  r->rows_ = rows;
  r->slots_ = slots;
  // Local widths: the heads, MLP columns and vocabulary rows of this tensor-parallel rank.
  const int64_t B = rows, T = model.seq_len, C = model.n_embd, H = model.n_head / t,
                V = model.vocab_size / t, Cl = C / t;
  // The residual stream's positions per rank, and the gathered LayerNorm outputs' (all T).
  const int64_t Tr = r->sp_ ? T / t : T;
  r->pos_start_ = r->sp_ ? layout.tp_rank * Tr : 0;
  const DType f32 = DType::kF32, dt = dtype;
  r->block_shape_ = {C, H, Cl, r->sp_ ? t : 1};
  Arena& a = r->acts_;
  for (int s = 0; s < slots; ++s) {
    SlotIds ids;
    for (int j = 0; j <= r->layers_; ++j) ids.residual.push_back(a.Add("residual", dt, {B, Tr, C}));
    // With recomputation one set of block activations serves every block and slot.
    std::vector<int> blocks;
    const int sets = recompute ? (s == 0 && r->layers_ > 0 ? 1 : 0) : r->layers_;
    for (int j = 0; j < sets; ++j)
      blocks.push_back(AddBlockActivations(&a, r->block_shape_, B, T, dt));
    r->block_ids_.push_back(std::move(blocks));
    ids.tokens = a.Add("tokens", DType::kI32, {B, T});
    ids.targets = a.Add("targets", DType::kI32, {B, T});
    const bool head = c.has_head;
    ids.lnf = head ? a.Add("ln_f", dt, {B, T, C}) : -1;
    ids.lnf_mean = head ? a.Add("ln_f_mean", f32, {B, Tr}) : -1;
    ids.lnf_rstd = head ? a.Add("ln_f_rstd", f32, {B, Tr}) : -1;
    ids.logits = head ? a.Add("logits", dt, {B, T, V}) : -1;
    ids.losses = head ? a.Add("losses", f32, {B, T}) : -1;
    ids.dout = a.Add("dresidual", dt, {B, Tr, C});
    r->slot_ids_.push_back(std::move(ids));
  }
  r->dln_ = a.Add("dln", dt, {B, T, C});
  r->datty_ = a.Add("datty", dt, {B, T, Cl});
  r->dqkv_ = a.Add("dqkv", dt, {B, T, 3 * Cl});
  r->dfch_gelu_ = a.Add("dfch_gelu", dt, {B, T, 4 * Cl});
  r->branch_ = a.Add("branch", dt, {B, T, C});
  if (t > 1 && dt != f32) r->logits32_ = a.Add("logits_f32", f32, {B, T, V});
  if (r->sp_) {
    r->sp_ids_[0] = a.Add("sp_full_a", dt, {B, T, C});
    r->sp_ids_[1] = a.Add("sp_full_b", dt, {B, T, C});
    r->sp_ids_[2] = a.Add("sp_local", dt, {B, Tr, C});
    r->sp_ids_[3] = a.Add("sp_staging", dt, {B, T, C});
  }
  RETURN_IF_ERROR(a.Allocate(device).WithContext("pipeline stage activations"));
  if (r->sp_)
    r->collectives_ = std::make_unique<SpCollectives>(tp, r->Sp());
  else
    r->collectives_ = std::make_unique<TpCollectives>(tp);
  return r;
}

Tensor StageRunner::input(int slot) const { return Get(slot_ids_[slot].residual.front()); }
Tensor StageRunner::output(int slot) const { return Get(slot_ids_[slot].residual.back()); }
Tensor StageRunner::dout(int slot) const { return Get(slot_ids_[slot].dout); }
Tensor StageRunner::dinput(int slot) const {
  // The residual stream's gradient flows backwards in place through one buffer.
  return dout(slot);
}
Tensor StageRunner::tokens(int slot) const { return Get(slot_ids_[slot].tokens); }
Tensor StageRunner::targets(int slot) const { return Get(slot_ids_[slot].targets); }

BlockActivations StageRunner::Acts(int slot, int j) const {
  const int first = block_ids_[recompute_ ? 0 : slot][recompute_ ? 0 : j];
  return ViewBlockActivations(acts_, first, block_shape_, rows_, model_.seq_len);
}

HeadActivations StageRunner::Head(int slot) const {
  const SlotIds& ids = slot_ids_[slot];
  return {Get(ids.lnf), Get(ids.lnf_mean), Get(ids.lnf_rstd)};
}

BlockGradScratch StageRunner::Scratch() const {
  return {Get(dln_), Get(datty_), Get(dqkv_), Get(dfch_gelu_), Get(branch_)};
}

SpScratch StageRunner::Sp() const {
  return {Get(sp_ids_[0]), Get(sp_ids_[1]), Get(sp_ids_[2]), Get(sp_ids_[3])};
}

Status StageRunner::EmbeddingForward(int slot, Tensor wte, Tensor wpe) {
  return EmbedForward(*collectives_, input(slot), tokens(slot), wte, wpe, vocab_start_, pos_start_);
}

Status StageRunner::BlockForward(int slot, int j, const BlockTensors& p) {
  const SlotIds& ids = slot_ids_[slot];
  return rt::BlockForward(p, Acts(slot, j), *collectives_, Get(branch_), Get(ids.residual[j + 1]),
                          Get(ids.residual[j]), n_head_local_);
}

Result<double> StageRunner::HeadForward(int slot, Tensor ln_f_w, Tensor ln_f_b, Tensor wte,
                                        float dloss) {
  const SlotIds& ids = slot_ids_[slot];
  const Tensor logits = Get(ids.logits);
  RETURN_IF_ERROR(
      rt::HeadForward(*collectives_, Head(slot), logits, output(slot), ln_f_w, ln_f_b, wte));
  const Tensor losses = Get(ids.losses);
  if (tp_.size() > 1 && logits32_ >= 0) {
    // The cross-entropy's reductions are in f32: through an f32 copy of the logits, then
    // dL/dlogits rounded back (as the single-process loss writes them in the compute dtype).
    const Tensor l32 = Get(logits32_);
    RETURN_IF_ERROR(Convert(l32, logits));
    RETURN_IF_ERROR(VocabParallelCrossEntropy(tp_, losses, l32, targets(slot), vocab_start_,
                                              model_.vocab_size, dloss));
    RETURN_IF_ERROR(Convert(logits, l32));
  } else if (tp_.size() > 1) {
    RETURN_IF_ERROR(VocabParallelCrossEntropy(tp_, losses, logits, targets(slot), vocab_start_,
                                              model_.vocab_size, dloss));
  } else {
    RETURN_IF_ERROR(SoftmaxCrossEntropy(losses, logits, logits, targets(slot), dloss));
  }
  return SumLosses(losses);
}

Status StageRunner::HeadBackward(int slot, Tensor ln_f_w, Tensor wte, Tensor g_ln_f_w,
                                 Tensor g_ln_f_b, Tensor g_wte) {
  return rt::HeadBackward(*collectives_, Head(slot), dout(slot), g_ln_f_w, g_ln_f_b, g_wte,
                          Get(slot_ids_[slot].logits), output(slot), ln_f_w, wte, Get(dln_));
}

Status StageRunner::BlockBackward(int slot, int j, const BlockTensors& p, const BlockTensors& g) {
  const Tensor input = Get(slot_ids_[slot].residual[j]);
  // Recomputation: the block's forward again (rewriting its output with the same values).
  if (recompute_) RETURN_IF_ERROR(BlockForward(slot, j, p));
  return rt::BlockBackward(p, g, Acts(slot, j), Scratch(), *collectives_, dout(slot), input,
                           n_head_local_);
}

Status StageRunner::EmbeddingBackward(int slot, Tensor g_wte, Tensor g_wpe) {
  return EmbedBackward(*collectives_, g_wte, g_wpe, dinput(slot), tokens(slot), vocab_start_,
                       pos_start_);
}

}  // namespace rt::parallel
