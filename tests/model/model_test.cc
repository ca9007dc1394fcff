// The GPT model's numerics: initial loss, a whole-model finite-difference gradient check,
// micro-batch and recomputation equivalence.
#include <cmath>

#include <gtest/gtest.h>

#include "kernels/ops.h"
#include "model/gpt.h"
#include "model/optimizer.h"
#include "tests/parallel/test_util.h"

namespace rt {
namespace {

using testing::RandomTokens;
using testing::TinyConfig;

// A tiny fp32 model with initialised weights (its parameter arena is the master).
std::unique_ptr<Gpt> TinyModel(int max_batch, bool recompute, uint64_t seed = 1) {
  auto m = Gpt::Create(TinyConfig().model, Precision::kFp32, max_batch, recompute, Device::kCpu);
  RT_CHECK(m.ok());
  RT_CHECK(Gpt::InitializeWeights((*m)->config(), seed, (*m)->params()).ok());
  return std::move(*m);
}

std::vector<float> Flatten(const Arena& arena) {
  std::vector<float> out;
  for (int i = 0; i < arena.size(); ++i) {
    const Tensor t = arena.Get(i);
    out.insert(out.end(), t.data_as<float>(), t.data_as<float>() + t.numel());
  }
  return out;
}

double RelativeDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(a[i]) * a[i];
  }
  return std::sqrt(diff / norm);
}

TEST(Gpt, TensorNamesAndShapesFollowDesign) {
  auto m = TinyModel(1, false);
  const Arena& p = m->params();
  EXPECT_EQ(p.name(0), "wte");
  EXPECT_EQ(p.name(1), "wpe");
  EXPECT_EQ(p.name(2), "h.0.ln_1.weight");
  EXPECT_EQ(p.name(4), "h.0.attn.c_attn.weight");
  EXPECT_EQ(p.Get(4).shape(), (Shape{192, 64}));
  EXPECT_EQ(p.name(12), "h.0.mlp.c_proj.weight");
  EXPECT_EQ(p.Get(12).shape(), (Shape{64, 256}));
  EXPECT_EQ(p.name(p.size() - 1), "ln_f.bias");
  // V·C + T·C + L·(12C² + 13C) + 2C
  const int64_t C = 64;
  EXPECT_EQ(m->num_params(), 256 * C + 32 * C + 2 * (12 * C * C + 13 * C) + 2 * C);
}

TEST(Gpt, InitialLossIsNearLog256) {
  auto m = TinyModel(4, false);
  auto tokens = RandomTokens(4 * 32, 256, 3), targets = RandomTokens(4 * 32, 256, 4);
  auto loss = m->Forward(tokens, targets, 4, 32, 0.0f);
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  EXPECT_NEAR(*loss, std::log(256.0), 0.1);
}

TEST(Gpt, RejectsTokensOutsideTheVocabulary) {
  auto m = TinyModel(1, false);
  std::vector<int32_t> tokens = {1, 2, 300};
  auto r = m->Forward(tokens, {}, 1, 3, 0.0f);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("300"), std::string::npos);
  EXPECT_FALSE(m->Forward(std::vector<int32_t>(33, 1), {}, 1, 33, 0.0f).ok());
}

// Loss and gradient of the model on a fixed batch.
struct LossGrad {
  double loss;
  std::vector<float> grad;
};
LossGrad Evaluate(Gpt& m, const std::vector<int32_t>& x, const std::vector<int32_t>& y, int B,
                  int T) {
  RT_CHECK(m.ZeroGrads().ok());
  auto loss = m.Forward(x, y, B, T, 1.0f / (B * T));
  RT_CHECK(loss.ok());
  RT_CHECK(m.Backward().ok());
  return {*loss, Flatten(m.grads())};
}

