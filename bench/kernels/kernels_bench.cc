// The kernel benchmarks (see kernels_bench.h). Each measurement runs the operation enough times
// per repetition to last ≥ 2 ms, repeats that --reps times (interleaving the functions it
// compares) and reports the median.
#include "bench/kernels/kernels_bench.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/gemm_kernels.h"
#include "kernels/ops.h"
#include "kernels/tensor.h"

namespace rt {

namespace {

struct ModelConfig {
  const char* name;
  int64_t layers, channels, heads, seq, batch, vocab;
};

constexpr ModelConfig kConfigS = {"S", 4, 128, 4, 128, 8, 256};
constexpr ModelConfig kConfigM = {"M", 4, 384, 6, 256, 4, 256};

struct Options {
  std::vector<ModelConfig> configs = {kConfigS, kConfigM};
  int reps = 31;
  int threads = 0;  // OpenBLAS threads; 0 keeps OpenBLAS's own choice
};

// Repetitions of `fn` per timed sample, so that one sample lasts ≥ 2 ms.
int Calibrate(const std::function<void()>& fn) {
  using Clock = std::chrono::steady_clock;
  fn();  // warm-up (caches, OpenBLAS threads, scratch)
  int iters = 1;
  for (;;) {
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) fn();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s >= 0.002 || iters >= (1 << 20)) return iters;
    iters = std::max(iters * 2, static_cast<int>(iters * 0.0025 / std::max(s, 1e-9)));
  }
}

// Seconds per call: the median of the samples (the reported figure) and the best one (the
// least disturbed by other processes on a shared machine).
struct Timing {
  double median;
  double best;
  std::vector<double> samples;  // in the order taken
};

// The median over repetitions r of slow.samples[r] / fast.samples[r]: samples taken back to back
// see nearly the same machine load, so this ratio is steadier than the ratio of the medians on
// a busy machine.
double PairedRatio(const Timing& fast, const Timing& slow) {
  std::vector<double> r;
  for (size_t i = 0; i < fast.samples.size(); ++i) r.push_back(slow.samples[i] / fast.samples[i]);
  std::sort(r.begin(), r.end());
  return r[r.size() / 2];
}

// Timings of each of `fns`. The functions are sampled in turn (a, b, a, b, ...), so a change in
// the machine's load during the run affects them alike.
std::vector<Timing> TimeAll(const std::vector<std::function<void()>>& fns, int reps) {
  using Clock = std::chrono::steady_clock;
  std::vector<int> iters;
  for (const auto& fn : fns) iters.push_back(Calibrate(fn));
  std::vector<std::vector<double>> samples(fns.size());
  for (int r = 0; r < reps; ++r) {
    for (size_t f = 0; f < fns.size(); ++f) {
      const auto t0 = Clock::now();
      for (int i = 0; i < iters[f]; ++i) fns[f]();
      samples[f].push_back(std::chrono::duration<double>(Clock::now() - t0).count() / iters[f]);
    }
  }
  std::vector<Timing> timings;
  for (std::vector<double>& s : samples) {
    std::vector<double> sorted = s;
    std::sort(sorted.begin(), sorted.end());
    timings.push_back(Timing{sorted[sorted.size() / 2], sorted[0], s});
  }
  return timings;
}

// Timing of `fn`.
Timing TimeIt(const std::function<void()>& fn, int reps) { return TimeAll({fn}, reps)[0]; }

// Timings of `ours` and `raw`, sampled in turn.
std::pair<Timing, Timing> TimePair(const std::function<void()>& ours,
                                   const std::function<void()>& raw, int reps) {
  const std::vector<Timing> m = TimeAll({ours, raw}, reps);
  return {m[0], m[1]};
}

// An owned f32 CPU tensor with deterministic values in [-1, 1).
struct Owned {
  Buffer buffer;
  Tensor t;
  float* f() const { return t.data_as<float>(); }
};

