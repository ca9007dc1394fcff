#include "model/pieces.h"

#include <vector>

#include "kernels/ops.h"

namespace rt {

Status EmbedForward(const BlockCollectives& c, Tensor out, Tensor tokens, Tensor wte, Tensor wpe,
                    int64_t vocab_start, int64_t pos_start) {
  // Each rank embeds the tokens of its vocabulary rows (zeros elsewhere) over the whole
  // sequence; the sum over the ranks lands at this rank's positions.
  const Tensor partial = c.Partial(out);
  RETURN_IF_ERROR(EmbeddingForward(partial, tokens, wte, vocab_start));
  ASSIGN_OR_RETURN(const Tensor summed, c.Reduce(partial, "the token embeddings"));
  if (summed.data() != out.data()) RETURN_IF_ERROR(Copy(out, summed));
  return PositionEmbeddingAdd(out, wpe, pos_start);
}

Status EmbedBackward(const BlockCollectives& c, Tensor g_wte, Tensor g_wpe, Tensor dout,
                     Tensor tokens, int64_t vocab_start, int64_t pos_start) {
  ASSIGN_OR_RETURN(const Tensor full, c.Gather(dout, Tensor(), "the embeddings' gradient"));
  RETURN_IF_ERROR(EmbeddingBackward(g_wte, full, tokens, vocab_start));
  return PositionEmbeddingBackward(g_wpe, dout, pos_start);
}

Status HeadForward(const BlockCollectives& c, const HeadActivations& a, Tensor logits, Tensor x,
                   Tensor ln_f_w, Tensor ln_f_b, Tensor wte) {
  const Tensor local = c.Local(a.ln_f);
  RETURN_IF_ERROR(LayerNormForward(local, a.mean, a.rstd, x, ln_f_w, ln_f_b));
  ASSIGN_OR_RETURN(const Tensor full, c.Gather(local, a.ln_f, "ln_f's output"));
  return MatmulForward(logits, full, wte, Tensor());
}

Status HeadBackward(const BlockCollectives& c, const HeadActivations& a, Tensor dx, Tensor g_ln_f_w,
                    Tensor g_ln_f_b, Tensor g_wte, Tensor dlogits, Tensor x, Tensor ln_f_w,
                    Tensor wte, Tensor dln) {
  Tensor partial = c.Partial(dln);
  RETURN_IF_ERROR(Zero(partial));
  RETURN_IF_ERROR(MatmulBackward(partial, g_wte, Tensor(), dlogits, a.ln_f, wte));
  ASSIGN_OR_RETURN(const Tensor dlnf, c.Reduce(partial, "the gradient of ln_f's output"));
  RETURN_IF_ERROR(Zero(dx));
  return LayerNormBackward(dx, g_ln_f_w, g_ln_f_b, dlnf, x, ln_f_w, a.mean, a.rstd);
}

Result<double> SumLosses(Tensor losses) {
  std::vector<float> host(static_cast<size_t>(losses.numel()));
  RETURN_IF_ERROR(Copy(Tensor(host.data(), DType::kF32, losses.shape()), losses));
  double sum = 0;
  for (float v : host) sum += v;
  return sum;
}

int AddBlockActivations(Arena* arena, const BlockShape& s, int64_t rows, int64_t seq_len,
                        DType dtype) {
  const int64_t B = rows, T = seq_len, Tl = seq_len / s.seq_split, C = s.n_embd, W = s.width;
  const DType f32 = DType::kF32;
  const int first = arena->Add("ln_1", dtype, {B, T, C});
  arena->Add("ln_1_mean", f32, {B, Tl});
  arena->Add("ln_1_rstd", f32, {B, Tl});
  arena->Add("qkv", dtype, {B, T, 3 * W});
  arena->Add("atty", dtype, {B, T, W});
  arena->Add("att", f32, {B, s.heads, T, T});
  arena->Add("residual2", dtype, {B, Tl, C});
  arena->Add("ln_2", dtype, {B, T, C});
  arena->Add("ln_2_mean", f32, {B, Tl});
  arena->Add("ln_2_rstd", f32, {B, Tl});
  arena->Add("fch", dtype, {B, T, 4 * W});
  arena->Add("fch_gelu", dtype, {B, T, 4 * W});
  return first;
}

BlockActivations ViewBlockActivations(const Arena& arena, int first, const BlockShape& s, int64_t B,
                                      int64_t T) {
  const int64_t Tl = T / s.seq_split, C = s.n_embd, W = s.width;
  const auto at = [&](int k, Shape shape) { return ArenaView(arena, first + k, shape); };
  return {at(0, {B, T, C}),     at(1, {B, Tl}),        at(2, {B, Tl}),
          at(3, {B, T, 3 * W}), at(4, {B, T, W}),      at(5, {B, s.heads, T, T}),
          at(6, {B, Tl, C}),    at(7, {B, T, C}),      at(8, {B, Tl}),
          at(9, {B, Tl}),       at(10, {B, T, 4 * W}), at(11, {B, T, 4 * W})};
}

Tensor ArenaView(const Arena& arena, int id, Shape shape) {
  Result<Tensor> flat = arena.Get(id).Flat(0, shape.numel());
  RT_CHECK(flat.ok());
  Result<Tensor> view = flat->Reshape(shape);
  RT_CHECK(view.ok());
  return *view;
}

}  // namespace rt
