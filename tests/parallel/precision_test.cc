// bf16 and fp16 in the distributed engine against the single-process bf16/fp16 run: parity within
// the low-precision tolerance, ZeRO stages bitwise equal to each other, and fp16's dynamic loss
// scaling skipping an overflowed step on every rank.
#include <cmath>
#include <utility>

#include <gtest/gtest.h>

#include "base/fault.h"
#include "tests/parallel/parity.h"

namespace rt::parallel {
namespace {

using testing::CheckParity;
using testing::Config;
using testing::DistRun;
using testing::kSteps;
using testing::Layout;
using testing::RunLayout;
using testing::Snapshot;
using testing::Tokens;

// Tolerance of bf16/fp16 parity (per-step loss and gradient norm relative, final fp32 master
// weights max-abs relative). The engine rounds differently-ordered sums than one process: each
// tensor-parallel rank rounds its partial activation sums to bf16/fp16 before the all-reduce,
// and each data-parallel rank and pipeline end stage (the tied wte) accumulates its own
// micro-batches' gradients in bf16/fp16 before the fp32 reduction, where one process
// accumulates all of them in one buffer. How much such reordering moves the result was measured
// on one process alone, changing only its accumulation order (micro-batches 1 vs 2): bf16 loss
// 2.9e-5, norm 1.1e-3, params 1.1e-3; fp16 1.0e-5, 1.1e-4, 1.9e-4 (Adam turns gradient noise
// into steps of up to lr, so the weights move most). The layouts below measure at most bf16
// 9.4e-5, 1.1e-3, 1.9e-3 and fp16 8.8e-6, 3.1e-4, 1.1e-3 (tp=2, whose forward rounds partial
// sums too). Tolerances: bf16 3e-3 (≈ 3× its own reordering noise, under one bf16 ulp 2^-7 =
// 7.8e-3), fp16 2e-3 (two fp16 ulps, 2·2^-10). A real error fails them: sending bf16 pipeline
// activations as fp32 (a bug this test caught) moved bf16 weights by 6.2e-3 and fp16 to inf.
double Tolerance(const std::string& precision) { return precision == "bf16" ? 3e-3 : 2e-3; }

// bf16 on the five layouts; fp16 (the same code with loss scaling) on three of them.
TEST(PrecisionParityTest, Bf16AndFp16MatchOneProcessAndZeroStagesAreBitwiseEqual) {
  for (const char* spec : {"tp=2", "pp=2,schedule=1f1b", "tp=2,pp=2,dp=2,zero=1,schedule=1f1b"}) {
    for (const char* precision : {"bf16", "fp16"})
      CheckParity(spec, Config(2, 2, precision), Tolerance(precision));
  }
  std::unique_ptr<DistRun> zero1 =
      CheckParity("dp=2,zero=1", Config(2, 2, "bf16"), Tolerance("bf16"));
  std::unique_ptr<DistRun> zero3 =
      CheckParity("dp=2,zero=3", Config(2, 2, "bf16"), Tolerance("bf16"));
  ASSERT_TRUE(zero1->status.ok() && zero3->status.ok());
  const std::vector<std::vector<float>> first = Snapshot(*zero1);
  EXPECT_TRUE(Snapshot(*zero3) == first) << "bf16 ZeRO-3 differs bitwise from ZeRO-1";
  // ZeRO-0 (AdamW writes the whole bf16 copy) and ZeRO-2 too.
  for (const char* spec : {"dp=2,zero=0", "dp=2,zero=2"}) {
    std::unique_ptr<DistRun> run = RunLayout(Config(2, 2, "bf16"), Layout(spec), Tokens(), kSteps);
    ASSERT_TRUE(run->status.ok()) << spec << ": " << run->status.ToString();
    EXPECT_TRUE(Snapshot(*run) == first) << spec << " differs bitwise from ZeRO-1";
  }
}

// ZeRO-1/2 on one shard: AdamW updates the whole units in place (no parameter all-gather), the
// low-precision copy included.
TEST(PrecisionParityTest, OneShardZeroStagesMatchOneProcess) {
  for (const char* spec : {"zero=1", "zero=2"}) {
    CheckParity(spec, 2);
    CheckParity(spec, Config(2, 2, "bf16"), Tolerance("bf16"));
  }
}

TEST(PrecisionParityTest, Fp16OverflowOnOneRankSkipsTheStepEverywhere) {
  if (!fault::Enabled()) GTEST_SKIP() << "needs a build with fault injection";
  const RunConfig config = Config(2, 2, "fp16");
  constexpr int kOverflowStep = 3;  // 1-based
  constexpr int kRun = 6;
  // The single process with an overflow at that step.
  fault::Arm("parallel.trainer.grad_overflow", {fault::Action::kError, 0, kOverflowStep});
  Result<std::unique_ptr<Trainer>> ref = Trainer::Create(config, Tokens(), "");
  ASSERT_TRUE(ref.ok());
  std::vector<double> losses;
  for (int s = 0; s < kRun; ++s) {
    Result<StepStats> st = (*ref)->Step();
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->skipped, s + 1 == kOverflowStep) << s;
    losses.push_back(st->loss);
  }
  fault::DisarmAll();
  // Eight ranks, each hitting the point once per step: hit 8·2 + 1 is one rank's, in step 3.
  const ParallelLayout layout = Layout("tp=2,pp=2,dp=2,zero=1,schedule=1f1b");
  fault::Arm("parallel.dist.grad_overflow",
             {fault::Action::kError, 0, layout.world() * (kOverflowStep - 1) + 1});
  std::unique_ptr<DistRun> run = RunLayout(config, layout, Tokens(), kRun);
  EXPECT_EQ(fault::HitCount("parallel.dist.grad_overflow"), layout.world() * kRun);
  fault::DisarmAll();
  ASSERT_TRUE(run->status.ok()) << run->status.ToString();
  for (size_t r = 0; r < run->engines.size(); ++r) {
    for (int s = 0; s < kRun; ++s) {
      EXPECT_EQ(std::isinf(run->norms[r][s]), s + 1 == kOverflowStep)
          << "rank " << r << " step " << s;
      EXPECT_NEAR(run->losses[r][s], losses[s], Tolerance("fp16") * losses[s]) << s;
    }
    // The scale halved once, every rank agreeing with one process.
    EXPECT_EQ(run->engines[r]->state().loss_scale, (*ref)->state().loss_scale) << r;
    EXPECT_EQ(run->engines[r]->state().loss_scale, config.train.loss_scale_init / 2) << r;
    EXPECT_EQ(run->engines[r]->state().adam_step, kRun - 1) << r;
  }
}

TEST(PrecisionParityTest, Fp16LossScaleGrowsAfterTheWindow) {
  RunConfig config = Config(2, 2, "fp16");
  config.train.loss_scale_init = 1024;
  config.train.loss_scale_window = 3;
  constexpr int kRun = 10;
  std::unique_ptr<DistRun> run = RunLayout(config, Layout("dp=2,zero=3"), Tokens(), kRun);
  ASSERT_TRUE(run->status.ok()) << run->status.ToString();
  Result<std::unique_ptr<Trainer>> ref = Trainer::Create(config, Tokens(), "");
  ASSERT_TRUE(ref.ok());
  for (int s = 0; s < kRun; ++s) ASSERT_TRUE((*ref)->Step().ok());
  for (auto& e : run->engines) {
    EXPECT_EQ(e->state().loss_scale, (*ref)->state().loss_scale);
    EXPECT_EQ(e->state().loss_scale, 1024.0 * 8);  // 10 clean steps: doubled 3 times
  }
}

TEST(ShardContractTest, Bf16ParametersAreTheSingleProcessOnes) {
  const RunConfig config = Config(2, 2, "bf16");
  Result<std::unique_ptr<Trainer>> fresh = Trainer::Create(config, Tokens(), "");
  ASSERT_TRUE(fresh.ok());
  // The single process's bf16 parameters, widened to f32 for the comparison.
  Arena params;
  AddGptTensors(config.model, DType::kF32, &params);
  ASSERT_TRUE(params.Allocate(Device::kCpu).ok());
  const Arena& bf16 = (*fresh)->model().params();
  for (int i = 0; i < bf16.size(); ++i) ASSERT_TRUE(Convert(params.Get(i), bf16.Get(i)).ok());
  for (const char* spec :
       {"tp=2,pp=2,dp=2,zero=3,schedule=1f1b", "dp=2,zero=1", "pp=2,vpp=2,schedule=interleaved"}) {
    std::unique_ptr<DistRun> run = RunLayout(config, Layout(spec), Tokens(), 0);
    ASSERT_TRUE(run->status.ok()) << spec << ": " << run->status.ToString();
    for (const auto& [kind, arena] :
         {std::pair<ckpt::StateKind, const Arena*>{ckpt::StateKind::kParam, &params},
          std::pair{ckpt::StateKind::kMaster, &(*fresh)->optimizer().master()}}) {
      std::string error;
      const auto got = testing::Assemble(*run, kind, &error);
      EXPECT_EQ(error, "") << spec;
      EXPECT_EQ(testing::CompareParams(got, *arena, &error).per_tensor, 0.0)
          << spec << " " << ckpt::StateKindName(kind);
      EXPECT_EQ(error, "") << spec;
    }
    for (auto& e : run->engines)
      for (const ckpt::TensorShard& s : e->Shards().shards)
        if (s.kind == ckpt::StateKind::kParam) {
          EXPECT_EQ(s.dtype, DType::kBF16) << spec;
        }
  }
}

}  // namespace
}  // namespace rt::parallel
