// Every CPU op's forward (and the fused/elementwise ops) against a naive double-precision
// reference, in f32 and, with looser bounds, bf16/f16.
#include "kernels/ops.h"

#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "tests/kernels/reference.h"
#include "tests/kernels/test_util.h"

namespace rt::testing {
namespace {

class FloatOpsTest : public ::testing::TestWithParam<DType> {
 protected:
  DType dt() const { return GetParam(); }
  // Inputs representable in the dtype, so the reference sees exactly the kernel's input.
  Vec Input(int64_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) const {
    return ToVec(FromVec(dt(), Shape{n}, Uniform(n, seed, lo, hi)).t);
  }
  // Tolerance relative to the output scale: f32 rounding, or the output's 8/11-bit mantissa.
  double Tol() const { return dt() == DType::kF32 ? 2e-6 : dt() == DType::kBF16 ? 8e-3 : 1e-3; }
};

INSTANTIATE_TEST_SUITE_P(DTypes, FloatOpsTest,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST_P(FloatOpsTest, GemmAllTransposes) {
  const int64_t m = 7, n = 5, k = 9;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      const Vec a = Input(m * k, 1), b = Input(k * n, 2), c0 = Input(m * n, 3);
      HostTensor ta_t = FromVec(dt(), ta ? Shape{k, m} : Shape{m, k}, a);
      HostTensor tb_t = FromVec(dt(), tb ? Shape{n, k} : Shape{k, n}, b);
      HostTensor tc = FromVec(dt(), Shape{m, n}, c0);
      ASSERT_OK(Gemm(tc.t, ta_t.t, tb_t.t, ta, tb, 1.5f, 0.5f));
      Vec want(m * n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0.0;
          for (int64_t p = 0; p < k; ++p) {
            s += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
          }
          want[i * n + j] = 1.5 * s + 0.5 * c0[i * n + j];
        }
      EXPECT_LT(RelErr(ToVec(tc.t), want), Tol()) << "trans_a " << ta << " trans_b " << tb;
    }
  }
}

TEST_P(FloatOpsTest, GemmFlattensLeadingDimensions) {
  // a [2,3,4] is the matrix [6,4]; c [2,3,5] is [6,5].
  const Vec a = Input(24, 30), b = Input(20, 31);
  HostTensor ta = FromVec(dt(), Shape{2, 3, 4}, a), tb = FromVec(dt(), Shape{4, 5}, b);
  HostTensor tc = Make(dt(), Shape{2, 3, 5});
  ASSERT_OK(Gemm(tc.t, ta.t, tb.t, false, false, 1.0f, 0.0f));
  Vec want(30, 0.0);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5; ++j)
      for (int p = 0; p < 4; ++p) want[i * 5 + j] += a[i * 4 + p] * b[p * 5 + j];
  EXPECT_LT(RelErr(ToVec(tc.t), want), Tol());
}

TEST_P(FloatOpsTest, MatmulForwardWithAndWithoutBias) {
  const int64_t b = 2, t = 3, ic = 20, oc = 17;
  const Vec x = Input(b * t * ic, 4), w = Input(oc * ic, 5), bias = Input(oc, 6);
  HostTensor tx = FromVec(dt(), Shape{b, t, ic}, x), tw = FromVec(dt(), Shape{oc, ic}, w);
  HostTensor tbias = FromVec(dt(), Shape{oc}, bias);
  HostTensor out = Make(dt(), Shape{b, t, oc});
  ASSERT_OK(MatmulForward(out.t, tx.t, tw.t, tbias.t));
  EXPECT_LT(RelErr(ToVec(out.t), RefMatmul(x, w, bias, b * t, ic, oc)), Tol());
  ASSERT_OK(MatmulForward(out.t, tx.t, tw.t, Tensor()));
  EXPECT_LT(RelErr(ToVec(out.t), RefMatmul(x, w, {}, b * t, ic, oc)), Tol());
}

