// The trainer on a CUDA device against the same run on the CPU: per-step losses, gradient norms
// and final master weights of the tiny config from one seed, in fp32 (tight), bf16 and fp16
// (loose: see the tolerances), the fp16 overflow skip, weight files, evaluation and sampling.
// Needs a CUDA build and a GPU; skipped otherwise (except the error for train.device = "cuda"
// where no device can be used).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/fault.h"
#include "kernels/ops.h"
#include "model/sampler.h"
#include "parallel/trainer.h"
#include "tests/parallel/test_util.h"

namespace rt {
namespace {

constexpr int kSteps = 20;

bool HaveCuda() { return CheckDeviceAvailable(Device::kCuda).ok(); }

std::shared_ptr<const std::vector<uint16_t>> Tokens() {
  static auto tokens = testing::PatternTokens(20000, 97, 7);
  return tokens;
}

// The tiny parity config (testing::TinyParityConfig: clipping on, Adam ε = 1e-6, so the
// comparison measures the kernels, not rounding noise) on `device` in `precision`.
RunConfig Config(const std::string& device, const std::string& precision) {
  RunConfig c = testing::TinyParityConfig(kSteps);
  c.train.device = device;
  c.train.precision = precision;
  return c;
}

std::unique_ptr<Trainer> MakeTrainer(const RunConfig& c, const std::string& init_from = "") {
  auto t = Trainer::Create(c, Tokens(), init_from);
  RT_CHECK(t.ok());
  return std::move(*t);
}

// An f32 arena's contents on the host.
std::vector<float> HostFloats(const Arena& arena) {
  std::vector<float> v(arena.bytes() / sizeof(float));
  RT_CHECK(
      Copy(Tensor(v.data(), DType::kU8, Shape{static_cast<int64_t>(arena.bytes())}), arena.All())
          .ok());
  return v;
}

struct TrainingRun {
  std::vector<double> losses, norms;
  std::vector<bool> skipped;
  std::unique_ptr<Trainer> trainer;
};

TrainingRun Train(const RunConfig& c, int steps) {
  TrainingRun run;
  run.trainer = MakeTrainer(c);
  for (int s = 0; s < steps; ++s) {
    Result<StepStats> st = run.trainer->Step();
    RT_CHECK(st.ok());
    run.losses.push_back(st->loss);
    run.norms.push_back(st->grad_norm);
    run.skipped.push_back(st->skipped);
  }
  return run;
}

// Worst relative differences of a CUDA run against the CPU run.
struct Diff {
  double loss = 0;        // max over steps of |Δloss| / loss
  double norm = 0;        // max over steps of |Δ grad norm| / grad norm
  double params = 0;      // max |Δ master| / max |master| over the whole model
  double per_tensor = 0;  // the same per tensor, the worst tensor's
  std::string worst_tensor;
};

Diff Compare(const TrainingRun& gpu, const TrainingRun& cpu) {
  Diff d;
  for (size_t s = 0; s < cpu.losses.size(); ++s) {
    d.loss = std::max(d.loss, std::abs(gpu.losses[s] - cpu.losses[s]) / std::abs(cpu.losses[s]));
    d.norm = std::max(d.norm, std::abs(gpu.norms[s] - cpu.norms[s]) / cpu.norms[s]);
  }
  const Arena& layout = cpu.trainer->optimizer().master();
  const std::vector<float> a = HostFloats(gpu.trainer->optimizer().master());
  const std::vector<float> b = HostFloats(layout);
  double max_diff = 0, max_abs = 0;
  for (int i = 0; i < layout.size(); ++i) {
    const size_t at = layout.offset(i) / sizeof(float);
    double tensor_diff = 0, tensor_abs = 0;
    for (int64_t k = 0; k < layout.Get(i).numel(); ++k) {
      tensor_diff = std::max(tensor_diff, std::abs(static_cast<double>(a[at + k]) - b[at + k]));
      tensor_abs = std::max(tensor_abs, std::abs(static_cast<double>(b[at + k])));
    }
    max_diff = std::max(max_diff, tensor_diff);
    max_abs = std::max(max_abs, tensor_abs);
    const double rel = tensor_abs > 0 ? tensor_diff / tensor_abs : tensor_diff;
    if (rel > d.per_tensor) {
      d.per_tensor = rel;
      d.worst_tensor = layout.name(i);
    }
  }
  d.params = max_diff / max_abs;
  return d;
}

// Trains `cpu` and the same config on CUDA and compares them; prints the measured differences.
Diff TrainBoth(RunConfig cpu_config, const std::string& what) {
  RunConfig gpu_config = cpu_config;
  gpu_config.train.device = "cuda";
  const TrainingRun cpu = Train(cpu_config, kSteps), gpu = Train(gpu_config, kSteps);
  for (size_t s = 0; s < cpu.losses.size(); ++s) {
    EXPECT_TRUE(std::isfinite(gpu.losses[s])) << what << " step " << s;
    EXPECT_EQ(gpu.skipped[s], cpu.skipped[s]) << what << " step " << s;
  }
  const Diff d = Compare(gpu, cpu);
  std::printf(
      "cuda vs cpu %-22s loss rel %.2e  grad norm rel %.2e  params max-abs rel %.2e (worst "
      "tensor %s %.2e)  loss %.4f -> %.4f (cpu %.4f -> %.4f)\n",
      what.c_str(), d.loss, d.norm, d.params, d.worst_tensor.c_str(), d.per_tensor,
      gpu.losses.front(), gpu.losses.back(), cpu.losses.front(), cpu.losses.back());
  EXPECT_LT(gpu.losses.back(), gpu.losses.front() - 0.5) << what << " does not learn";
  return d;
}

class CudaTrainer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveCuda()) GTEST_SKIP() << CheckDeviceAvailable(Device::kCuda).ToString();
  }
};