Owned MakeTensor(DType dtype, Shape shape, uint32_t seed) {
  Result<Buffer> b = Buffer::Allocate(Device::kCpu, shape.numel() * DTypeSize(dtype));
  RT_CHECK(b.ok());
  Owned o{std::move(*b), Tensor()};
  o.t = o.buffer.View(dtype, shape);
  if (dtype == DType::kF32) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (int64_t i = 0; i < shape.numel(); ++i) o.f()[i] = d(gen);
  }
  return o;
}

// Aborts the benchmark run on an op failure (reported once, then exit status 1).
bool g_failed = false;
void Check(const Status& s) {
  if (!s.ok() && !g_failed) {
    std::fprintf(stderr, "kernels bench: %s\n", s.ToString().c_str());
    g_failed = true;
  }
}

void Sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b,
           float beta, float* c) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a,
              static_cast<int>(ta ? m : k), b, static_cast<int>(tb ? k : n), beta, c,
              static_cast<int>(n));
}

void PrintGemm(const ModelConfig& cfg, const char* op, const char* pass, int64_t m, int64_t n,
               int64_t k, double flops, Timing ours, Timing raw, int reps) {
  std::printf(
      "{\"bench\":\"kernels\",\"kind\":\"gemm\",\"config\":\"%s\",\"op\":\"%s\",\"pass\":\"%s\","
      "\"m\":%lld,\"n\":%lld,\"k\":%lld,\"ours_gflops\":%.2f,\"openblas_gflops\":%.2f,"
      "\"ratio\":%.3f,\"ours_best_gflops\":%.2f,\"openblas_best_gflops\":%.2f,"
      "\"ratio_best\":%.3f,\"ratio_paired\":%.3f,\"ours_ms\":%.4f,\"openblas_ms\":%.4f,"
      "\"reps\":%d}\n",
      cfg.name, op, pass, static_cast<long long>(m), static_cast<long long>(n),
      static_cast<long long>(k), flops / ours.median * 1e-9, flops / raw.median * 1e-9,
      raw.median / ours.median, flops / ours.best * 1e-9, flops / raw.best * 1e-9,
      raw.best / ours.best, PairedRatio(ours, raw), ours.median * 1e3, raw.median * 1e3, reps);
  std::fflush(stdout);
}

// One Linear layer out[N,OC] = inp[N,IC]·W[OC,IC]ᵀ (+ bias): forward, the two backward GEMMs
// through the Gemm op, and the whole MatmulBackward, each next to raw sgemm.
void BenchLinear(const ModelConfig& cfg, const char* op, int64_t ic, int64_t oc, bool bias,
                 int reps) {
  const int64_t n = cfg.batch * cfg.seq;
  Owned x = MakeTensor(DType::kF32, Shape{n, ic}, 1), w = MakeTensor(DType::kF32, Shape{oc, ic}, 2);
  Owned b = MakeTensor(DType::kF32, Shape{oc}, 3), y = MakeTensor(DType::kF32, Shape{n, oc}, 4);
  Owned dy = MakeTensor(DType::kF32, Shape{n, oc}, 5),
        dx = MakeTensor(DType::kF32, Shape{n, ic}, 6);
  Owned dw = MakeTensor(DType::kF32, Shape{oc, ic}, 7), db = MakeTensor(DType::kF32, Shape{oc}, 8);
  const double f = 2.0 * n * ic * oc;
  // Forward.
  auto [ours, raw] =
      TimePair([&] { Check(MatmulForward(y.t, x.t, w.t, bias ? b.t : Tensor())); },
               [&] { Sgemm(false, true, n, oc, ic, x.f(), w.f(), 0.0f, y.f()); }, reps);
  PrintGemm(cfg, op, "fwd", n, oc, ic, f, ours, raw, reps);
  // Backward, input gradient: dinp[N,IC] += dout[N,OC]·W[OC,IC].
  std::tie(ours, raw) =
      TimePair([&] { Check(Gemm(dx.t, dy.t, w.t, false, false, 1.0f, 1.0f)); },
               [&] { Sgemm(false, false, n, ic, oc, dy.f(), w.f(), 1.0f, dx.f()); }, reps);
  PrintGemm(cfg, op, "bwd_input", n, ic, oc, f, ours, raw, reps);
  // Backward, weight gradient: dW[OC,IC] += dout[N,OC]ᵀ·inp[N,IC].
  std::tie(ours, raw) =
      TimePair([&] { Check(Gemm(dw.t, dy.t, x.t, true, false, 1.0f, 1.0f)); },
               [&] { Sgemm(true, false, oc, ic, n, dy.f(), x.f(), 1.0f, dw.f()); }, reps);
  PrintGemm(cfg, op, "bwd_weight", oc, ic, n, f, ours, raw, reps);
  // The whole MatmulBackward (both GEMMs, plus the bias gradient) next to the two raw GEMMs.
  std::tie(ours, raw) =
      TimePair([&] { Check(MatmulBackward(dx.t, dw.t, bias ? db.t : Tensor(), dy.t, x.t, w.t)); },
               [&] {
                 Sgemm(false, false, n, ic, oc, dy.f(), w.f(), 1.0f, dx.f());
                 Sgemm(true, false, oc, ic, n, dy.f(), x.f(), 1.0f, dw.f());
               },
               reps);
  PrintGemm(cfg, op, "bwd", n, ic, oc, 2 * f, ours, raw, reps);
}

