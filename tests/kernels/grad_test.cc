// Every backward op against central finite differences of the double-precision reference
// forward (relative error ≤ 1e-3 of the gradient's scale), its accumulation (+=) semantics,
// and the bf16/f16 backward against the f32 one.
#include <algorithm>
#include <cmath>
#include <functional>

#include <gtest/gtest.h>

#include "kernels/ops.h"
#include "tests/kernels/reference.h"
#include "tests/kernels/test_util.h"

namespace rt::testing {
namespace {

constexpr double kFdTol = 1e-3;

// d(Σ f(x)·r)/dx by finite differences.
Vec FdOf(const std::function<Vec(const Vec&)>& f, const Vec& x, const Vec& r) {
  return FiniteDiff([&](const Vec& xx) { return Dot(f(xx), r); }, x);
}

// g + base, elementwise.
Vec Plus(const Vec& g, const Vec& base) {
  Vec s(g.size());
  for (size_t i = 0; i < g.size(); ++i) s[i] = g[i] + base[i];
  return s;
}

TEST(GradTest, MatmulBackward) {
  const int64_t n = 6, ic = 11, oc = 7;
  const Vec x = RoundF32(Uniform(n * ic, 1)), w = RoundF32(Uniform(oc * ic, 2));
  const Vec b = RoundF32(Uniform(oc, 3)), r = RoundF32(Uniform(n * oc, 4));
  // Gradients start non-zero to check that they accumulate.
  const Vec gx0 = RoundF32(Uniform(n * ic, 5)), gw0 = RoundF32(Uniform(oc * ic, 6));
  const Vec gb0 = RoundF32(Uniform(oc, 7));
  HostTensor tx = FromVec(DType::kF32, Shape{2, 3, ic}, x),
             tw = FromVec(DType::kF32, Shape{oc, ic}, w);
  HostTensor dout = FromVec(DType::kF32, Shape{2, 3, oc}, r);
  HostTensor dx = FromVec(DType::kF32, Shape{2, 3, ic}, gx0),
             dw = FromVec(DType::kF32, Shape{oc, ic}, gw0);
  HostTensor db = FromVec(DType::kF32, Shape{oc}, gb0);
  ASSERT_OK(MatmulBackward(dx.t, dw.t, db.t, dout.t, tx.t, tw.t));
  const Vec fdx = FdOf([&](const Vec& v) { return RefMatmul(v, w, b, n, ic, oc); }, x, r);
  const Vec fdw = FdOf([&](const Vec& v) { return RefMatmul(x, v, b, n, ic, oc); }, w, r);
  const Vec fdb = FdOf([&](const Vec& v) { return RefMatmul(x, w, v, n, ic, oc); }, b, r);
  EXPECT_LT(RelErr(ToVec(dx.t), Plus(fdx, gx0)), kFdTol);
  EXPECT_LT(RelErr(ToVec(dw.t), Plus(fdw, gw0)), kFdTol);
  EXPECT_LT(RelErr(ToVec(db.t), Plus(fdb, gb0)), kFdTol);
  // Optional outputs: only dweight.
  HostTensor dw2 = Make(DType::kF32, Shape{oc, ic});
  ASSERT_OK(MatmulBackward(Tensor(), dw2.t, Tensor(), dout.t, tx.t, tw.t));
  EXPECT_LT(RelErr(ToVec(dw2.t), fdw), kFdTol);
}

TEST(GradTest, LayerNormBackward) {
  const int64_t n = 5, c = 19;
  const Vec x = RoundF32(Uniform(n * c, 10, -2.0, 2.0)), w = RoundF32(Uniform(c, 11, 0.5, 1.5));
  const Vec b = RoundF32(Uniform(c, 12)), r = RoundF32(Uniform(n * c, 13));
  const Vec gx0 = RoundF32(Uniform(n * c, 14)), gw0 = RoundF32(Uniform(c, 15));
  const Vec gb0 = RoundF32(Uniform(c, 16));
  HostTensor tx = FromVec(DType::kF32, Shape{n, c}, x), tw = FromVec(DType::kF32, Shape{c}, w);
  HostTensor tb = FromVec(DType::kF32, Shape{c}, b), out = Make(DType::kF32, Shape{n, c});
  HostTensor mean = Make(DType::kF32, Shape{n}), rstd = Make(DType::kF32, Shape{n});
  ASSERT_OK(LayerNormForward(out.t, mean.t, rstd.t, tx.t, tw.t, tb.t));
  HostTensor dout = FromVec(DType::kF32, Shape{n, c}, r);
  HostTensor dx = FromVec(DType::kF32, Shape{n, c}, gx0), dw = FromVec(DType::kF32, Shape{c}, gw0);
  HostTensor db = FromVec(DType::kF32, Shape{c}, gb0);
  ASSERT_OK(LayerNormBackward(dx.t, dw.t, db.t, dout.t, tx.t, tw.t, mean.t, rstd.t));
  const Vec fdx = FdOf([&](const Vec& v) { return RefLayerNorm(v, w, b, n, c); }, x, r);
  const Vec fdw = FdOf([&](const Vec& v) { return RefLayerNorm(x, v, b, n, c); }, w, r);
  const Vec fdb = FdOf([&](const Vec& v) { return RefLayerNorm(x, w, v, n, c); }, b, r);
  EXPECT_LT(RelErr(ToVec(dx.t), Plus(fdx, gx0)), kFdTol);
  EXPECT_LT(RelErr(ToVec(dw.t), Plus(fdw, gw0)), kFdTol);
  EXPECT_LT(RelErr(ToVec(db.t), Plus(fdb, gb0)), kFdTol);
  // The input gradient alone, from zero, against finite differences (no accumulation offset
  // to hide a small error behind).
  HostTensor dx2 = Make(DType::kF32, Shape{n, c}), dw2 = Make(DType::kF32, Shape{c});
  HostTensor db2 = Make(DType::kF32, Shape{c});
  ASSERT_OK(LayerNormBackward(dx2.t, dw2.t, db2.t, dout.t, tx.t, tw.t, mean.t, rstd.t));
  EXPECT_LT(RelErr(ToVec(dx2.t), fdx), kFdTol);
  ASSERT_OK(LayerNormBackward(Tensor(), dw2.t, db2.t, dout.t, tx.t, tw.t, mean.t, rstd.t));
  EXPECT_LT(RelErr(ToVec(dw2.t), Plus(fdw, fdw)), kFdTol);
}

TEST(GradTest, GeluBackward) {
  const int64_t n = 300;
  const Vec x = RoundF32(Uniform(n, 20, -5.0, 5.0)), r = RoundF32(Uniform(n, 21));
  const Vec g0 = RoundF32(Uniform(n, 22));
  HostTensor tx = FromVec(DType::kF32, Shape{n}, x), dout = FromVec(DType::kF32, Shape{n}, r);
  HostTensor dx = FromVec(DType::kF32, Shape{n}, g0);
  ASSERT_OK(GeluBackward(dx.t, tx.t, dout.t));
  // Elementwise: FD per element (the Jacobian is diagonal).
  Vec fd(n);
  for (int64_t i = 0; i < n; ++i) {
    const double h = 1e-5;
    fd[i] = (RefGelu(x[i] + h) - RefGelu(x[i] - h)) / (2 * h) * r[i];
  }
  Vec got = ToVec(dx.t);
  for (int64_t i = 0; i < n; ++i) got[i] -= g0[i];
  EXPECT_LT(RelErr(got, fd), kFdTol);
  // Per element too, relative to each value (with a floor: for x < −4 the gradient is ~1e-6 and
  // 1 + tanh cancels in fp32).
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(got[i], fd[i], kFdTol * std::max(std::fabs(fd[i]), 1e-2)) << x[i];
  }
  // Assignment instead of accumulation, in place over dout (f32, bf16, f16): the accumulated
  // gradient above, rounded once to the dtype.
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    HostTensor xt = FromVec(dt, Shape{n}, x), d = FromVec(dt, Shape{n}, r);
    HostTensor acc = FromVec(dt, Shape{n}, Vec(n, 0.0));
    ASSERT_OK(GeluBackward(acc.t, xt.t, d.t));
    ASSERT_OK(GeluBackward(d.t, xt.t, d.t, /*accumulate=*/false));
    EXPECT_EQ(ToVec(d.t), ToVec(acc.t)) << DTypeName(dt);
  }
}