// fp32: the same math in another order (cuBLASLt with fp32 compute, no TF32; warp reductions);
// the differences stay at the level of fp32 rounding carried through 20 Adam steps. Measured on
// an H100 (2026-11-24): losses 1.5e-8, gradient norms 1.1e-7, master weights 2.7e-7 (max-abs
// relative; micro=2 + recompute: 8.5e-9, 6.8e-8, 4.4e-7). The bound is the parallel engine's.
TEST_F(CudaTrainer, Fp32MatchesTheCpu) {
  constexpr double kTolerance = 1e-5;
  RunConfig c = Config("cpu", "fp32");
  const Diff plain = TrainBoth(c, "fp32");
  EXPECT_LE(plain.loss, kTolerance);
  EXPECT_LE(plain.norm, kTolerance);
  EXPECT_LE(plain.params, kTolerance);
  c.train.micro_batches = 2;
  c.train.recompute = true;
  const Diff split = TrainBoth(c, "fp32 micro=2 recompute");
  EXPECT_LE(split.loss, kTolerance);
  EXPECT_LE(split.norm, kTolerance);
  EXPECT_LE(split.params, kTolerance);
}

// bf16 (8 significant bits): every activation and gradient is rounded to bf16 after each op, and
// the two backends round different fp32 values (other summation orders, cuBLASLt's own output
// rounding), so an element may land one bf16 ulp (2^-8 relative) apart, and Adam turns small
// gradient differences into whole-step differences of the weights they touch. Measured on an
// H100 (2026-11-24): losses 4.5e-5, gradient norms 1.0e-3, master weights 1.3e-3 max-abs relative
// (the worst tensor 2.7e-2 of its own largest weight). The bounds are about 10× that, room for
// another GPU's cuBLASLt algorithms.
TEST_F(CudaTrainer, Bf16MatchesTheCpuLoosely) {
  const Diff d = TrainBoth(Config("cpu", "bf16"), "bf16");
  EXPECT_LE(d.loss, 1e-3);
  EXPECT_LE(d.norm, 1e-2);
  EXPECT_LE(d.params, 1e-2);
}

// fp16 with dynamic loss scaling (11 significant bits, so 8× closer than bf16). Measured on an
// H100 (2026-11-24): losses 7.9e-6, gradient norms 1.1e-4, master weights 2.3e-4; bounds ~10×.
TEST_F(CudaTrainer, Fp16MatchesTheCpuLoosely) {
  const Diff d = TrainBoth(Config("cpu", "fp16"), "fp16");
  EXPECT_LE(d.loss, 1e-4);
  EXPECT_LE(d.norm, 2e-3);
  EXPECT_LE(d.params, 3e-3);
}