TEST(Gpt, GradientMatchesFiniteDifferences) {
  const int B = 2, T = 16;
  auto m = TinyModel(B, false, 7);
  auto x = RandomTokens(B * T, 256, 11), y = RandomTokens(B * T, 256, 12);
  const LossGrad base = Evaluate(*m, x, y, B, T);
  const auto loss_at = [&]() {
    auto l = m->Forward(x, y, B, T, 0.0f);
    RT_CHECK(l.ok());
    return *l;
  };
  // For every tensor, the directional derivative along a direction d must match the central
  // difference (L(θ+hd) − L(θ−hd)) / 2h, for d = the tensor's own gradient (normalised) and for
  // a random d (every parameter enters it).
  Rng rng(5);
  size_t offset = 0;
  for (int i = 0; i < m->params().size(); ++i) {
    const Tensor p = m->params().Get(i);
    float* w = p.data_as<float>();
    const int64_t n = p.numel();
    const std::vector<float> saved(w, w + n);
    for (bool random : {false, true}) {
      std::vector<float> d(n);
      double dnorm = 0, analytic = 0;
      for (int64_t k = 0; k < n; ++k) {
        d[k] = random ? static_cast<float>(rng.Normal()) : base.grad[offset + k];
        dnorm += double(d[k]) * d[k];
      }
      dnorm = std::sqrt(dnorm);
      for (int64_t k = 0; k < n; ++k) {
        d[k] /= static_cast<float>(dnorm);
        analytic += double(d[k]) * base.grad[offset + k];
      }
      const double h = 1e-2;
      for (int64_t k = 0; k < n; ++k) w[k] = saved[k] + static_cast<float>(h) * d[k];
      const double plus = loss_at();
      for (int64_t k = 0; k < n; ++k) w[k] = saved[k] - static_cast<float>(h) * d[k];
      const double minus = loss_at();
      std::copy(saved.begin(), saved.end(), w);
      const double numeric = (plus - minus) / (2 * h);
      // fp32 rounding of the loss over 2h, plus 1% for the O(h²) truncation.
      EXPECT_NEAR(numeric, analytic, 2e-5 + 0.01 * std::abs(analytic))
          << m->params().name(i) << (random ? " (random direction)" : " (gradient direction)");
    }
    offset += static_cast<size_t>(n);
  }
}

TEST(Gpt, FourMicroBatchesEqualOneBatch) {
  const int B = 8, T = 32;
  auto x = RandomTokens(B * T, 256, 21), y = RandomTokens(B * T, 256, 22);
  auto full = TinyModel(B, false, 9);
  const LossGrad one = Evaluate(*full, x, y, B, T);
  auto micro = TinyModel(B / 4, false, 9);
  ASSERT_TRUE(micro->ZeroGrads().ok());
  double loss = 0;
  const size_t chunk = (B / 4) * T;
  for (int k = 0; k < 4; ++k) {
    auto l = micro->Forward(std::span(x).subspan(k * chunk, chunk),
                            std::span(y).subspan(k * chunk, chunk), B / 4, T, 1.0f / (B * T));
    ASSERT_TRUE(l.ok());
    ASSERT_TRUE(micro->Backward().ok());
    loss += *l / 4;
  }
  EXPECT_NEAR(loss, one.loss, 1e-6 * one.loss);
  EXPECT_LT(RelativeDiff(one.grad, Flatten(micro->grads())), 1e-6);
}

TEST(Gpt, RecomputationGivesTheSameGradients) {
  const int B = 4, T = 32;
  auto x = RandomTokens(B * T, 256, 31), y = RandomTokens(B * T, 256, 32);
  auto plain = TinyModel(B, false, 13);
  auto recompute = TinyModel(B, true, 13);
  const LossGrad a = Evaluate(*plain, x, y, B, T);
  const LossGrad b = Evaluate(*recompute, x, y, B, T);
  EXPECT_NEAR(a.loss, b.loss, 1e-6 * a.loss);
  EXPECT_LT(RelativeDiff(a.grad, b.grad), 1e-6);
}

TEST(LearningRate, WarmupAndCosine) {
  OptimConfig c;
  c.lr = 1.0;
  c.min_lr = 0.1;
  c.warmup_steps = 10;
  c.schedule = "cosine";
  EXPECT_DOUBLE_EQ(LearningRate(c, 0, 110), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(c, 9, 110), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(c, 10, 110), 1.0);
  EXPECT_NEAR(LearningRate(c, 60, 110), 0.55, 1e-12);
  EXPECT_NEAR(LearningRate(c, 110, 110), 0.1, 1e-12);
  c.schedule = "constant";
  EXPECT_DOUBLE_EQ(LearningRate(c, 50, 110), 1.0);
}

}  // namespace
}  // namespace rt
