// The parity helpers of the distributed engine's tests: the tiny config, the cached
// single-process reference runs, and CheckParity, which trains a layout for kSteps steps and
// compares its per-step losses, gradient norms and final parameters with the reference.
#pragma once

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "parallel/engine.h"
#include "parallel/trainer.h"
#include "tests/parallel/harness.h"
#include "tests/parallel/test_util.h"

namespace rt::parallel::testing {

inline constexpr int kSteps = 20;
inline constexpr double kTolerance = 1e-5;

inline std::shared_ptr<const std::vector<uint16_t>> Tokens() {
  static auto tokens = rt::testing::PatternTokens(20000, 97, 7);
  return tokens;
}

// The tiny parity config (rt::testing::TinyParityConfig, kSteps steps) with `n_layer` blocks
// (more for pipelines with many virtual stages) in `precision`.
inline RunConfig Config(int micro_batches, int n_layer = 2, const std::string& precision = "fp32") {
  RunConfig c = rt::testing::TinyParityConfig(kSteps);
  c.model.n_layer = n_layer;
  c.train.precision = precision;
  c.train.micro_batches = micro_batches;
  return c;
}

// The single-process run: per-step losses and the trainer (for its final state).
struct Reference {
  std::vector<double> losses, norms;
  std::unique_ptr<Trainer> trainer;
};

// The single-process run of `config` (one of Config's), computed once.
inline Reference& ReferenceRun(const RunConfig& config) {
  static std::map<std::string, Reference> cache;
  Reference& ref = cache[std::to_string(config.train.micro_batches) + "/" +
                         std::to_string(config.model.n_layer) + "/" + config.train.precision];
  if (!ref.trainer) {
    Result<std::unique_ptr<Trainer>> t = Trainer::Create(config, Tokens(), "");
    RT_CHECK(t.ok());
    ref.trainer = std::move(*t);
    for (int s = 0; s < kSteps; ++s) {
      Result<StepStats> st = ref.trainer->Step();
      RT_CHECK(st.ok());
      ref.losses.push_back(st->loss);
      ref.norms.push_back(st->grad_norm);
    }
  }
  return ref;
}

inline Reference& ReferenceRun(int micro_batches) { return ReferenceRun(Config(micro_batches)); }

inline ParallelLayout Layout(const std::string& spec) {
  Result<ParallelLayout> l = ParseLayout(spec);
  RT_CHECK(l.ok());
  return *l;
}

// Runs `spec` on `config` and checks it against the single-process run: per-step losses and
// gradient norms within `tolerance` relative, final fp32 master weights within `tolerance`
// max-abs relative. Returns the run for more checks.
inline std::unique_ptr<DistRun> CheckParity(const std::string& spec, const RunConfig& config,
                                            double tolerance) {
  const int micro_batches = config.train.micro_batches;
  const ParallelLayout layout = Layout(spec);
  std::unique_ptr<DistRun> run = RunLayout(config, layout, Tokens(), kSteps);
  EXPECT_TRUE(run->status.ok()) << spec << ": " << run->status.ToString();
  if (!run->status.ok()) return run;
  Reference& ref = ReferenceRun(config);
  double worst_loss = 0, worst_norm = 0;
  for (size_t r = 0; r < run->losses.size(); ++r) {
    for (int s = 0; s < kSteps; ++s) {
      const double rel = std::abs(run->losses[r][s] - ref.losses[s]) / std::abs(ref.losses[s]);
      worst_loss = std::max(worst_loss, rel);
      worst_norm = std::max(worst_norm, std::abs(run->norms[r][s] - ref.norms[s]) / ref.norms[s]);
      // The global gradient norm (and so the clipping, active while it exceeds 1) agrees too.
      EXPECT_NEAR(run->norms[r][s], ref.norms[s], tolerance * ref.norms[s])
          << spec << " step " << s;
    }
  }
  std::string error;
  const auto params = Assemble(*run, ckpt::StateKind::kMaster, &error);
  EXPECT_EQ(error, "") << spec;
  const ParamDiff diff = CompareParams(params, ref.trainer->optimizer().master(), &error);
  EXPECT_EQ(error, "") << spec;
  EXPECT_LE(worst_loss, tolerance) << spec;
  EXPECT_LE(diff.global, tolerance) << spec;
  std::printf(
      "parity %-36s %s L=%d micro=%d  loss rel %.1e  norm rel %.1e  params max-abs rel %.1e  "
      "(worst tensor %s "
      "%.1e)  loss %.4f -> %.4f, norm %.3f\n",
      spec.c_str(), config.train.precision.c_str(), config.model.n_layer, micro_batches, worst_loss,
      worst_norm, diff.global, diff.worst_tensor.c_str(), diff.per_tensor, run->losses[0].front(),
      run->losses[0].back(), run->norms[0].front());
  return run;
}

// The fp32 tiny config with `micro_batches`, at kTolerance.
inline std::unique_ptr<DistRun> CheckParity(const std::string& spec, int micro_batches) {
  return CheckParity(spec, Config(micro_batches), kTolerance);
}

// Copies of every rank's fp32 state (master weights, Adam moments), to compare runs bitwise.
inline std::vector<std::vector<float>> Snapshot(DistRun& run) {
  std::vector<std::vector<float>> out;
  std::string error;
  for (ckpt::StateKind kind :
       {ckpt::StateKind::kMaster, ckpt::StateKind::kAdamM, ckpt::StateKind::kAdamV}) {
    for (auto& [name, a] : Assemble(run, kind, &error)) out.push_back(a.values);
  }
  return out;
}

}  // namespace rt::parallel::testing