void PrintBandwidth(const char* scope, const char* op, int64_t elements, double bytes,
                    double memcpy_bytes, Timing ours, Timing memcpy_t, int reps) {
  const double gbs = bytes / ours.median * 1e-9, memcpy_gbs = memcpy_bytes / memcpy_t.median * 1e-9;
  const double best = bytes / ours.best * 1e-9, memcpy_best = memcpy_bytes / memcpy_t.best * 1e-9;
  std::printf(
      "{\"bench\":\"kernels\",\"kind\":\"bandwidth\",\"scope\":\"%s\",\"op\":\"%s\","
      "\"elements\":%lld,\"bytes\":%.0f,\"gbs\":%.2f,\"memcpy_gbs\":%.2f,\"ratio\":%.3f,"
      "\"best_gbs\":%.2f,\"memcpy_best_gbs\":%.2f,\"ratio_best\":%.3f,\"ratio_paired\":%.3f,"
      "\"ms\":%.4f,"
      "\"reps\":%d}\n",
      scope, op, static_cast<long long>(elements), bytes, gbs, memcpy_gbs, gbs / memcpy_gbs, best,
      memcpy_best, best / memcpy_best, PairedRatio(ours, memcpy_t) * bytes / memcpy_bytes,
      ours.median * 1e3, reps);
  std::fflush(stdout);
}

