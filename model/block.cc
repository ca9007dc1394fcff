#include "model/block.h"

#include "kernels/ops.h"

namespace rt {

Status BlockForward(const BlockTensors& p, const BlockActivations& a, const BlockCollectives& c,
                    Tensor branch, Tensor out, Tensor inp, int n_head) {
  const bool bias = c.AddsRowBias();
  // Attention branch: residual2 = inp + c_proj(attention(c_attn(ln_1(inp)))).
  const Tensor ln_1 = c.Local(a.ln_1);
  RETURN_IF_ERROR(LayerNormForward(ln_1, a.ln_1_mean, a.ln_1_rstd, inp, p.ln_1_w, p.ln_1_b));
  ASSIGN_OR_RETURN(const Tensor ln_1_full, c.Gather(ln_1, a.ln_1, "ln_1's output"));
  RETURN_IF_ERROR(MatmulForward(a.qkv, ln_1_full, p.attn_w, p.attn_b));
  RETURN_IF_ERROR(AttentionForward(a.atty, a.att, a.qkv, n_head));
  const Tensor attn_partial = c.Partial(branch);
  RETURN_IF_ERROR(
      MatmulForward(attn_partial, a.atty, p.attn_proj_w, bias ? p.attn_proj_b : Tensor()));
  ASSIGN_OR_RETURN(const Tensor attn_out, c.Reduce(attn_partial, "the attention output"));
  RETURN_IF_ERROR(Add(a.residual2, inp, attn_out));
  // MLP branch: out = residual2 + c_proj(gelu(c_fc(ln_2(residual2)))).
  const Tensor ln_2 = c.Local(a.ln_2);
  RETURN_IF_ERROR(
      LayerNormForward(ln_2, a.ln_2_mean, a.ln_2_rstd, a.residual2, p.ln_2_w, p.ln_2_b));
  ASSIGN_OR_RETURN(const Tensor ln_2_full, c.Gather(ln_2, a.ln_2, "ln_2's output"));
  RETURN_IF_ERROR(MatmulForward(a.fch, ln_2_full, p.fc_w, p.fc_b));
  RETURN_IF_ERROR(GeluForward(a.fch_gelu, a.fch));
  const Tensor mlp_partial = c.Partial(branch);
  RETURN_IF_ERROR(
      MatmulForward(mlp_partial, a.fch_gelu, p.fc_proj_w, bias ? p.fc_proj_b : Tensor()));
  ASSIGN_OR_RETURN(const Tensor mlp_out, c.Reduce(mlp_partial, "the MLP output"));
  return Add(out, a.residual2, mlp_out);
}

Status BlockBackward(const BlockTensors& p, const BlockTensors& g, const BlockActivations& a,
                     const BlockGradScratch& s, const BlockCollectives& c, Tensor dresidual,
                     Tensor inp, int n_head) {
  // MLP branch: out = residual2 + c_proj(gelu(c_fc(ln_2(residual2)))); dL/d residual2 is dL/d out
  // plus the branch's contribution, accumulated in place.
  ASSIGN_OR_RETURN(Tensor dout, c.Gather(dresidual, Tensor(), "the MLP output's gradient"));
  RETURN_IF_ERROR(Zero(s.dfch_gelu));
  RETURN_IF_ERROR(
      MatmulBackward(s.dfch_gelu, g.fc_proj_w, g.fc_proj_b, dout, a.fch_gelu, p.fc_proj_w));
  // dL/d fch is formed in place over dL/d gelu(fch) (no zeroing pass, no second buffer).
  RETURN_IF_ERROR(GeluBackward(s.dfch_gelu, a.fch, s.dfch_gelu, /*accumulate=*/false));
  Tensor dln = c.Partial(s.dln);
  RETURN_IF_ERROR(Zero(dln));
  RETURN_IF_ERROR(MatmulBackward(dln, g.fc_w, g.fc_b, s.dfch_gelu, a.ln_2, p.fc_w));
  ASSIGN_OR_RETURN(dln, c.Reduce(dln, "the gradient of ln_2's output"));
  RETURN_IF_ERROR(LayerNormBackward(dresidual, g.ln_2_w, g.ln_2_b, dln, a.residual2, p.ln_2_w,
                                    a.ln_2_mean, a.ln_2_rstd));
  // Attention branch: residual2 = inp + c_proj(attention(c_attn(ln_1(inp)))).
  ASSIGN_OR_RETURN(dout, c.Gather(dresidual, Tensor(), "the attention output's gradient"));
  RETURN_IF_ERROR(Zero(s.datty));
  RETURN_IF_ERROR(
      MatmulBackward(s.datty, g.attn_proj_w, g.attn_proj_b, dout, a.atty, p.attn_proj_w));
  RETURN_IF_ERROR(AttentionBackward(s.dqkv, s.datty, a.qkv, a.att, n_head, /*accumulate=*/false));
  dln = c.Partial(s.dln);
  RETURN_IF_ERROR(Zero(dln));
  RETURN_IF_ERROR(MatmulBackward(dln, g.attn_w, g.attn_b, s.dqkv, a.ln_1, p.attn_w));
  ASSIGN_OR_RETURN(dln, c.Reduce(dln, "the gradient of ln_1's output"));
  return LayerNormBackward(dresidual, g.ln_1_w, g.ln_1_b, dln, inp, p.ln_1_w, a.ln_1_mean,
                           a.ln_1_rstd);
}

}  // namespace rt