void CheckAttentionGrad(int64_t b, int64_t t, int64_t c, int64_t nh, uint32_t seed) {
  const Vec qkv = RoundF32(Uniform(b * t * 3 * c, seed, -1.5, 1.5));
  const Vec r = RoundF32(Uniform(b * t * c, seed + 1));
  const Vec g0 = RoundF32(Uniform(b * t * 3 * c, seed + 2));
  HostTensor tq = FromVec(DType::kF32, Shape{b, t, 3 * c}, qkv);
  HostTensor out = Make(DType::kF32, Shape{b, t, c}), att = Make(DType::kF32, Shape{b, nh, t, t});
  ASSERT_OK(AttentionForward(out.t, att.t, tq.t, static_cast<int>(nh)));
  HostTensor dout = FromVec(DType::kF32, Shape{b, t, c}, r);
  HostTensor dq = FromVec(DType::kF32, Shape{b, t, 3 * c}, g0);
  ASSERT_OK(AttentionBackward(dq.t, dout.t, tq.t, att.t, static_cast<int>(nh)));
  const Vec fd = FdOf([&](const Vec& v) { return RefAttention(v, b, t, c, nh); }, qkv, r);
  Vec got = ToVec(dq.t);
  for (size_t i = 0; i < got.size(); ++i) got[i] -= g0[i];
  EXPECT_LT(RelErr(got, fd), kFdTol) << "B=" << b << " T=" << t << " C=" << c << " H=" << nh;
  // Assignment instead of accumulation (f32, bf16, f16), over a dqkv full of other values: the
  // gradient accumulated from zero, exactly.
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    HostTensor x = FromVec(dt, Shape{b, t, 3 * c}, qkv), y = Make(dt, Shape{b, t, c});
    HostTensor a = Make(DType::kF32, Shape{b, nh, t, t}), dy = FromVec(dt, Shape{b, t, c}, r);
    ASSERT_OK(AttentionForward(y.t, a.t, x.t, static_cast<int>(nh)));
    HostTensor acc = Make(dt, Shape{b, t, 3 * c}), set = FromVec(dt, Shape{b, t, 3 * c}, g0);
    ASSERT_OK(AttentionBackward(acc.t, dy.t, x.t, a.t, static_cast<int>(nh)));
    ASSERT_OK(AttentionBackward(set.t, dy.t, x.t, a.t, static_cast<int>(nh), /*accumulate=*/false));
    EXPECT_EQ(ToVec(set.t), ToVec(acc.t)) << DTypeName(dt) << " B=" << b << " T=" << t;
    if (dt == DType::kF32) {
      EXPECT_LT(RelErr(ToVec(set.t), fd), kFdTol);
    }
  }
}

