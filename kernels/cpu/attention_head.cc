// Causal attention of one head in register tiles (see attention_head.h). Three tile shapes, each
// 4 rows (or 4 key columns) by 16 or 32 floats, so 8 vector accumulators stay in registers and
// every loaded vector feeds 4 FMAs:
//   ScoreTile  s[r, j]  = α·Σ_d x[r, d]·yᵀ[d, j]   (q·kᵀ and dout·vᵀ, with k, v transposed)
//   RowTile    o[r, :] (+)= Σ_j p[r, j]·y[j, :]     (att·v and dscores·k)
//   ColumnTile o[j, :] += Σ_t p[t, j]·x[t, :]       (attᵀ·dout and dscoresᵀ·q)
// Only the causal triangle is visited: row block [r0, r0+4) meets keys [0, r0+4) in 16-column
// steps, and the column tiles start at their first key. This file is compiled with
// -ffp-contract=fast (kernels/CMakeLists.txt) so the tiles' multiply-adds become FMAs.
#include "kernels/cpu/attention_head.h"

#include <algorithm>

#include "kernels/cpu/common.h"

namespace rt::cpu {

namespace {

typedef float V16 __attribute__((vector_size(64)));

constexpr int64_t kTileRows = 4;

inline V16 Load16(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void Store16(float* p, V16 v) { std::memcpy(p, &v, sizeof(v)); }

// s[r·ld_s + j0 + j] = alpha·Σ_d x[r][d]·yt[d·ld_yt + j0 + j] for r < 4, j < 16·NV.
template <int NV>
inline void ScoreTile(const float* const x[kTileRows], const float* yt, int64_t ld_yt, int64_t hs,
                      int64_t j0, float alpha, float* s, int64_t ld_s) {
  V16 acc[kTileRows][NV] = {};
  for (int64_t d = 0; d < hs; ++d) {
    V16 y[NV];
    for (int n = 0; n < NV; ++n) y[n] = Load16(yt + d * ld_yt + j0 + 16 * n);
    for (int r = 0; r < kTileRows; ++r) {
      const float xv = x[r][d];
      for (int n = 0; n < NV; ++n) acc[r][n] += xv * y[n];
    }
  }
  for (int r = 0; r < kTileRows; ++r)
    for (int n = 0; n < NV; ++n) Store16(s + r * ld_s + j0 + 16 * n, acc[r][n] * alpha);
}

// o[r][i] (+)= Σ_{j<nk} p[r][j]·y[j·ld_y + i] for r < 4, i < 16·NV.
template <int NV>
inline void RowTile(const float* const p[kTileRows], const float* y, int64_t ld_y, int64_t nk,
                    float* const o[kTileRows], bool accumulate) {
  V16 acc[kTileRows][NV] = {};
  for (int64_t j = 0; j < nk; ++j) {
    V16 yv[NV];
    for (int n = 0; n < NV; ++n) yv[n] = Load16(y + j * ld_y + 16 * n);
    for (int r = 0; r < kTileRows; ++r) {
      const float pv = p[r][j];
      for (int n = 0; n < NV; ++n) acc[r][n] += pv * yv[n];
    }
  }
  for (int r = 0; r < kTileRows; ++r) {
    for (int n = 0; n < NV; ++n) {
      float* dst = o[r] + 16 * n;
      Store16(dst, accumulate ? Load16(dst) + acc[r][n] : acc[r][n]);
    }
  }
}

// o[c][i] += Σ_{t0≤t<t1} p[t·ld_p + col[c]]·x[t·ld_x + i] for c < 4, i < 16·NV.
template <int NV>
inline void ColumnTile(const float* p, int64_t ld_p, const int64_t col[kTileRows], const float* x,
                       int64_t ld_x, int64_t t0, int64_t t1, float* const o[kTileRows]) {
  V16 acc[kTileRows][NV] = {};
  for (int64_t t = t0; t < t1; ++t) {
    V16 xv[NV];
    for (int n = 0; n < NV; ++n) xv[n] = Load16(x + t * ld_x + 16 * n);
    const float* pt = p + t * ld_p;
    for (int c = 0; c < kTileRows; ++c) {
      const float pv = pt[col[c]];
      for (int n = 0; n < NV; ++n) acc[c][n] += pv * xv[n];
    }
  }
  for (int c = 0; c < kTileRows; ++c) {
    for (int n = 0; n < NV; ++n) {
      float* dst = o[c] + 16 * n;
      Store16(dst, Load16(dst) + acc[c][n]);
    }
  }
}

// Score rows of a row block: s[r, j] for j < ncol (a multiple of 16).
inline void ScoreRows(const float* const x[kTileRows], const float* yt, int64_t ld_yt, int64_t hs,
                      int64_t ncol, float alpha, float* s, int64_t ld_s) {
  int64_t j0 = 0;
  for (; j0 + 32 <= ncol; j0 += 32) ScoreTile<2>(x, yt, ld_yt, hs, j0, alpha, s, ld_s);
  if (j0 < ncol) ScoreTile<1>(x, yt, ld_yt, hs, j0, alpha, s, ld_s);
}

// RowTile over the head size in chunks of 32 (then 16) floats.
inline void RowTiles(const float* const p[kTileRows], const float* y, int64_t ld_y, int64_t nk,
                     float* const o[kTileRows], int64_t hs, bool accumulate, float* junk) {
  for (int64_t i0 = 0; i0 < hs; i0 += 32) {
    float* oi[kTileRows];
    for (int r = 0; r < kTileRows; ++r) oi[r] = o[r] == junk ? junk : o[r] + i0;
    if (i0 + 32 <= hs) {
      RowTile<2>(p, y + i0, ld_y, nk, oi, accumulate);
    } else {
      RowTile<1>(p, y + i0, ld_y, nk, oi, accumulate);
    }
  }
}

// ColumnTile over the head size in chunks of 32 (then 16) floats.
inline void ColumnTiles(const float* p, int64_t ld_p, const int64_t col[kTileRows], const float* x,
                        int64_t ld_x, int64_t t0, int64_t t1, float* const o[kTileRows], int64_t hs,
                        float* junk) {
  for (int64_t i0 = 0; i0 < hs; i0 += 32) {
    float* oi[kTileRows];
    for (int c = 0; c < kTileRows; ++c) oi[c] = o[c] == junk ? junk : o[c] + i0;
    if (i0 + 32 <= hs) {
      ColumnTile<2>(p, ld_p, col, x + i0, ld_x, t0, t1, oi);
    } else {
      ColumnTile<1>(p, ld_p, col, x + i0, ld_x, t0, t1, oi);
    }
  }
}

// yt[d·tp + j] = y[j·ld + d] for j < T, 0 for T ≤ j < tp.
// In 16×16 blocks through a local tile, so both the strided reads and the strided writes are
// whole 64-byte rows.
inline void Transpose(float* yt, const float* y, int64_t ld, int64_t t_len, int64_t tp,
                      int64_t hs) {
  alignas(64) float tile[16][16];
  for (int64_t j0 = 0; j0 < tp; j0 += 16) {
    const int64_t nj = std::min<int64_t>(16, t_len - j0);
    for (int64_t d0 = 0; d0 < hs; d0 += 16) {
      for (int64_t j = 0; j < 16; ++j) {
        for (int64_t d = 0; d < 16; ++d) tile[d][j] = j < nj ? y[(j0 + j) * ld + d0 + d] : 0.0f;
      }
      for (int64_t d = 0; d < 16; ++d) std::memcpy(yt + (d0 + d) * tp + j0, tile[d], 64);
    }
  }
}

inline int64_t RoundUp16(int64_t n) { return (n + 15) / 16 * 16; }

}  // namespace

RT_CPU_CLONES void AttentionHeadForward(const HeadView& h, float* att, float* out, int64_t ld_out) {
  const int64_t t_len = h.t_len, hs = h.hs, tp = RoundUp16(t_len);
  float* kt = Scratch(4, static_cast<size_t>(hs * tp));
  float* s = Scratch(5, static_cast<size_t>(kTileRows * tp));
  alignas(64) float junk[kTileRows * 32] = {};
  Transpose(kt, h.k, h.ld_qkv, t_len, tp, hs);
  for (int64_t r0 = 0; r0 < t_len; r0 += kTileRows) {
    const int64_t nr = std::min(kTileRows, t_len - r0), r1 = r0 + nr;
    const float* x[kTileRows];
    const float* p[kTileRows];
    float* o[kTileRows];
    for (int r = 0; r < kTileRows; ++r) {
      const int64_t t = std::min(r0 + r, t_len - 1);
      x[r] = h.q + t * h.ld_qkv;
      p[r] = att + t * t_len;
      o[r] = r < nr ? out + t * ld_out : junk;
    }
    // Softmax over whole 16-column steps: the future keys' scores become −inf, so their
    // probabilities come out as exact zeros and no loop has a remainder.
    const int64_t ncol = RoundUp16(r1), nw = std::min(ncol, t_len);
    ScoreRows(x, kt, tp, hs, ncol, h.scale, s, tp);
    for (int64_t r = 0; r < nr; ++r) {
      const int64_t t = r0 + r;
      float* sr = s + r * tp;
      float* ar = att + t * t_len;
      for (int64_t j = t + 1; j < ncol; ++j) sr[j] = -__builtin_inff();
      const float mx = MaxF32(sr, ncol);
      for (int64_t j = 0; j < ncol; ++j) sr[j] = ExpFast(sr[j] - mx);
      const float inv = 1.0f / SumF32(sr, ncol);
      for (int64_t j = 0; j < nw; ++j) ar[j] = sr[j] * inv;
      for (int64_t j = nw; j < t_len; ++j) ar[j] = 0.0f;
    }
    RowTiles(p, h.v, h.ld_qkv, r1, o, hs, false, junk);
  }
}

RT_CPU_CLONES void AttentionHeadBackward(const HeadView& h, const float* att, const float* dout,
                                         int64_t ld_out, float* dq, float* dk, float* dv) {
  const int64_t t_len = h.t_len, hs = h.hs, tp = RoundUp16(t_len);
  float* vt = Scratch(4, static_cast<size_t>(hs * tp));
  float* s = Scratch(5, static_cast<size_t>(kTileRows * tp));
  // dscores[t, j] = scale·att[t, j]·(datt[t, j] − Σ_i att[t, i]·datt[t, i]) for j ≤ t, zeros in
  // the 3 columns after the diagonal (which the 4-wide tiles read).
  float* ds = Scratch(6, static_cast<size_t>(t_len * t_len));
  alignas(64) float junk[kTileRows * 32] = {};
  Transpose(vt, h.v, h.ld_qkv, t_len, tp, hs);
  for (int64_t r0 = 0; r0 < t_len; r0 += kTileRows) {
    const int64_t nr = std::min(kTileRows, t_len - r0), r1 = r0 + nr;
    const float* g[kTileRows];
    const float* p[kTileRows];
    float* o[kTileRows];
    for (int r = 0; r < kTileRows; ++r) {
      const int64_t t = std::min(r0 + r, t_len - 1);
      g[r] = dout + t * ld_out;
      p[r] = ds + t * t_len;
      o[r] = r < nr ? dq + t * h.ld_qkv : junk;
    }
    // datt = dout·vᵀ for the block's rows.
    const int64_t ncol = RoundUp16(r1), nw = std::min(ncol, t_len);
    ScoreRows(g, vt, tp, hs, ncol, 1.0f, s, tp);
    // Over whole 16-column steps too: att is 0 after the diagonal, so dscores is as well.
    for (int64_t r = 0; r < nr; ++r) {
      const int64_t t = r0 + r;
      const float* sr = s + r * tp;
      const float* ar = att + t * t_len;
      float* dr = ds + t * t_len;
      const float dot = DotF32(ar, sr, nw);
      for (int64_t j = 0; j < nw; ++j) dr[j] = h.scale * ar[j] * (sr[j] - dot);
      for (int64_t j = nw; j < std::min(t_len, t + kTileRows); ++j) dr[j] = 0.0f;
    }
    // dq += dscores·k.
    RowTiles(p, h.k, h.ld_qkv, r1, o, hs, true, junk);
  }
  // dv += attᵀ·dout and dk += dscoresᵀ·q, 4 keys at a time from their first query on.
  for (int64_t j0 = 0; j0 < t_len; j0 += kTileRows) {
    int64_t col[kTileRows];
    float* ov[kTileRows];
    float* ok[kTileRows];
    for (int c = 0; c < kTileRows; ++c) {
      const int64_t j = j0 + c;
      col[c] = std::min(j, t_len - 1);
      ov[c] = j < t_len ? dv + j * h.ld_qkv : junk;
      ok[c] = j < t_len ? dk + j * h.ld_qkv : junk;
    }
    ColumnTiles(att, t_len, col, dout, ld_out, j0, t_len, ov, hs, junk);
    ColumnTiles(ds, t_len, col, h.q, h.ld_qkv, j0, t_len, ok, hs, junk);
  }
}

}  // namespace rt::cpu