// Elementwise ops on rows × c f32 elements next to memcpy of the same working-set size.
// Bytes counted are those each op must read and write.
void BenchBandwidth(const char* scope, int64_t rows, int64_t c, int reps) {
  const int64_t n = rows * c;
  Owned a = MakeTensor(DType::kF32, Shape{rows, c}, 11),
        b = MakeTensor(DType::kF32, Shape{rows, c}, 12);
  Owned g = MakeTensor(DType::kF32, Shape{rows, c}, 13),
        d = MakeTensor(DType::kF32, Shape{rows, c}, 14);
  Owned w = MakeTensor(DType::kF32, Shape{c}, 15), bias = MakeTensor(DType::kF32, Shape{c}, 16);
  Owned mean = MakeTensor(DType::kF32, Shape{rows}, 17),
        rstd = MakeTensor(DType::kF32, Shape{rows}, 18);
  Owned dw = MakeTensor(DType::kF32, Shape{c}, 19), dbias = MakeTensor(DType::kF32, Shape{c}, 20);
  Owned m = MakeTensor(DType::kF32, Shape{n}, 21), v = MakeTensor(DType::kF32, Shape{n}, 22);
  Owned copy = MakeTensor(DType::kBF16, Shape{n}, 23);
  for (int64_t i = 0; i < n; ++i) v.f()[i] = std::abs(v.f()[i]);
  Tensor p = a.t.Reshape(Shape{n}).value(), gr = g.t.Reshape(Shape{n}).value();
  AdamWParams hp;
  hp.weight_decay = 0.1f;
  const double f4 = 4.0 * static_cast<double>(n);
  struct Case {
    const char* op;
    double bytes;  // read + written by the op
    std::function<void()> fn;
  };
  const std::vector<Case> cases = {
      {"memcpy", 2 * f4, [&] { std::memcpy(b.f(), a.f(), static_cast<size_t>(n) * 4); }},
      {"gelu_fwd", 2 * f4, [&] { Check(GeluForward(b.t, a.t)); }},
      {"gelu_bwd", 4 * f4, [&] { Check(GeluBackward(d.t, a.t, g.t)); }},
      {"layernorm_fwd", 2 * f4 + 8.0 * rows,
       [&] { Check(LayerNormForward(b.t, mean.t, rstd.t, a.t, w.t, bias.t)); }},
      {"layernorm_bwd", 4 * f4 + 8.0 * rows,
       [&] { Check(LayerNormBackward(d.t, dw.t, dbias.t, g.t, a.t, w.t, mean.t, rstd.t)); }},
      // AdamW reads param, grad, m, v and writes param, m, v (+ the bf16 copy).
      {"adamw", 7 * f4, [&] { Check(AdamW(p, gr, m.t, v.t, Tensor(), hp)); }},
      {"adamw_bf16_copy", 7.5 * f4, [&] { Check(AdamW(p, gr, m.t, v.t, copy.t, hp)); }},
      {"residual_add", 3 * f4, [&] { Check(Add(b.t, a.t, g.t)); }},
  };
  std::vector<std::function<void()>> fns;
  for (const Case& c : cases) fns.push_back(c.fn);
  const std::vector<Timing> t = TimeAll(fns, reps);
  std::printf(
      "{\"bench\":\"kernels\",\"kind\":\"bandwidth\",\"scope\":\"%s\",\"op\":\"memcpy\","
      "\"elements\":%lld,\"bytes\":%.0f,\"gbs\":%.2f,\"best_gbs\":%.2f,\"ms\":%.4f,"
      "\"reps\":%d}\n",
      scope, static_cast<long long>(n), cases[0].bytes, cases[0].bytes / t[0].median * 1e-9,
      cases[0].bytes / t[0].best * 1e-9, t[0].median * 1e3, reps);
  for (size_t i = 1; i < cases.size(); ++i) {
    PrintBandwidth(scope, cases[i].op, n, cases[i].bytes, cases[0].bytes, t[i], t[0], reps);
  }
}

// Attention forward and backward of one layer of the config.
void BenchAttention(const ModelConfig& cfg, int reps) {
  const int64_t b = cfg.batch, t = cfg.seq, c = cfg.channels, nh = cfg.heads;
  Owned qkv = MakeTensor(DType::kF32, Shape{b, t, 3 * c}, 31),
        out = MakeTensor(DType::kF32, Shape{b, t, c}, 32);
  Owned att = MakeTensor(DType::kF32, Shape{b, nh, t, t}, 33),
        dout = MakeTensor(DType::kF32, Shape{b, t, c}, 34);
  Owned dqkv = MakeTensor(DType::kF32, Shape{b, t, 3 * c}, 35);
  const int h = static_cast<int>(nh);
  const Timing fwd = TimeIt([&] { Check(AttentionForward(out.t, att.t, qkv.t, h)); }, reps);
  const Timing bwd =
      TimeIt([&] { Check(AttentionBackward(dqkv.t, dout.t, qkv.t, att.t, h)); }, reps);
  // Causal FLOPs: QKᵀ and att·V each 2·B·T²·C/2 forward, twice that backward.
  const double flops_fwd = 2.0 * b * t * t * c;
  std::printf(
      "{\"bench\":\"kernels\",\"kind\":\"attention\",\"config\":\"%s\",\"B\":%lld,\"T\":%lld,"
      "\"C\":%lld,\"H\":%lld,\"fwd_ms\":%.4f,\"bwd_ms\":%.4f,\"fwd_bwd_ms\":%.4f,"
      "\"causal_gflops\":%.2f,\"best_fwd_ms\":%.4f,\"best_bwd_ms\":%.4f,\"reps\":%d}\n",
      cfg.name, static_cast<long long>(b), static_cast<long long>(t), static_cast<long long>(c),
      static_cast<long long>(nh), fwd.median * 1e3, bwd.median * 1e3,
      (fwd.median + bwd.median) * 1e3, 3 * flops_fwd / (fwd.median + bwd.median) * 1e-9,
      fwd.best * 1e3, bwd.best * 1e3, reps);
  std::fflush(stdout);
}