TEST_P(FloatOpsTest, LayerNormForward) {
  const int64_t n = 6, c = 37;
  const Vec x = Input(n * c, 7, -2.0, 3.0), w = Input(c, 8), bias = Input(c, 9);
  HostTensor tx = FromVec(dt(), Shape{n, c}, x), tw = FromVec(dt(), Shape{c}, w);
  HostTensor tb = FromVec(dt(), Shape{c}, bias), out = Make(dt(), Shape{n, c});
  HostTensor mean = Make(DType::kF32, Shape{n}), rstd = Make(DType::kF32, Shape{n});
  ASSERT_OK(LayerNormForward(out.t, mean.t, rstd.t, tx.t, tw.t, tb.t));
  Vec want_mean, want_rstd;
  const Vec want = RefLayerNorm(x, w, bias, n, c, &want_mean, &want_rstd);
  EXPECT_LT(RelErr(ToVec(out.t), want), Tol() * 2);
  EXPECT_LT(RelErr(ToVec(mean.t), want_mean), 1e-5);
  EXPECT_LT(RelErr(ToVec(rstd.t), want_rstd), 1e-5);
}

TEST_P(FloatOpsTest, GeluForward) {
  const int64_t n = 1000;
  const Vec x = Input(n, 10, -6.0, 6.0);
  HostTensor tx = FromVec(dt(), Shape{10, 100}, x), out = Make(dt(), Shape{10, 100});
  ASSERT_OK(GeluForward(out.t, tx.t));
  const Vec got = ToVec(out.t), want = RefGeluVec(x);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(got[i], want[i], Tol() * (std::fabs(want[i]) + 1e-3) + 1e-6) << x[i];
  }
}

TEST_P(FloatOpsTest, GeluPropagatesNanAndSaturates) {
  HostTensor x = FromVec(dt(), Shape{4}, {NAN, INFINITY, -INFINITY, 20.0});
  HostTensor y = Make(dt(), Shape{4});
  ASSERT_OK(GeluForward(y.t, x.t));
  EXPECT_TRUE(std::isnan(Get(y.t, 0)));
  EXPECT_TRUE(std::isnan(Get(y.t, 1)) || Get(y.t, 1) == INFINITY);  // inf·(1+1) or inf·0
  EXPECT_EQ(Get(y.t, 3), 20.0);
}

// Forward of B×T tokens, C channels, nh heads against the double reference.
void CheckAttentionForward(DType dt, double tol, int64_t b, int64_t t, int64_t c, int64_t nh) {
  SCOPED_TRACE("B=" + std::to_string(b) + " T=" + std::to_string(t) + " C=" + std::to_string(c) +
               " H=" + std::to_string(nh));
  const int64_t n = b * t * 3 * c;
  const Vec qkv = ToVec(FromVec(dt, Shape{n}, Uniform(n, 11, -2.0, 2.0)).t);
  HostTensor tq = FromVec(dt, Shape{b, t, 3 * c}, qkv), out = Make(dt, Shape{b, t, c});
  HostTensor att = Make(DType::kF32, Shape{b, nh, t, t});
  ASSERT_OK(AttentionForward(out.t, att.t, tq.t, static_cast<int>(nh)));
  Vec want_att;
  const Vec want = RefAttention(qkv, b, t, c, nh, &want_att);
  EXPECT_LT(RelErr(ToVec(out.t), want), tol * 4);
  EXPECT_LT(RelErr(ToVec(att.t), want_att), 1e-5);
  // Above the diagonal the probabilities are exactly 0; rows sum to 1.
  const Vec a = ToVec(att.t);
  for (int64_t r = 0; r < b * nh; ++r)
    for (int64_t i = 0; i < t; ++i) {
      double s = 0.0;
      for (int64_t j = 0; j < t; ++j) {
        const double p = a[(r * t + i) * t + j];
        if (j > i) {
          ASSERT_EQ(p, 0.0);
        }
        s += p;
      }
      ASSERT_NEAR(s, 1.0, 1e-5);
    }
}

TEST_P(FloatOpsTest, AttentionForward) {
  // The CPU's sgemm path (head sizes 4 and 3; T > its 64-row block) and its register tiles (head
  // sizes 16, 32, 48 and 64; T not a multiple of the 4-row tiles or 16-column steps).
  CheckAttentionForward(dt(), Tol(), 2, 70, 12, 3);
  CheckAttentionForward(dt(), Tol(), 1, 5, 3, 1);
  CheckAttentionForward(dt(), Tol(), 2, 37, 32, 2);
  CheckAttentionForward(dt(), Tol(), 1, 70, 64, 2);
  CheckAttentionForward(dt(), Tol(), 1, 19, 96, 2);
  CheckAttentionForward(dt(), Tol(), 1, 3, 64, 1);
}

