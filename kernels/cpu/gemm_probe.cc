#include "kernels/cpu/gemm_probe.h"

#include <cblas.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "base/fault.h"

namespace rt::cpu {
namespace {

using Clock = std::chrono::steady_clock;

// One row-major sgemm C[m,n] = alpha·op(A)·op(B) + beta·C as ringtrain calls it
// (kernels/cpu/matmul.cc): forward is NT, backward-input NN, backward-weight TN.
struct GemmCase {
  bool ta = false, tb = false;
  int m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  int pad = 0;       // extra elements at the end of every row of A, B and C
  int row_step = 1;  // the reference checks rows 0, row_step, 2·row_step, … and the last
};

// Deterministic values in [-0.5, 0.5) (a 64-bit LCG; the probe must not depend on any RNG state).
class Values {
 public:
  explicit Values(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  float Next() {
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<double>(state_ >> 40) / 16777216.0 - 0.5);
  }

 private:
  uint64_t state_;
};

std::string Describe(const GemmCase& g) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "sgemm %c%c m=%d n=%d k=%d alpha=%g beta=%g pad=%d",
                g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', g.m, g.n, g.k, g.alpha, g.beta, g.pad);
  return buf;
}

// The inputs of one case: A and B, and C before the call (NaN with beta = 0: BLAS must not
// read it), filled from `seed`.
struct Operands {
  int lda = 0, ldb = 0, ldc = 0;
  std::vector<float> a, b, c0;
};

Operands MakeOperands(const GemmCase& g, uint64_t seed) {
  const int a_rows = g.ta ? g.k : g.m, a_cols = g.ta ? g.m : g.k;
  const int b_rows = g.tb ? g.n : g.k, b_cols = g.tb ? g.k : g.n;
  Operands o;
  o.lda = a_cols + g.pad, o.ldb = b_cols + g.pad, o.ldc = g.n + g.pad;
  Values v(seed);
  o.a.resize(static_cast<size_t>(a_rows) * o.lda);
  o.b.resize(static_cast<size_t>(b_rows) * o.ldb);
  o.c0.resize(static_cast<size_t>(g.m) * o.ldc);
  for (float& x : o.a) x = v.Next();
  for (float& x : o.b) x = v.Next();
  for (float& x : o.c0) x = g.beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : v.Next();
  return o;
}

// C as cblas_sgemm leaves it for `g` on `o`.
std::vector<float> Sgemm(const GemmCase& g, const Operands& o) {
  std::vector<float> c = o.c0;
  cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
              g.m, g.n, g.k, g.alpha, o.a.data(), o.lda, o.b.data(), o.ldb, g.beta, c.data(),
              o.ldc);
  return c;
}

// Runs `g` through cblas_sgemm and compares it with a double-precision reference. An element
// fails when it differs from the reference by more than 4·ε·√(k+1) times the sum of the absolute
// products (the scale of fp32 rounding in any summation order; a lost or wrong term is far
// larger), or when it is not finite and the reference is. Returns the first failure.
std::optional<std::string> CheckCase(const GemmCase& g, [[maybe_unused]] const std::string& kernels,
                                     uint64_t seed) {
  const Operands o = MakeOperands(g, seed);
  const int lda = o.lda, ldb = o.ldb, ldc = o.ldc;
  const std::vector<float>&a = o.a, &b = o.b, &c0 = o.c0;
  std::vector<float> c = Sgemm(g, o);
  if (!RT_FAULT_POINT("kernels.gemm_probe.wrong." + kernels).ok()) c[0] += 1.0f;
  constexpr double kEps = std::numeric_limits<float>::epsilon();
  const double scale = 4.0 * kEps * std::sqrt(g.k + 1.0);
  std::vector<double> sum(g.n), abs_sum(g.n);
  for (int i = 0; i < g.m; ++i) {
    if (i % g.row_step != 0 && i != g.m - 1) continue;
    // Row i of op(A)·op(B), walking B along its rows whichever way it is stored.
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(abs_sum.begin(), abs_sum.end(), 0.0);
    for (int p = 0; p < g.k; ++p) {
      const double x =
          g.ta ? a[static_cast<size_t>(p) * lda + i] : a[static_cast<size_t>(i) * lda + p];
      for (int j = 0; j < g.n; ++j) {
        const double y =
            g.tb ? b[static_cast<size_t>(j) * ldb + p] : b[static_cast<size_t>(p) * ldb + j];
        sum[j] += x * y;
        abs_sum[j] += std::fabs(x * y);
      }
    }
    for (int j = 0; j < g.n; ++j) {
      const double old = g.beta == 0.0f ? 0.0 : c0[static_cast<size_t>(i) * ldc + j];
      const double want = g.alpha * sum[j] + g.beta * old;
      const double tol =
          scale * (std::fabs(g.alpha) * abs_sum[j] + std::fabs(g.beta * old)) + 1e-30;
      const double got = c[static_cast<size_t>(i) * ldc + j];
      if (std::isfinite(got) && std::fabs(got - want) <= tol) continue;
      char buf[160];
      std::snprintf(buf, sizeof(buf), ": C[%d,%d] = %.9g, expected %.9g (tolerance %.3g)", i, j,
                    got, want, tol);
      return Describe(g) + buf;
    }
  }
  return std::nullopt;
}