bool Parse(int argc, char** argv, Options* opt) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fprintf(stderr,
                   "usage: %s [--config=S|M|all] [--reps=N] [--threads=N]\n"
                   "Prints one JSON line per measurement (medians of N repetitions);\n"
                   "--threads sets the OpenBLAS thread count (default: OpenBLAS's own).\n",
                   argv[0]);
      return false;
    } else if (a.rfind("--config=", 0) == 0) {
      const std::string_view v = a.substr(9);
      if (v == "S" || v == "s") {
        opt->configs = {kConfigS};
      } else if (v == "M" || v == "m") {
        opt->configs = {kConfigM};
      } else if (v != "all") {
        std::fprintf(stderr, "kernels bench: unknown config '%.*s' (S, M or all)\n",
                     static_cast<int>(v.size()), v.data());
        return false;
      }
    } else if (a.rfind("--threads=", 0) == 0) {
      opt->threads = std::atoi(std::string(a.substr(10)).c_str());
      if (opt->threads < 1 || opt->threads > 256) {
        std::fprintf(stderr, "kernels bench: --threads must be in [1, 256], got '%s'\n",
                     std::string(a.substr(10)).c_str());
        return false;
      }
    } else if (a.rfind("--reps=", 0) == 0) {
      opt->reps = std::atoi(std::string(a.substr(7)).c_str());
      if (opt->reps < 1 || opt->reps > 1000) {
        std::fprintf(stderr, "kernels bench: --reps must be in [1, 1000], got '%s'\n",
                     std::string(a.substr(7)).c_str());
        return false;
      }
    } else {
      std::fprintf(stderr, "kernels bench: unknown argument '%s' (try --help)\n", argv[i]);
      return false;
    }
  }
  return true;
}

}  // namespace

int RunKernelsBench(int argc, char** argv) {
  Options opt;
  if (!Parse(argc, argv, &opt)) return 2;
  g_failed = false;
  if (opt.threads > 0) openblas_set_num_threads(opt.threads);
  // What OpenBLAS this run measures (the kernel set, how it was chosen, its thread count).
  std::printf(
      "{\"bench\":\"kernels\",\"kind\":\"setup\",\"openblas_core\":\"%s\","
      "\"openblas_core_chosen\":\"%s\",\"openblas_threads\":%d,\"openblas_config\":\"%s\","
      "\"reps\":%d}\n",
      openblas_get_corename(), CurrentGemmKernels().how.c_str(), openblas_get_num_threads(),
      openblas_get_config(), opt.reps);
  for (const ModelConfig& cfg : opt.configs) {
    const int64_t c = cfg.channels;
    BenchLinear(cfg, "qkv", c, 3 * c, true, opt.reps);
    BenchLinear(cfg, "attn_proj", c, c, true, opt.reps);
    BenchLinear(cfg, "fc", c, 4 * c, true, opt.reps);
    BenchLinear(cfg, "fc_proj", 4 * c, c, true, opt.reps);
    BenchLinear(cfg, "lm_head", c, cfg.vocab, false, opt.reps);
    BenchAttention(cfg, opt.reps);
    // The elementwise ops at the config's activation size [B·T, 4C] (cache-resident).
    BenchBandwidth(cfg.name, cfg.batch * cfg.seq, 4 * c, opt.reps);
  }
  // And at a size far beyond the caches (64 MiB per f32 tensor): main-memory bandwidth.
  BenchBandwidth("dram", 16384, 1024, opt.reps);
  return g_failed ? 1 : 0;
}

}  // namespace rt