TEST(AttentionTest, SoftmaxIsStableForHugeScores) {
  // Scores of ±1e4 would overflow a naive exp; the row max is subtracted first.
  const int64_t b = 1, t = 4, c = 2, nh = 1;
  Vec qkv(b * t * 3 * c, 0.0);
  for (int64_t i = 0; i < t; ++i) {
    qkv[i * 6 + 0] = 100.0;                   // q
    qkv[i * 6 + 2] = 100.0 * (i + 1);         // k: later keys score higher
    qkv[i * 6 + 4] = static_cast<double>(i);  // v
  }
  HostTensor tq = FromVec(DType::kF32, Shape{b, t, 3 * c}, qkv);
  HostTensor out = Make(DType::kF32, Shape{b, t, c}), att = Make(DType::kF32, Shape{b, nh, t, t});
  ASSERT_OK(AttentionForward(out.t, att.t, tq.t, 1));
  for (int64_t i = 0; i < t; ++i) {
    EXPECT_NEAR(Get(out.t, i * c), static_cast<double>(i), 1e-6);  // attends to the last key
    EXPECT_NEAR(Get(att.t, i * t + i), 1.0, 1e-6);
  }
}

TEST(AttentionTest, TiledSoftmaxIsStableForHugeScores) {
  // As above through the CPU's register tiles (head size 16): scores of 400·(j+1).
  const int64_t t = 21, c = 16;
  Vec qkv(t * 3 * c, 0.0);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t d = 0; d < c; ++d) {
      qkv[i * 3 * c + d] = 10.0;                                   // q
      qkv[i * 3 * c + c + d] = 10.0 * static_cast<double>(i + 1);  // k: later keys score higher
      qkv[i * 3 * c + 2 * c + d] = static_cast<double>(i);         // v
    }
  }
  HostTensor tq = FromVec(DType::kF32, Shape{1, t, 3 * c}, qkv);
  HostTensor out = Make(DType::kF32, Shape{1, t, c}), att = Make(DType::kF32, Shape{1, 1, t, t});
  ASSERT_OK(AttentionForward(out.t, att.t, tq.t, 1));
  for (int64_t i = 0; i < t; ++i) {
    EXPECT_NEAR(Get(out.t, i * c + 5), static_cast<double>(i), 1e-5);  // attends to the last key
    EXPECT_NEAR(Get(att.t, i * t + i), 1.0, 1e-6);
  }
}

TEST_P(FloatOpsTest, EmbeddingsWithVocabRange) {
  const int64_t b = 2, t = 3, c = 5, v_local = 4, vocab_start = 10;
  const Vec wte = Input(v_local * c, 12), wpe = Input(8 * c, 13);
  HostTensor twte = FromVec(dt(), Shape{v_local, c}, wte), twpe = FromVec(dt(), Shape{8, c}, wpe);
  const std::vector<double> tok = {10, 13, 9, 14, 11, 12};  // 9 and 14 are outside the range
  HostTensor ttok = FromVec(DType::kI32, Shape{b, t}, tok);
  HostTensor out = Make(dt(), Shape{b, t, c});
  ASSERT_OK(EmbeddingForward(out.t, ttok.t, twte.t, vocab_start));
  ASSERT_OK(PositionEmbeddingAdd(out.t, twpe.t, 2));
  const Vec got = ToVec(out.t);
  for (int64_t i = 0; i < b * t; ++i) {
    const int64_t row = static_cast<int64_t>(tok[i]) - vocab_start;
    for (int64_t k = 0; k < c; ++k) {
      const double e = (row >= 0 && row < v_local) ? wte[row * c + k] : 0.0;
      const double want = e + wpe[(2 + i % t) * c + k];
      EXPECT_NEAR(got[i * c + k], want, Tol() * 2 * (std::fabs(want) + 1e-3)) << i << "," << k;
    }
  }
}