// Runs `g` with one OpenBLAS thread and with `threads`, and returns the first element that
// differs. Some sets split a GEMM differently across threads and round differently (OpenBLAS
// 0.3.21's Haswell sgemm on an AVX-512 Xeon: its last bits change from 1 to 2 threads), while
// ringtrain's parity rests on processes with different thread counts — a rank of a parallel
// run, the single-process trainer, a daemon's worker, a test's reference — agreeing bit for bit.
std::optional<std::string> CheckThreadInvariance(const GemmCase& g,
                                                 [[maybe_unused]] const std::string& kernels,
                                                 uint64_t seed, int threads) {
  const Operands o = MakeOperands(g, seed);
  openblas_set_num_threads(1);
  const std::vector<float> one = Sgemm(g, o);
  openblas_set_num_threads(threads);
  std::vector<float> many = Sgemm(g, o);
  if (!RT_FAULT_POINT("kernels.gemm_probe.threads." + kernels).ok())
    many[0] = std::nextafter(many[0], std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < one.size(); ++i) {
    if (std::memcmp(&one[i], &many[i], sizeof(float)) == 0) continue;
    char buf[200];
    std::snprintf(buf, sizeof(buf), ": C[%zu,%zu] = %.9g with 1 thread, %.9g with %d",
                  i / static_cast<size_t>(o.ldc), i % static_cast<size_t>(o.ldc), one[i], many[i],
                  threads);
    return std::string(kThreadDependent) + ": " + Describe(g) + buf;
  }
  return std::nullopt;
}

// The cases of the check: every transpose pair on small and odd shapes (edge tiles of every
// kernel), with the three argument patterns ringtrain uses or could, then the Linear shapes of
// configs S and M (N = B·T = 1024 rows) in the orientations of forward, backward-input and
// backward-weight — the reference sampling rows there to stay within a few tens of ms.
std::vector<GemmCase> CheckCases() {
  std::vector<GemmCase> cases;
  const int shapes[][3] = {{1, 1, 1},    {2, 3, 1},    {7, 5, 3},    {17, 33, 65},
                           {37, 53, 71}, {64, 64, 64}, {96, 80, 130}};
  for (const auto& s : shapes)
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      cases.push_back({ta, tb, s[0], s[1], s[2], 1.0f, 0.0f, 0, 1});
      cases.push_back({ta, tb, s[0], s[1], s[2], 1.0f, 1.0f, 0, 1});
      cases.push_back({ta, tb, s[0], s[1], s[2], -0.5f, 0.25f, 3, 1});
    }
  for (const int c : {128, 384}) {
    const int step = c == 128 ? 7 : 31;
    cases.push_back({false, true, 1024, 3 * c, c, 1.0f, 0.0f, 0, step});   // qkv forward
    cases.push_back({false, false, 1024, c, 4 * c, 1.0f, 1.0f, 0, step});  // fc proj bwd-input
    cases.push_back({true, false, 4 * c, c, 1024, 1.0f, 1.0f, 0, step});   // fc proj bwd-weight
  }
  return cases;
}

// The nine GEMMs of config S's Linear layers (C = 128, N = 1024): qkv C→3C, fc C→4C and
// proj 4C→C, each forward (NT), backward-input (NN) and backward-weight (TN).
std::vector<GemmCase> TimedCases() {
  std::vector<GemmCase> cases;
  constexpr int kRows = 1024, kC = 128;
  const int linears[][2] = {{kC, 3 * kC}, {kC, 4 * kC}, {4 * kC, kC}};  // {in, out}
  for (const auto& l : linears) {
    cases.push_back({false, true, kRows, l[1], l[0], 1.0f, 0.0f, 0, 1});
    cases.push_back({false, false, kRows, l[0], l[1], 1.0f, 1.0f, 0, 1});
    cases.push_back({true, false, l[1], l[0], kRows, 1.0f, 1.0f, 0, 1});
  }
  return cases;
}

