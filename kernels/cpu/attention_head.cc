// Causal attention of one head in register tiles (see attention_head.h). Three tile shapes, each
// 8 rows (or 8 key columns) by 16 or 32 floats, so 16 vector accumulators stay in the 32 AVX-512
// registers and every loaded vector feeds 8 FMAs:
//   ScoreTile  s[r, j]  = α·Σ_d x[r, d]·yᵀ[d, j]   (q·kᵀ and dout·vᵀ, with k, v transposed)
//   RowTile    o[r, :] (+)= Σ_j p[r, j]·y[j, :]     (att·v and dscores·k)
//   ColumnTile o[j, :] += Σ_t p[t, j]·x[t, :]       (attᵀ·dout and dscoresᵀ·q)
// Only the causal triangle is visited: row block [r0, r0+8) meets keys [0, r0+8) in 16-column
// steps, and the column tiles start at their first key. The softmax rows between the tiles are
// 16-lane vector code too (tree reductions, a vector exp).
#include "kernels/cpu/attention_head.h"

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/common.h"

namespace rt::cpu {

namespace {

typedef float V16 __attribute__((vector_size(64)));
typedef int32_t I16 __attribute__((vector_size(64)));

constexpr int64_t kTileRows = 8;

inline V16 Load16(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void Store16(float* p, V16 v) { std::memcpy(p, &v, sizeof(v)); }

inline V16 Splat(float x) { return V16{} + x; }

// Horizontal sum and max of the 16 lanes, as a tree of shuffles (no serial scalar chain).
inline float HSum16(V16 v) {
  v += __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
  v += __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  v += __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
  return v[0];
}

inline V16 Max16(V16 a, V16 b) { return a > b ? a : b; }

inline float HMax16(V16 v) {
  v = Max16(v, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
  v = Max16(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
  v = Max16(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
  v = Max16(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
  return v[0];
}

// ExpFast (common.h) on 16 lanes: the same range reduction and polynomial, −inf → 0.
inline V16 Exp16(V16 x) {
  const V16 xc = Max16(Splat(-87.3f), x < Splat(88.37f) ? x : Splat(88.37f));
  const V16 round = Splat(12582912.0f);
  const V16 j = (xc * 1.44269504088896341f + round) - round;
  const V16 r = (xc - j * 0.693359375f) - j * -2.12194440e-4f;
  V16 p = Splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const I16 e = (__builtin_convertvector(j, I16) + 127) << 23;
  V16 y = p * (V16)e;
  y = x < Splat(-87.3f) ? Splat(0.0f) : y;
  y = x > Splat(88.37f) ? Splat(__builtin_inff()) : y;
  return x != x ? x : y;
}

// dst[0, n) = src[0, n) and zeros in [n, len). The probabilities are read again only by the
// backward pass, long after: on x86-64 they go out with non-temporal stores (where dst is 16-byte
// aligned), so their lines are neither read from memory first nor kept in the cache in place of
// the lines the next tiles use. AttentionHeadForward fences them before it returns.
inline void StreamRow(float* dst, const float* src, int64_t n, int64_t len) {
  int64_t j = 0;
#if defined(__x86_64__)
  if (reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
    for (; j + 4 <= n; j += 4) _mm_stream_ps(dst + j, _mm_loadu_ps(src + j));
    if (j == n) {
      for (; j + 4 <= len; j += 4) _mm_stream_ps(dst + j, _mm_setzero_ps());
    }
  }
#endif
  for (; j < n; ++j) dst[j] = src[j];
  for (; j < len; ++j) dst[j] = 0.0f;
}

// Row t of the causal softmax: sr holds the scaled scores of keys [0, ncol) (ncol a multiple of
// 16; keys after t are masked out), ar[0, t_len) receives the probabilities, zeros after t.
inline void SoftmaxRow(float* sr, int64_t t, int64_t ncol, float* ar, int64_t t_len) {
  const I16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const V16 neg_inf = Splat(-__builtin_inff());
  V16 mv = neg_inf;
  for (int64_t j0 = 0; j0 < ncol; j0 += 16) {
    const V16 v = lane > static_cast<int32_t>(t - j0) ? neg_inf : Load16(sr + j0);
    Store16(sr + j0, v);
    mv = Max16(mv, v);
  }
  const float mx = HMax16(mv);
  V16 sum = {};
  for (int64_t j0 = 0; j0 < ncol; j0 += 16) {
    const V16 e = Exp16(Load16(sr + j0) - mx);
    Store16(sr + j0, e);
    sum += e;
  }
  const float inv = 1.0f / HSum16(sum);
  for (int64_t j0 = 0; j0 < ncol; j0 += 16) Store16(sr + j0, Load16(sr + j0) * inv);
  StreamRow(ar, sr, std::min(ncol, t_len), t_len);
}

// Row t of the softmax backward: dr[j] = scale·ar[j]·(sr[j] − Σ_i ar[i]·sr[i]) for j < nw (ar is
// 0 after the diagonal, so dr is too), then zeros up to column t + kTileRows − 1.
inline void SoftmaxBackwardRow(float* dr, const float* ar, const float* sr, int64_t nw,
                               int64_t zero_end, float scale) {
  V16 acc = {};
  int64_t j = 0;
  for (; j + 16 <= nw; j += 16) acc += Load16(ar + j) * Load16(sr + j);
  float dot = HSum16(acc);
  for (; j < nw; ++j) dot += ar[j] * sr[j];
  for (j = 0; j + 16 <= nw; j += 16)
    Store16(dr + j, Load16(ar + j) * scale * (Load16(sr + j) - dot));
  for (; j < nw; ++j) dr[j] = scale * ar[j] * (sr[j] - dot);
  for (; j < zero_end; ++j) dr[j] = 0.0f;
}

// s[r·ld_s + j0 + j] = alpha·Σ_d x[r][d]·yt[d·ld_yt + j0 + j] for r < kTileRows, j < 16·NV.
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

// o[r][i] (+)= Σ_{j<nk} p[r][j]·y[j·ld_y + i] for r < kTileRows, i < 16·NV.
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

// o[c][i] (+)= Σ_{t0≤t<t1} p[t·ld_p + col[c]]·x[t·ld_x + i] for c < kTileRows, i < 16·NV.
template <int NV>
inline void ColumnTile(const float* p, int64_t ld_p, const int64_t col[kTileRows], const float* x,
                       int64_t ld_x, int64_t t0, int64_t t1, float* const o[kTileRows],
                       bool accumulate) {
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
      Store16(dst, accumulate ? Load16(dst) + acc[c][n] : acc[c][n]);
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
                        bool accumulate, float* junk) {
  for (int64_t i0 = 0; i0 < hs; i0 += 32) {
    float* oi[kTileRows];
    for (int c = 0; c < kTileRows; ++c) oi[c] = o[c] == junk ? junk : o[c] + i0;
    if (i0 + 32 <= hs) {
      ColumnTile<2>(p, ld_p, col, x + i0, ld_x, t0, t1, oi, accumulate);
    } else {
      ColumnTile<1>(p, ld_p, col, x + i0, ld_x, t0, t1, oi, accumulate);
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
      // The value tiles read the probabilities from the score rows (in L1), not from att.
      p[r] = s + std::min<int64_t>(r, nr - 1) * tp;
      o[r] = r < nr ? out + t * ld_out : junk;
    }
    // Softmax over whole 16-column steps: the future keys' scores become −inf, so their
    // probabilities come out as exact zeros and no loop has a remainder.
    const int64_t ncol = RoundUp16(r1);
    ScoreRows(x, kt, tp, hs, ncol, h.scale, s, tp);
    for (int64_t r = 0; r < nr; ++r)
      SoftmaxRow(s + r * tp, r0 + r, ncol, att + (r0 + r) * t_len, t_len);
    RowTiles(p, h.v, h.ld_qkv, r1, o, hs, false, junk);
  }
#if defined(__x86_64__)
  _mm_sfence();  // the non-temporal stores of StreamRow
#endif
}

RT_CPU_CLONES void AttentionHeadBackward(const HeadView& h, const float* att, const float* dout,
                                         int64_t ld_out, float* dq, float* dk, float* dv,
                                         bool accumulate) {
  const int64_t t_len = h.t_len, hs = h.hs, tp = RoundUp16(t_len);
  float* vt = Scratch(4, static_cast<size_t>(hs * tp));
  float* s = Scratch(5, static_cast<size_t>(kTileRows * tp));
  // dscores[t, j] = scale·att[t, j]·(datt[t, j] − Σ_i att[t, i]·datt[t, i]) for j ≤ t, zeros in
  // the kTileRows − 1 columns after the diagonal (which the tiles read).
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
      SoftmaxBackwardRow(ds + t * t_len, att + t * t_len, s + r * tp, nw,
                         std::min(t_len, t + kTileRows), h.scale);
    }
    // dq (+)= dscores·k.
    RowTiles(p, h.k, h.ld_qkv, r1, o, hs, accumulate, junk);
  }
  // dv (+)= attᵀ·dout and dk (+)= dscoresᵀ·q, kTileRows keys at a time from their first
  // query on (each key's rows are written by one tile).
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
    ColumnTiles(att, t_len, col, dout, ld_out, j0, t_len, ov, hs, accumulate, junk);
    ColumnTiles(ds, t_len, col, h.q, h.ld_qkv, j0, t_len, ok, hs, accumulate, junk);
  }
}

}  // namespace rt::cpu
