// The distributed engine on a CUDA device over an NCCL world against the single-process CPU
// Trainer: a world of one rank (tp = pp = dp = 1, every ZeRO stage: at dp = 1 each stage still
// takes its own path — reduce-scatter and all-gather of one rank, owned shards equal to the
// units, ZeRO-3's gathered units), per-step losses, gradient norms and final master weights of
// the tiny config. Multi-rank NCCL needs one GPU per rank and is not covered here. Skipped in
// builds without the NCCL backend or on machines without a CUDA device, except the checks of
// which world a device needs.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "base/fault.h"
#include "comm/communicator.h"
#include "kernels/tensor.h"
#include "parallel/engine.h"
#include "tests/parallel/parity.h"

namespace rt::parallel::testing {
namespace {

bool HaveGpu() { return comm::NcclAvailable() && CheckDeviceAvailable(Device::kCuda).ok(); }

// A ready one-rank world of `backend` ("cpu" or "nccl", on device 0).
std::unique_ptr<comm::Communicator> OneRankWorld(const std::string& backend,
                                                 const std::string& job) {
  comm::CommOptions o;
  o.store = comm::NewMemoryStore();
  o.job = job;
  o.rank = 0;
  o.size = 1;
  Result<std::unique_ptr<comm::Communicator>> world =
      backend == "nccl" ? comm::NewNcclCommunicator(EngineCommOptions(o), 0)
                        : comm::NewCpuCommunicator(EngineCommOptions(o));
  RT_CHECK(world.ok());
  RT_CHECK((*world)->WaitReady(Deadline::AfterMs(60'000)).ok());
  return std::move(*world);
}

// Trains `spec` (one rank) on CUDA for kSteps and compares it with the CPU reference run of
// `config`: losses and gradient norms within `step_tolerance` relative, the master weights within
// `param_tolerance` max-abs relative.
void CheckCudaParity(const std::string& spec, RunConfig config, double step_tolerance,
                     double param_tolerance) {
  config.train.device = "cuda";
  auto run = std::make_unique<DistRun>();
  run->worlds.push_back(OneRankWorld("nccl", "dist-cuda-" + spec + config.train.precision));
  Result<std::unique_ptr<DistTrainer>> engine =
      DistTrainer::Create(config, Layout(spec), *run->worlds[0], Tokens());
  ASSERT_TRUE(engine.ok()) << spec << ": " << engine.status().ToString();
  EXPECT_EQ((*engine)->device(), Device::kCuda);
  run->engines.push_back(std::move(*engine));
  run->losses.resize(1);
  run->norms.resize(1);
  for (int s = 0; s < kSteps; ++s) {
    Result<StepStats> st = run->engines[0]->Step();
    ASSERT_TRUE(st.ok()) << spec << " step " << s << ": " << st.status().ToString();
    run->losses[0].push_back(st->loss);
    run->norms[0].push_back(st->grad_norm);
  }
  config.train.device = "cpu";
  Reference& ref = ReferenceRun(config);
  double worst_loss = 0, worst_norm = 0;
  for (int s = 0; s < kSteps; ++s) {
    worst_loss = std::max(worst_loss, std::abs(run->losses[0][s] - ref.losses[s]) / ref.losses[s]);
    worst_norm = std::max(worst_norm, std::abs(run->norms[0][s] - ref.norms[s]) / ref.norms[s]);
  }
  std::string error;
  const auto params = Assemble(*run, ckpt::StateKind::kMaster, &error);
  EXPECT_EQ(error, "") << spec;
  const ParamDiff diff = CompareParams(params, ref.trainer->optimizer().master(), &error);
  EXPECT_EQ(error, "") << spec;
  std::printf(
      "cuda+nccl vs cpu trainer %-16s %s micro=%d  loss rel %.1e  norm rel %.1e  params max-abs "
      "rel %.1e (worst tensor %s %.1e)  loss %.4f -> %.4f\n",
      spec.c_str(), config.train.precision.c_str(), config.train.micro_batches, worst_loss,
      worst_norm, diff.global, diff.worst_tensor.c_str(), diff.per_tensor, run->losses[0].front(),
      run->losses[0].back());
  EXPECT_LE(worst_loss, step_tolerance) << spec;
  EXPECT_LE(worst_norm, step_tolerance) << spec;
  EXPECT_LE(diff.global, param_tolerance) << spec;
  EXPECT_LT(run->losses[0].back(), run->losses[0].front() - 0.5) << spec << " does not learn";
}

class DistCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no NCCL backend in this build or no CUDA device";
  }
};

// fp32 at the single-process CUDA trainer's bound (tests/parallel/cuda_trainer_test.cc).
TEST_F(DistCuda, Fp32OneRankMatchesTheCpuTrainerAtEveryZeroStage) {
  for (int zero = 0; zero <= 3; ++zero)
    CheckCudaParity("zero=" + std::to_string(zero), Config(1), kTolerance, kTolerance);
}

TEST_F(DistCuda, Fp32MicroBatchesAndRecomputeMatchTheCpuTrainer) {
  RunConfig c = Config(2);
  c.train.recompute = true;
  CheckCudaParity("zero=1", c, kTolerance, kTolerance);
}

// bf16 at the single-process CUDA trainer's loose bounds (one bf16 ulp apart here and there).
TEST_F(DistCuda, Bf16OneRankMatchesTheCpuTrainerLoosely) {
  CheckCudaParity("zero=0", Config(1, 2, "bf16"), 1e-2, 1e-2);
  CheckCudaParity("zero=3", Config(1, 2, "bf16"), 1e-2, 1e-2);
}

// The injected overflow is written into device memory and skips the step.
TEST_F(DistCuda, Fp16SkipsAStepOnAnInjectedOverflow) {
  if (!fault::Enabled()) GTEST_SKIP() << "fault points are compiled out of this build";
  RunConfig c = Config(1, 2, "fp16");
  c.train.device = "cuda";
  auto world = OneRankWorld("nccl", "dist-cuda-fp16");
  Result<std::unique_ptr<DistTrainer>> engine =
      DistTrainer::Create(c, Layout("zero=2"), *world, Tokens());
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  ASSERT_TRUE((*engine)->Step().ok());
  const double scale = (*engine)->state().loss_scale;
  fault::Arm("parallel.dist.grad_overflow", {fault::Action::kError, 0, 1});
  Result<StepStats> s = (*engine)->Step();
  fault::DisarmAll();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->skipped);
  EXPECT_EQ((*engine)->state().loss_scale, scale / 2);
  Result<StepStats> next = (*engine)->Step();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_FALSE(next->skipped);
}

// train.device = "cuda" over a CPU world is refused (by the device check where no GPU can be
// used, by the backend check where one can), as is "cpu" over an NCCL world.
TEST(DistDevice, TheWorldMustServeTheDevice) {
  RunConfig c = Config(1);
  c.train.device = "cuda";
  auto cpu_world = OneRankWorld("cpu", "dist-device-cpu");
  Result<std::unique_ptr<DistTrainer>> e = DistTrainer::Create(c, Layout(""), *cpu_world, Tokens());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("train.device = \"cuda\""), std::string::npos)
      << e.status().ToString();
  if (HaveGpu()) {
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << e.status().ToString();
    EXPECT_NE(e.status().message().find("nccl"), std::string::npos) << e.status().ToString();
    auto nccl_world = OneRankWorld("nccl", "dist-device-nccl");
    c.train.device = "cpu";
    e = DistTrainer::Create(c, Layout(""), *nccl_world, Tokens());
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << e.status().ToString();
  }
}

}  // namespace
}  // namespace rt::parallel::testing