// Best GFLOP/s over timing passes of TimedCases(), one OpenBLAS thread.
double TimeKernels(int64_t budget_ms) {
  openblas_set_num_threads(1);
  const std::vector<GemmCase> cases = TimedCases();
  size_t most = 0;
  double flops = 0;
  for (const GemmCase& g : cases) {
    most = std::max({most, static_cast<size_t>(g.m) * g.k, static_cast<size_t>(g.k) * g.n,
                     static_cast<size_t>(g.m) * g.n});
    flops += 2.0 * g.m * g.n * g.k;
  }
  Values v(7);
  std::vector<float> a(most), b(most), c(most);
  for (size_t i = 0; i < most; ++i) a[i] = v.Next(), b[i] = v.Next(), c[i] = v.Next();
  auto pass = [&] {
    const auto start = Clock::now();
    for (const GemmCase& g : cases)
      cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
                  g.m, g.n, g.k, g.alpha, a.data(), g.ta ? g.m : g.k, b.data(), g.tb ? g.k : g.n,
                  g.beta, c.data(), g.n);
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  pass();  // warm-up: packing buffers, page faults
  double best = std::numeric_limits<double>::infinity();
  const auto end = Clock::now() + std::chrono::milliseconds(budget_ms);
  for (int i = 0; i < 200 && (i < 3 || Clock::now() < end); ++i) best = std::min(best, pass());
  return flops / best / 1e9;
}

constexpr std::pair<GemmProbeResult::Outcome, std::string_view> kOutcomeNames[] = {
    {GemmProbeResult::Outcome::kPassed, "passed"},
    {GemmProbeResult::Outcome::kWrong, "wrong"},
    {GemmProbeResult::Outcome::kFailed, "failed"},
    {GemmProbeResult::Outcome::kTimed, "timed"},
};

// Splits off the next space-separated word of `rest`.
std::string_view NextWord(std::string_view* rest) {
  const size_t space = rest->find(' ');
  const std::string_view word = rest->substr(0, space);
  *rest = space == std::string_view::npos ? std::string_view() : rest->substr(space + 1);
  return word;
}

}  // namespace

GemmProbeResult RunGemmProbe(const GemmProbeWork& work) {
  GemmProbeResult r;
  r.kernels = openblas_get_corename();
  r.outcome = work.check ? GemmProbeResult::Outcome::kPassed : GemmProbeResult::Outcome::kTimed;
  if (work.check) {
    uint64_t seed = 1;
    for (const GemmCase& g : CheckCases()) {
      std::optional<std::string> failure = CheckCase(g, r.kernels, seed++);
      if (!failure) continue;
      r.outcome = GemmProbeResult::Outcome::kWrong;
      r.detail = std::move(*failure);
      return r;
    }
    // The shapes large enough for OpenBLAS to use threads, at two threads and at its default.
    const int default_threads = openblas_get_num_threads();
    std::vector<int> counts = {2};
    if (default_threads > 2) counts.push_back(default_threads);
    std::optional<std::string> failure;
    for (const int threads : counts)
      for (const GemmCase& g : CheckCases())
        if (!failure && g.m >= 1024) failure = CheckThreadInvariance(g, r.kernels, seed++, threads);
    openblas_set_num_threads(default_threads);
    if (failure) {
      r.outcome = GemmProbeResult::Outcome::kWrong;
      r.detail = std::move(*failure);
      return r;
    }
  }
  if (work.time) r.gflops = TimeKernels(work.time_budget_ms);
  return r;
}

std::string FormatGemmProbeResult(const GemmProbeResult& result) {
  std::string_view outcome;
  for (const auto& [o, name] : kOutcomeNames)
    if (o == result.outcome) outcome = name;
  std::string gflops(static_cast<size_t>(std::snprintf(nullptr, 0, "%.3f", result.gflops)), '\0');
  std::snprintf(gflops.data(), gflops.size() + 1, "%.3f", result.gflops);
  std::string text = result.kernels + " " + std::string(outcome) + " " + gflops;
  if (!result.detail.empty()) text += " " + result.detail;
  for (char& ch : text)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return text;
}

Result<GemmProbeResult> ParseGemmProbeResult(std::string_view text) {
  std::string_view rest = text;
  GemmProbeResult r;
  r.kernels = std::string(NextWord(&rest));
  const std::string_view outcome = NextWord(&rest);
  const std::string_view gflops = NextWord(&rest);
  r.detail = std::string(rest);
  bool known = false;
  for (const auto& [o, name] : kOutcomeNames)
    if (name == outcome) r.outcome = o, known = true;
  const auto [end, ec] = std::from_chars(gflops.data(), gflops.data() + gflops.size(), r.gflops);
  const bool explained = r.outcome == GemmProbeResult::Outcome::kPassed ||
                         r.outcome == GemmProbeResult::Outcome::kTimed || !r.detail.empty();
  const bool one_line = text.find_first_of("\r\n") == std::string_view::npos;
  if (r.kernels.empty() || !known || ec != std::errc() || end != gflops.data() + gflops.size() ||
      !(r.gflops >= 0) || !explained || !one_line)
    return Corruption("probe result '" + std::string(text.substr(0, 200)) + "' does not parse");
  return r;
}

}  // namespace rt::cpu
