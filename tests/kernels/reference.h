// Naive double-precision references of the ops (straight from the definitions in
// kernels/ops.h), used for forward checks and for finite differences.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace rt::testing {

using Vec = std::vector<double>;

// out[N,OC] = inp[N,IC]·weight[OC,IC]ᵀ + bias[OC] (bias may be empty).
inline Vec RefMatmul(const Vec& inp, const Vec& w, const Vec& bias, int64_t n, int64_t ic,
                     int64_t oc) {
  Vec out(n * oc);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < oc; ++o) {
      double s = bias.empty() ? 0.0 : bias[o];
      for (int64_t k = 0; k < ic; ++k) s += inp[i * ic + k] * w[o * ic + k];
      out[i * oc + o] = s;
    }
  return out;
}

// LayerNorm with eps 1e-5; mean/rstd returned through the pointers when given.
inline Vec RefLayerNorm(const Vec& x, const Vec& w, const Vec& b, int64_t n, int64_t c,
                        Vec* mean = nullptr, Vec* rstd = nullptr) {
  Vec out(n * c);
  if (mean) mean->assign(n, 0.0);
  if (rstd) rstd->assign(n, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    double m = 0.0;
    for (int64_t k = 0; k < c; ++k) m += x[i * c + k];
    m /= c;
    double v = 0.0;
    for (int64_t k = 0; k < c; ++k) v += (x[i * c + k] - m) * (x[i * c + k] - m);
    v /= c;
    const double s = 1.0 / std::sqrt(v + 1e-5);
    for (int64_t k = 0; k < c; ++k) out[i * c + k] = (x[i * c + k] - m) * s * w[k] + b[k];
    if (mean) (*mean)[i] = m;
    if (rstd) (*rstd)[i] = s;
  }
  return out;
}

inline double RefGelu(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

inline Vec RefGeluVec(const Vec& x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = RefGelu(x[i]);
  return y;
}

// Causal attention: out[B,T,C] and att[B,H,T,T] from qkv[B,T,3C].
inline Vec RefAttention(const Vec& qkv, int64_t b_len, int64_t t_len, int64_t c, int64_t nh,
                        Vec* att_out = nullptr) {
  const int64_t hs = c / nh;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  Vec out(b_len * t_len * c, 0.0);
  if (att_out) att_out->assign(b_len * nh * t_len * t_len, 0.0);
  std::vector<double> s(t_len);
  for (int64_t b = 0; b < b_len; ++b)
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t t = 0; t < t_len; ++t) {
        const double* q = &qkv[(b * t_len + t) * 3 * c + h * hs];
        double mx = -INFINITY;
        for (int64_t j = 0; j <= t; ++j) {
          const double* k = &qkv[(b * t_len + j) * 3 * c + c + h * hs];
          double d = 0.0;
          for (int64_t e = 0; e < hs; ++e) d += q[e] * k[e];
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= t; ++j) {
          s[j] = std::exp(s[j] - mx);
          sum += s[j];
        }
        for (int64_t j = 0; j <= t; ++j) {
          s[j] /= sum;
          if (att_out) (*att_out)[((b * nh + h) * t_len + t) * t_len + j] = s[j];
          const double* v = &qkv[(b * t_len + j) * 3 * c + 2 * c + h * hs];
          for (int64_t e = 0; e < hs; ++e) out[(b * t_len + t) * c + h * hs + e] += s[j] * v[e];
        }
      }
  return out;
}

// Per-row −log softmax(logits)[target].
inline Vec RefCrossEntropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t n,
                           int64_t v) {
  Vec loss(n);
  for (int64_t i = 0; i < n; ++i) {
    double mx = -INFINITY;
    for (int64_t j = 0; j < v; ++j) mx = std::max(mx, logits[i * v + j]);
    double sum = 0.0;
    for (int64_t j = 0; j < v; ++j) sum += std::exp(logits[i * v + j] - mx);
    loss[i] = std::log(sum) + mx - logits[i * v + targets[i]];
  }
  return loss;
}

// Σ out·r: the scalar whose gradient w.r.t. out is r (for finite differences).
inline double Dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central finite differences of f at x: g[i] ≈ (f(x+h·e_i) − f(x−h·e_i)) / 2h, in double.
template <typename F>
Vec FiniteDiff(F f, Vec x, double h = 1e-5) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2.0 * h);
  }
  return g;
}

}  // namespace rt::testing