TEST_P(FloatOpsTest, SoftmaxCrossEntropyLossAndGradient) {
  const int64_t n = 5, v = 33;
  const Vec logits = Input(n * v, 14, -5.0, 5.0);
  const std::vector<int32_t> tg = {0, 32, 7, 7, 19};
  HostTensor tl = FromVec(dt(), Shape{n, v}, logits), losses = Make(DType::kF32, Shape{n});
  HostTensor ttg = FromVec(DType::kI32, Shape{n}, Vec(tg.begin(), tg.end()));
  HostTensor dl = Make(dt(), Shape{n, v});
  const float dloss = 1.0f / n;
  ASSERT_OK(SoftmaxCrossEntropy(losses.t, dl.t, tl.t, ttg.t, dloss));
  EXPECT_LT(RelErr(ToVec(losses.t), RefCrossEntropy(logits, tg, n, v)), 2e-6);
  // d(Σ loss·dloss)/dlogits by finite differences of the double reference.
  const Vec fd = FiniteDiff(
      [&](const Vec& x) {
        const Vec l = RefCrossEntropy(x, tg, n, v);
        double s = 0.0;
        for (double e : l) s += e * dloss;
        return s;
      },
      logits, 1e-5);
  EXPECT_LT(RelErr(ToVec(dl.t), fd), dt() == DType::kF32 ? 1e-5 : Tol() * 2);
  // In place: dlogits aliasing logits gives the same gradient; without dlogits only losses.
  ASSERT_OK(SoftmaxCrossEntropy(losses.t, tl.t, tl.t, ttg.t, dloss));
  EXPECT_EQ(ToVec(tl.t), ToVec(dl.t));
  HostTensor tl2 = FromVec(dt(), Shape{n, v}, logits);
  ASSERT_OK(SoftmaxCrossEntropy(losses.t, Tensor(), tl2.t, ttg.t, dloss));
  EXPECT_LT(RelErr(ToVec(losses.t), RefCrossEntropy(logits, tg, n, v)), 2e-6);
  EXPECT_EQ(ToVec(tl2.t), logits);
}

TEST(CrossEntropyTest, OutOfRangeTargetIsInvalidArgument) {
  HostTensor logits = Make(DType::kF32, Shape{2, 4}), losses = Make(DType::kF32, Shape{2});
  HostTensor tg = FromVec(DType::kI32, Shape{2}, {1, 4});
  const Status s = SoftmaxCrossEntropy(losses.t, Tensor(), logits.t, tg.t, 1.0f);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.ToString().find("targets[1] = 4"), std::string::npos) << s.ToString();
  HostTensor neg = FromVec(DType::kI32, Shape{2}, {-1, 0});
  EXPECT_EQ(SoftmaxCrossEntropy(losses.t, Tensor(), logits.t, neg.t, 1.0f).code(),
            StatusCode::kInvalidArgument);
}

TEST(CrossEntropyTest, ExtremeLogitsStayFinite) {
  HostTensor logits = FromVec(DType::kF32, Shape{1, 3}, {1e4, -1e4, 0.0});
  HostTensor losses = Make(DType::kF32, Shape{1}), dl = Make(DType::kF32, Shape{1, 3});
  HostTensor tg = FromVec(DType::kI32, Shape{1}, {2});
  ASSERT_OK(SoftmaxCrossEntropy(losses.t, dl.t, logits.t, tg.t, 1.0f));
  EXPECT_NEAR(Get(losses.t, 0), 1e4, 1e-2);
  EXPECT_NEAR(Get(dl.t, 0), 1.0, 1e-6);
  EXPECT_NEAR(Get(dl.t, 2), -1.0, 1e-6);
}

TEST_P(FloatOpsTest, ElementwiseAddAccumulateScaleZero) {
  const int64_t n = 103;
  const Vec a = Input(n, 15), b = Input(n, 16);
  HostTensor ta = FromVec(dt(), Shape{n}, a), tb = FromVec(dt(), Shape{n}, b);
  HostTensor out = Make(dt(), Shape{n});
  ASSERT_OK(Add(out.t, ta.t, tb.t));
  Vec want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
  EXPECT_LT(RelErr(ToVec(out.t), want), Tol());
  ASSERT_OK(Add(ta.t, ta.t, tb.t));  // out aliases a
  EXPECT_EQ(ToVec(ta.t), ToVec(out.t));
  ASSERT_OK(Accumulate(out.t, tb.t));
  for (int64_t i = 0; i < n; ++i) want[i] += b[i];
  EXPECT_LT(RelErr(ToVec(out.t), want), 2 * Tol());
  ASSERT_OK(Scale(out.t, -0.5f));
  for (double& w : want) w *= -0.5;
  EXPECT_LT(RelErr(ToVec(out.t), want), 3 * Tol());
  ASSERT_OK(Zero(out.t));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(Get(out.t, i), 0.0);
}