TEST(GradTest, AttentionBackward) { CheckAttentionGrad(2, 6, 8, 2, 30); }

TEST(GradTest, AttentionBackwardAcrossRowBlocks) { CheckAttentionGrad(1, 70, 4, 1, 40); }

TEST(GradTest, AttentionBackwardTiledHeads) {
  // Head sizes 16, 32, 48 and 64 take the CPU's register tiles; T is not a multiple of 4 or 16.
  CheckAttentionGrad(2, 23, 32, 2, 41);
  CheckAttentionGrad(1, 18, 64, 2, 42);
  CheckAttentionGrad(1, 9, 96, 2, 43);
  CheckAttentionGrad(1, 13, 64, 1, 44);
  CheckAttentionGrad(1, 2, 16, 1, 45);
}

TEST(GradTest, EmbeddingBackwards) {
  const int64_t b = 2, t = 4, c = 3, v_local = 5, vocab_start = 2, pos_start = 1;
  const Vec tok = {2, 3, 2, 9, 6, 1, 4, 2};  // 9 and 1 are outside [2, 7)
  const Vec wte = RoundF32(Uniform(v_local * c, 50)), wpe = RoundF32(Uniform(6 * c, 51));
  const Vec r = RoundF32(Uniform(b * t * c, 52));
  const Vec gte0 = RoundF32(Uniform(v_local * c, 53)), gpe0 = RoundF32(Uniform(6 * c, 54));
  auto fwd = [&](const Vec& te, const Vec& pe) {
    Vec out(b * t * c);
    for (int64_t i = 0; i < b * t; ++i)
      for (int64_t k = 0; k < c; ++k) {
        const int64_t row = static_cast<int64_t>(tok[i]) - vocab_start;
        out[i * c + k] =
            ((row >= 0 && row < v_local) ? te[row * c + k] : 0.0) + pe[(pos_start + i % t) * c + k];
      }
    return out;
  };
  HostTensor ttok = FromVec(DType::kI32, Shape{b, t}, tok);
  HostTensor dout = FromVec(DType::kF32, Shape{b, t, c}, r);
  HostTensor dte = FromVec(DType::kF32, Shape{v_local, c}, gte0);
  HostTensor dpe = FromVec(DType::kF32, Shape{6, c}, gpe0);
  ASSERT_OK(EmbeddingBackward(dte.t, dout.t, ttok.t, vocab_start));
  ASSERT_OK(PositionEmbeddingBackward(dpe.t, dout.t, pos_start));
  const Vec fdte = FdOf([&](const Vec& v) { return fwd(v, wpe); }, wte, r);
  const Vec fdpe = FdOf([&](const Vec& v) { return fwd(wte, v); }, wpe, r);
  EXPECT_LT(RelErr(ToVec(dte.t), Plus(fdte, gte0)), kFdTol);
  EXPECT_LT(RelErr(ToVec(dpe.t), Plus(fdpe, gpe0)), kFdTol);
  // Rows of wpe outside [pos_start, pos_start+T) are untouched.
  EXPECT_EQ(Get(dpe.t, 0), static_cast<double>(static_cast<float>(gpe0[0])));
}