TEST_F(CudaTrainer, Fp16SkipsAStepOnAnInjectedOverflow) {
  if (!fault::Enabled()) GTEST_SKIP() << "fault points are compiled out of this build";
  RunConfig c = Config("cuda", "fp16");
  c.train.loss_scale_window = 3;
  auto t = MakeTrainer(c);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(t->Step().ok());
  EXPECT_EQ(t->state().loss_scale, 65536.0);
  const std::vector<float> before = HostFloats(t->optimizer().master());
  fault::Arm("parallel.trainer.grad_overflow", {fault::Action::kError, 0, 1});
  Result<StepStats> s = t->Step();
  fault::DisarmAll();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->skipped);
  EXPECT_TRUE(std::isinf(s->grad_norm));
  EXPECT_EQ(t->state().step, 3);
  EXPECT_EQ(t->state().adam_step, 2);
  EXPECT_EQ(t->state().loss_scale, 32768.0);
  EXPECT_EQ(HostFloats(t->optimizer().master()), before);   // no update
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(t->Step().ok());  // three clean steps: scale doubles
  EXPECT_EQ(t->state().loss_scale, 65536.0);
  EXPECT_EQ(t->state().adam_step, 5);
}

// Weights leave and enter the device bitwise through safetensors; evaluation and the logits that
// sampling reads agree with the CPU on the same weights.
TEST_F(CudaTrainer, WeightFilesEvaluationAndSampling) {
  const std::string dir = ::testing::TempDir() + "/cuda_trainer";
  std::filesystem::create_directories(dir);
  TrainingRun gpu = Train(Config("cuda", "fp32"), 5);
  ASSERT_TRUE(gpu.trainer->Export(dir + "/gpu.safetensors", "byte").ok());
  auto cpu = MakeTrainer(Config("cpu", "fp32"), dir + "/gpu.safetensors");
  auto again = MakeTrainer(Config("cuda", "fp32"), dir + "/gpu.safetensors");
  EXPECT_EQ(HostFloats(cpu->optimizer().master()), HostFloats(gpu.trainer->optimizer().master()));
  EXPECT_EQ(HostFloats(again->optimizer().master()), HostFloats(cpu->optimizer().master()));

  Result<double> val_gpu = again->Evaluate(Tokens(), 4), val_cpu = cpu->Evaluate(Tokens(), 4);
  ASSERT_TRUE(val_gpu.ok() && val_cpu.ok());
  EXPECT_NEAR(*val_gpu, *val_cpu, 1e-5 * *val_cpu);

  // The logits of one forward (what the sampler reads), then greedy sampling on the device.
  const std::vector<int32_t> prompt = testing::RandomTokens(20, 256, 3);
  std::vector<std::vector<float>> logits;
  for (Trainer* t : {again.get(), cpu.get()}) {
    Gpt& m = t->model();
    ASSERT_TRUE(m.Forward(prompt, {}, 1, 20, 0.0f).ok());
    std::vector<float> host(static_cast<size_t>(m.logits().numel()));
    ASSERT_TRUE(Copy(Tensor(host.data(), DType::kF32, m.logits().shape()), m.logits()).ok());
    logits.push_back(std::move(host));
  }
  double worst = 0, largest = 0;
  for (size_t i = 0; i < logits[1].size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(logits[0][i]) - logits[1][i]));
    largest = std::max(largest, std::abs(static_cast<double>(logits[1][i])));
  }
  EXPECT_LE(worst, 1e-5 * largest);
  SampleOptions greedy;
  greedy.tokens = 8;
  greedy.temperature = 0;
  Result<std::vector<int32_t>> sampled = SampleTokens(again->model(), prompt, greedy);
  ASSERT_TRUE(sampled.ok()) << sampled.status().ToString();
  ASSERT_EQ(sampled->size(), 8u);
  for (int32_t tok : *sampled) EXPECT_TRUE(tok >= 0 && tok < 256);
}

// Where no CUDA device can be used (a CPU-only build, or no GPU), asking for one is an error that
// names the key — never a silent fallback to the CPU.
TEST(CudaTrainerConfig, CudaWithoutADeviceNamesTheKey) {
  if (HaveCuda()) GTEST_SKIP() << "a CUDA device is available here";
  Result<std::unique_ptr<Trainer>> t = Trainer::Create(Config("cuda", "fp32"), Tokens(), "");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("train.device"), std::string::npos) << t.status().ToString();
}

}  // namespace
}  // namespace rt