TEST_P(FloatOpsTest, SumOfSquaresInDouble) {
  const int64_t n = 1001;
  const Vec a = Input(n, 17, -3.0, 3.0);
  HostTensor ta = FromVec(dt(), Shape{n}, a);
  Result<double> s = SumOfSquares(ta.t);
  ASSERT_OK(s);
  double want = 0.0;
  for (double x : a) want += x * x;
  EXPECT_NEAR(*s, want, 1e-12 * want);
}

TEST(SumOfSquaresTest, ExactBeyondFloatPrecision) {
  // 2^24 ones plus one more: an fp32 running sum would stall at 2^24.
  const int64_t n = (1 << 24) + 1;
  HostTensor t = Make(DType::kF32, Shape{n});
  for (int64_t i = 0; i < n; ++i) t.t.data_as<float>()[i] = 1.0f;
  Result<double> s = SumOfSquares(t.t);
  ASSERT_OK(s);
  EXPECT_EQ(*s, static_cast<double>(n));
}

TEST(EmptyTensorTest, OpsOnZeroRowsSucceedAndTouchNothing) {
  HostTensor x = Make(DType::kF32, Shape{0, 8}), w = Make(DType::kF32, Shape{4, 8});
  HostTensor b = Make(DType::kF32, Shape{4}), y = Make(DType::kF32, Shape{0, 4});
  HostTensor dw = Make(DType::kF32, Shape{4, 8}), db = Make(DType::kF32, Shape{4});
  ASSERT_OK(MatmulForward(y.t, x.t, w.t, b.t));
  ASSERT_OK(MatmulBackward(x.t, dw.t, db.t, y.t, x.t, w.t));
  EXPECT_EQ(ToVec(dw.t), Vec(32, 0.0));
  HostTensor lw = Make(DType::kF32, Shape{8}), mean = Make(DType::kF32, Shape{0});
  ASSERT_OK(LayerNormForward(x.t, mean.t, mean.t, x.t, lw.t, lw.t));
  ASSERT_OK(LayerNormBackward(x.t, lw.t, lw.t, x.t, x.t, lw.t, mean.t, mean.t));
  ASSERT_OK(GeluForward(x.t, x.t));
  HostTensor qkv = Make(DType::kF32, Shape{0, 4, 24}), out = Make(DType::kF32, Shape{0, 4, 8});
  HostTensor att = Make(DType::kF32, Shape{0, 2, 4, 4});
  ASSERT_OK(AttentionForward(out.t, att.t, qkv.t, 2));
  ASSERT_OK(AttentionBackward(qkv.t, out.t, qkv.t, att.t, 2));
  HostTensor logits = Make(DType::kF32, Shape{0, 5}), losses = Make(DType::kF32, Shape{0});
  HostTensor tg = Make(DType::kI32, Shape{0});
  ASSERT_OK(SoftmaxCrossEntropy(losses.t, logits.t, logits.t, tg.t, 1.0f));
  Result<double> s = SumOfSquares(x.t);
  ASSERT_OK(s);
  EXPECT_EQ(*s, 0.0);
}