// bf16/f16 backward ops equal the f32 ones on the same (rounded) inputs within the storage
// precision.
class LowPrecisionGradTest : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(DTypes, LowPrecisionGradTest, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST_P(LowPrecisionGradTest, MatchesF32Backward) {
  const DType dt = GetParam();
  const double tol = dt == DType::kBF16 ? 2e-2 : 3e-3;
  const int64_t b = 2, t = 5, c = 8, nh = 2;
  auto in = [&](Shape s, uint32_t seed) {
    return ToVec(FromVec(dt, s, Uniform(s.numel(), seed)).t);
  };
  const Vec qkv = in(Shape{b, t, 3 * c}, 60), dout = in(Shape{b, t, c}, 61);
  const Vec w = in(Shape{c, 3 * c}, 62), x = in(Shape{b * t, 3 * c}, 63);
  auto run = [&](DType d) {
    HostTensor tq = FromVec(d, Shape{b, t, 3 * c}, qkv), to = FromVec(d, Shape{b, t, c}, dout);
    HostTensor out = Make(d, Shape{b, t, c}), att = Make(DType::kF32, Shape{b, nh, t, t});
    HostTensor dq = Make(d, Shape{b, t, 3 * c});
    RT_CHECK(AttentionForward(out.t, att.t, tq.t, static_cast<int>(nh)).ok());
    RT_CHECK(AttentionBackward(dq.t, to.t, tq.t, att.t, static_cast<int>(nh)).ok());
    HostTensor tw = FromVec(d, Shape{c, 3 * c}, w), tx = FromVec(d, Shape{b * t, 3 * c}, x);
    HostTensor dx = Make(d, Shape{b * t, 3 * c}), dw = Make(d, Shape{c, 3 * c}),
               db = Make(d, Shape{c});
    RT_CHECK(MatmulBackward(dx.t, dw.t, db.t, to.t, tx.t, tw.t).ok());
    HostTensor ln_out = Make(d, Shape{b * t, 3 * c}), mean = Make(DType::kF32, Shape{b * t});
    HostTensor rstd = Make(DType::kF32, Shape{b * t}),
               lw = FromVec(d, Shape{3 * c}, Vec(3 * c, 1.0));
    HostTensor lb = Make(d, Shape{3 * c}), ldx = Make(d, Shape{b * t, 3 * c});
    HostTensor ldw = Make(d, Shape{3 * c}), ldb = Make(d, Shape{3 * c});
    RT_CHECK(LayerNormForward(ln_out.t, mean.t, rstd.t, tx.t, lw.t, lb.t).ok());
    RT_CHECK(LayerNormBackward(ldx.t, ldw.t, ldb.t, tq.t.Reshape(Shape{b * t, 3 * c}).value(), tx.t,
                               lw.t, mean.t, rstd.t)
                 .ok());
    HostTensor gdx = Make(d, Shape{b * t, 3 * c});
    RT_CHECK(GeluBackward(gdx.t, tx.t, tq.t.Reshape(Shape{b * t, 3 * c}).value()).ok());
    return std::vector<Vec>{ToVec(dq.t),  ToVec(dx.t),  ToVec(dw.t), ToVec(db.t),
                            ToVec(ldx.t), ToVec(ldw.t), ToVec(gdx.t)};
  };
  const std::vector<Vec> ref = run(DType::kF32), got = run(dt);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_LT(RelErr(got[i], ref[i]), tol) << "output " << i;
}

}  // namespace
}  // namespace rt::testing
