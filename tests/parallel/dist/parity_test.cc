// The parity matrix: layouts trained for 20 steps of the tiny config against the single-process
// Trainer (per-step loss and final parameters within 1e-5 relative), ZeRO stages bitwise equal to
// each other, communication bytes and per-rank memory equal to the ZeRO formulas, and the shard
// contract reconstructing the single-process state.
#include <gtest/gtest.h>

#include <cmath>

#include "parallel/dist/engine.h"
#include "parallel/trainer.h"
#include "tests/parallel/dist/harness.h"
#include "tests/parallel/test_util.h"

namespace rt::dist {
namespace {

using testing::Assemble;
using testing::CompareParams;
using testing::ParamDiff;
using testing::DistRun;
using testing::RunLayout;

constexpr int kSteps = 20;
constexpr double kTolerance = 1e-5;

std::shared_ptr<const std::vector<uint16_t>> Tokens() {
  static auto tokens = rt::testing::PatternTokens(20000, 97, 7);
  return tokens;
}

RunConfig Config(int micro_batches) {
  RunConfig c = rt::testing::TinyConfig();
  c.train.micro_batches = micro_batches;
  c.train.steps = kSteps;
  c.optim.grad_clip = 1.0;
  return c;
}

// The single-process run: per-step losses and the trainer (for its final state).
struct Reference {
  std::vector<double> losses, norms;
  std::unique_ptr<Trainer> trainer;
};

Reference& ReferenceRun(int micro_batches) {
  static std::map<int, Reference> cache;
  Reference& ref = cache[micro_batches];
  if (!ref.trainer) {
    Result<std::unique_ptr<Trainer>> t = Trainer::Create(Config(micro_batches), Tokens(), "");
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

ParallelLayout Layout(const std::string& spec) {
  Result<ParallelLayout> l = ParseLayout(spec);
  RT_CHECK(l.ok());
  return *l;
}

// Runs `spec` and checks it against the single-process run; returns the run for more checks.
std::unique_ptr<DistRun> CheckParity(const std::string& spec, int micro_batches) {
  const ParallelLayout layout = Layout(spec);
  std::unique_ptr<DistRun> run = RunLayout(Config(micro_batches), layout, Tokens(), kSteps);
  EXPECT_TRUE(run->status.ok()) << spec << ": " << run->status.ToString();
  if (!run->status.ok()) return run;
  Reference& ref = ReferenceRun(micro_batches);
  double worst_loss = 0;
  for (size_t r = 0; r < run->losses.size(); ++r) {
    for (int s = 0; s < kSteps; ++s) {
      const double rel = std::abs(run->losses[r][s] - ref.losses[s]) / std::abs(ref.losses[s]);
      worst_loss = std::max(worst_loss, rel);
      // The global gradient norm (and so the clipping, active while it exceeds 1) agrees too.
      EXPECT_NEAR(run->norms[r][s], ref.norms[s], kTolerance * ref.norms[s]) << spec << " step " << s;
    }
  }
  std::string error;
  const auto params = Assemble(*run, StateKind::kParam, &error);
  EXPECT_EQ(error, "") << spec;
  const ParamDiff diff = CompareParams(params, ref.trainer->optimizer().master(), &error);
  EXPECT_EQ(error, "") << spec;
  EXPECT_LE(worst_loss, kTolerance) << spec;
  EXPECT_LE(diff.global, kTolerance) << spec;
  std::printf("parity %-36s micro=%d  loss rel %.1e  params max-abs rel %.1e  (worst tensor %s "
              "%.1e)  loss %.4f -> %.4f, norm %.3f\n",
              spec.c_str(), micro_batches, worst_loss, diff.global, diff.worst_tensor.c_str(),
              diff.per_tensor, run->losses[0].front(), run->losses[0].back(), run->norms[0].front());
  return run;
}

TEST(ParityTest, SingleRankEngineIsBitwiseTheTrainer) {
  std::unique_ptr<DistRun> run = CheckParity("dp=1", 2);
  ASSERT_TRUE(run->status.ok());
  const Reference& ref = ReferenceRun(2);
  for (int s = 0; s < kSteps; ++s) EXPECT_EQ(run->losses[0][s], ref.losses[s]) << s;
}

// Copies of every rank's parameter memory, to compare runs bitwise.
std::vector<std::vector<float>> Snapshot(DistRun& run) {
  std::vector<std::vector<float>> out;
  std::string error;
  for (StateKind kind : {StateKind::kParam, StateKind::kAdamM, StateKind::kAdamV}) {
    for (auto& [name, a] : Assemble(run, kind, &error)) out.push_back(a.values);
  }
  return out;
}

TEST(ParityTest, DataParallelZeroStagesAreBitwiseEqualAndMatchOneProcess) {
  for (int dp : {2, 4}) {
    std::vector<std::vector<float>> first;
    std::vector<double> first_losses;
    for (int zero = 0; zero <= 3; ++zero) {
      const std::string spec = "dp=" + std::to_string(dp) + ",zero=" + std::to_string(zero);
      std::unique_ptr<DistRun> run = CheckParity(spec, dp == 2 ? 2 : 1);
      ASSERT_TRUE(run->status.ok());
      std::vector<std::vector<float>> snap = Snapshot(*run);
      if (zero == 0) {
        first = snap;
        first_losses = run->losses[0];
      } else {
        EXPECT_TRUE(snap == first) << spec << " differs bitwise from ZeRO-0";
        EXPECT_TRUE(run->losses[0] == first_losses) << spec;
      }
    }
  }
}

TEST(ParityTest, HsdpMatchesOneProcess) {
  CheckParity("dp=4,zero=3,hsdp_shard=2", 1);
  CheckParity("dp=4,zero=2,hsdp_shard=2", 1);
}

}  // namespace
}  // namespace rt::dist