TEST(AdamWTest, StepsMatchDoubleReference) {
  const int64_t n = 37;
  const Vec p0 = Uniform(n, 20), g = Uniform(n, 21);
  HostTensor p = FromVec(DType::kF32, Shape{n}, p0), tg = FromVec(DType::kF32, Shape{n}, g);
  HostTensor m = Make(DType::kF32, Shape{n}), v = Make(DType::kF32, Shape{n});
  HostTensor copy = Make(DType::kBF16, Shape{n});
  AdamWParams hp;
  hp.lr = 1e-2f;
  hp.weight_decay = 0.1f;
  hp.grad_scale = 0.5f;
  Vec rp = RoundF32(p0), rm(n, 0.0), rv(n, 0.0);
  for (int step = 1; step <= 3; ++step) {
    hp.step = step;
    ASSERT_OK(AdamW(p.t, tg.t, m.t, v.t, copy.t, hp));
    const double b1 = hp.beta1, b2 = hp.beta2;
    const double bc1 = 1.0 - std::pow(b1, step), bc2 = 1.0 - std::pow(b2, step);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = static_cast<float>(g[i]) * 0.5;
      rm[i] = b1 * rm[i] + (1.0 - b1) * gi;
      rv[i] = b2 * rv[i] + (1.0 - b2) * gi * gi;
      rp[i] -= static_cast<double>(hp.lr) * ((rm[i] / bc1) / (std::sqrt(rv[i] / bc2) + hp.eps) +
                                             static_cast<double>(hp.weight_decay) * rp[i]);
    }
  }
  EXPECT_LT(RelErr(ToVec(p.t), rp), 1e-6);
  EXPECT_LT(RelErr(ToVec(m.t), rm), 1e-6);
  EXPECT_LT(RelErr(ToVec(v.t), rv), 1e-5);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(copy.t.data_as<uint16_t>()[i], Bf16FromFloat(p.t.data_as<float>()[i]));
  }
}

TEST(AdamWTest, Bf16GradientAndHalfCopy) {
  const int64_t n = 16;
  const Vec g = Uniform(n, 22);
  HostTensor p = FromVec(DType::kF32, Shape{n}, Vec(n, 1.0));
  HostTensor g32 = FromVec(DType::kF32, Shape{n}, ToVec(FromVec(DType::kBF16, Shape{n}, g).t));
  HostTensor g16 = FromVec(DType::kBF16, Shape{n}, g);
  HostTensor p2 = FromVec(DType::kF32, Shape{n}, Vec(n, 1.0));
  HostTensor m1 = Make(DType::kF32, Shape{n}), v1 = Make(DType::kF32, Shape{n});
  HostTensor m2 = Make(DType::kF32, Shape{n}), v2 = Make(DType::kF32, Shape{n});
  HostTensor copy = Make(DType::kF16, Shape{n});
  AdamWParams hp;
  ASSERT_OK(AdamW(p.t, g32.t, m1.t, v1.t, Tensor(), hp));
  ASSERT_OK(AdamW(p2.t, g16.t, m2.t, v2.t, copy.t, hp));
  EXPECT_EQ(ToVec(p.t), ToVec(p2.t));
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(copy.t.data_as<uint16_t>()[i], HalfFromFloat(p2.t.data_as<float>()[i]));
  }
}

TEST(ConvertTest, RoundsLikeElementMathAndCopies) {
  const Vec x = {1.0, 1.00390625, 1.01171875, -0.0, 65520.0, 1e-8, NAN, INFINITY};
  HostTensor src = FromVec(DType::kF32, Shape{8}, x);
  HostTensor bf = Make(DType::kBF16, Shape{2, 4}), hf = Make(DType::kF16, Shape{8});
  ASSERT_OK(Convert(bf.t, src.t));
  ASSERT_OK(Convert(hf.t, src.t));
  for (int i = 0; i < 8; ++i) {
    const float f = static_cast<float>(x[i]);
    EXPECT_EQ(bf.t.data_as<uint16_t>()[i], Bf16FromFloat(f)) << i;
    EXPECT_EQ(hf.t.data_as<uint16_t>()[i], HalfFromFloat(f)) << i;
  }
  HostTensor back = Make(DType::kF32, Shape{8}), bf2 = Make(DType::kBF16, Shape{8});
  ASSERT_OK(Convert(back.t, hf.t));
  for (int i = 0; i < 8; ++i) {
    const float want = FloatFromHalf(hf.t.data_as<uint16_t>()[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(back.t.data_as<float>()[i]));
    } else {
      EXPECT_EQ(back.t.data_as<float>()[i], want);
    }
  }
  ASSERT_OK(Convert(bf2.t, hf.t));  // f16 → bf16 through fp32
  EXPECT_EQ(bf2.t.data_as<uint16_t>()[0], 0x3F80);
  HostTensor cp = Make(DType::kBF16, Shape{8});
  ASSERT_OK(Copy(cp.t, bf.t));
  EXPECT_EQ(std::memcmp(cp.t.data(), bf.t.data(), 16), 0);
}

}  // namespace
}  // namespace rt::testing
