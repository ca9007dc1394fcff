// The shared element math of kernels/element.h: bf16/fp16 rounding vectors (ties, NaN,
// infinities, subnormals, overflow), exhaustive round trips, GELU/tanh accuracy, AdamW.
#include "kernels/element.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "kernels/cpu/common.h"

namespace rt {
namespace {

float F(uint32_t bits) { return BitsFloat(bits); }

TEST(Bf16Test, RoundsToNearestEvenIncludingTies) {
  EXPECT_EQ(Bf16FromFloat(1.0f), 0x3F80);
  EXPECT_EQ(Bf16FromFloat(-2.0f), 0xC000);
  EXPECT_EQ(Bf16FromFloat(F(0x3F808000u)), 0x3F80);  // tie, even below
  EXPECT_EQ(Bf16FromFloat(F(0x3F818000u)), 0x3F82);  // tie, even above
  EXPECT_EQ(Bf16FromFloat(F(0x3F808001u)), 0x3F81);  // just above the tie
  EXPECT_EQ(Bf16FromFloat(F(0x3F807FFFu)), 0x3F80);  // just below the tie
  EXPECT_EQ(Bf16FromFloat(F(0xBF818000u)), 0xBF82);  // negative tie
  EXPECT_EQ(Bf16FromFloat(0.0f), 0x0000);
  EXPECT_EQ(Bf16FromFloat(-0.0f), 0x8000);
}

TEST(Bf16Test, InfinitiesNanOverflowSubnormals) {
  EXPECT_EQ(Bf16FromFloat(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(Bf16FromFloat(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(Bf16FromFloat(F(0x7FC00000u)), 0x7FC0);  // quiet NaN
  EXPECT_EQ(Bf16FromFloat(F(0xFFC00000u)), 0xFFC0);  // negative NaN keeps its sign
  EXPECT_EQ(Bf16FromFloat(F(0x7F800001u)), 0x7FC0);  // signalling NaN with a low payload
  EXPECT_EQ(Bf16FromFloat(F(0x7FFFFFFFu)), 0x7FFF);  // NaN does not carry into the sign
  EXPECT_EQ(Bf16FromFloat(F(0x7F7FFFFFu)), 0x7F80);  // FLT_MAX rounds up to +inf
  EXPECT_EQ(Bf16FromFloat(F(0x7F7F7FFFu)), 0x7F7F);  // largest finite below the tie
  EXPECT_EQ(Bf16FromFloat(F(0x00010000u)), 0x0001);  // subnormal, exact
  EXPECT_EQ(Bf16FromFloat(F(0x00008000u)), 0x0000);  // subnormal tie → even (zero)
  EXPECT_EQ(Bf16FromFloat(F(0x00018000u)), 0x0002);  // subnormal tie → even
  EXPECT_EQ(Bf16FromFloat(F(0x807F8000u)), 0x8080);  // largest subnormal rounds to min normal
  EXPECT_TRUE(std::isnan(FloatFromBf16(0x7FC1)));
  EXPECT_EQ(FloatFromBf16(0xFF80), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(FloatFromBf16(0x0001), F(0x00010000u));
}

TEST(Bf16Test, AllValuesRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = FloatFromBf16(static_cast<uint16_t>(h));
    const uint16_t back = Bf16FromFloat(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(FloatFromBf16(back))) << h;
      EXPECT_EQ(back & 0x8000, h & 0x8000) << h;
    } else {
      ASSERT_EQ(back, h);
    }
  }
}

TEST(HalfTest, RoundsToNearestEvenIncludingTies) {
  EXPECT_EQ(HalfFromFloat(1.0f), 0x3C00);
  EXPECT_EQ(HalfFromFloat(-2.0f), 0xC000);
  EXPECT_EQ(HalfFromFloat(0.5f), 0x3800);
  EXPECT_EQ(HalfFromFloat(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie, even below
  EXPECT_EQ(HalfFromFloat(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie, even above
  EXPECT_EQ(HalfFromFloat(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3C01);
  EXPECT_EQ(HalfFromFloat(-0.0f), 0x8000);
  EXPECT_EQ(HalfFromFloat(65504.0f), 0x7BFF);  // largest finite
  EXPECT_EQ(HalfFromFloat(65519.0f), 0x7BFF);  // below the tie with 65536
  EXPECT_EQ(HalfFromFloat(65520.0f), 0x7C00);  // the tie rounds to even: +inf
  EXPECT_EQ(HalfFromFloat(1e6f), 0x7C00);      // overflow
  EXPECT_EQ(HalfFromFloat(-1e6f), 0xFC00);
}

TEST(HalfTest, InfinitiesNanSubnormals) {
  EXPECT_EQ(HalfFromFloat(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(HalfFromFloat(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(HalfFromFloat(F(0x7FC00000u)), 0x7E00);
  EXPECT_EQ(HalfFromFloat(F(0xFFC00000u)), 0xFE00);
  EXPECT_EQ(HalfFromFloat(F(0x7F800001u)) & 0x7E00, 0x7E00);  // signalling → quiet NaN
  EXPECT_EQ(HalfFromFloat(std::ldexp(1.0f, -14)), 0x0400);    // min normal
  EXPECT_EQ(HalfFromFloat(std::ldexp(1.0f, -24)), 0x0001);    // min subnormal
  EXPECT_EQ(HalfFromFloat(std::ldexp(1.0f, -25)), 0x0000);    // tie with zero → even
  EXPECT_EQ(HalfFromFloat(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(HalfFromFloat(1.5f * std::ldexp(1.0f, -24)), 0x0002);                   // tie 1|2 → 2
  EXPECT_EQ(HalfFromFloat(2.5f * std::ldexp(1.0f, -24)), 0x0002);                   // tie 2|3 → 2
  EXPECT_EQ(HalfFromFloat(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)), 0x0400);  // tie → even
  EXPECT_EQ(HalfFromFloat(std::ldexp(1.0f, -30)), 0x0000);                          // underflow
  EXPECT_EQ(HalfFromFloat(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(FloatFromHalf(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(FloatFromHalf(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(FloatFromHalf(0x7BFF), 65504.0f);
  EXPECT_EQ(FloatFromHalf(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(FloatFromHalf(0x7E00)));
}

TEST(HalfTest, AllValuesRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = FloatFromHalf(static_cast<uint16_t>(h));
    const uint16_t back = HalfFromFloat(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(FloatFromHalf(back))) << h;
    } else {
      ASSERT_EQ(back, h) << "half " << h;
    }
  }
}

// For random floats over the whole fp16 range: the result is a nearest representable value
// and, on a tie, the even one.
TEST(HalfTest, RandomFloatsRoundToNearestEven) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> exp_d(-26.0f, 16.5f);
  std::uniform_real_distribution<float> man_d(1.0f, 2.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(man_d(gen), static_cast<int>(std::floor(exp_d(gen))));
    const uint16_t h = HalfFromFloat(x);
    if (h == 0x7C00) {
      EXPECT_GE(x, 65520.0f);
      continue;
    }
    const double v = FloatFromHalf(h);
    const double err = std::fabs(v - x);
    const double up = h < 0x7BFF ? FloatFromHalf(static_cast<uint16_t>(h + 1)) : INFINITY;
    const double down = h > 0 ? FloatFromHalf(static_cast<uint16_t>(h - 1)) : 0.0;
    ASSERT_LE(err, std::fabs(up - x)) << x;
    ASSERT_LE(err, std::fabs(x - down) + (h == 0 ? INFINITY : 0.0)) << x;
    if (err == std::fabs(up - x) || (h > 0 && err == std::fabs(x - down))) {
      ASSERT_EQ(h & 1, 0) << "tie at " << x << " not rounded to even";
    }
  }
}

TEST(ElementTest, TanhRationalIsWithinAFewUlp) {
  double worst = 0.0;
  for (double x = -20.0; x <= 20.0; x += 1.0 / 1024) {
    const double err = std::fabs(TanhRational(static_cast<float>(x)) -
                                 std::tanh(static_cast<double>(static_cast<float>(x))));
    worst = std::max(worst, err);
  }
  EXPECT_LT(worst, 5e-7);
  EXPECT_TRUE(std::isnan(TanhRational(NAN)));
  EXPECT_EQ(TanhRational(INFINITY), TanhRational(100.0f));
}

TEST(ElementTest, GeluAndGradientMatchDoubleReference) {
  const double k = std::sqrt(2.0 / M_PI);
  double worst_f = 0.0, worst_g = 0.0, worst_fast = 0.0, worst_fast_g = 0.0;
  for (double x = -12.0; x <= 12.0; x += 1.0 / 512) {
    const float xf = static_cast<float>(x);
    const double xd = xf;
    const double u = k * (xd + 0.044715 * xd * xd * xd);
    const double t = std::tanh(u);
    const double ref = 0.5 * xd * (1.0 + t);
    const double dref =
        0.5 * (1.0 + t) + 0.5 * xd * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * xd * xd);
    worst_f = std::max(worst_f, std::fabs(GeluTanh(xf) - ref) / (1.0 + std::fabs(xd)));
    worst_g = std::max(worst_g, std::fabs(GeluTanhGrad(xf) - dref));
    worst_fast = std::max(worst_fast, std::fabs(GeluTanhFast(xf) - ref) / (1.0 + std::fabs(xd)));
    worst_fast_g = std::max(worst_fast_g, std::fabs(GeluTanhGradFast(xf) - dref));
  }
  EXPECT_LT(worst_f, 1e-6);
  EXPECT_LT(worst_g, 1e-6);
  EXPECT_LT(worst_fast, 2e-6);
  // Absolute: for x < −4 the gradient is ~1e-6 and 1 + tanh cancels in fp32 (as in GeluTanhGrad).
  EXPECT_LT(worst_fast_g, 1e-5);
  EXPECT_TRUE(std::isnan(GeluTanhFast(NAN)));
}

TEST(ElementTest, ExpFastIsWithinAFewUlp) {
  double worst = 0.0;
  for (double x = -87.0; x <= 88.0; x += 1.0 / 256) {
    const float xf = static_cast<float>(x);
    const double ref = std::exp(static_cast<double>(xf));
    worst = std::max(worst, std::fabs(cpu::ExpFast(xf) - ref) / ref);
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(cpu::ExpFast(-100.0f), 0.0f);
  EXPECT_EQ(cpu::ExpFast(-INFINITY), 0.0f);
  EXPECT_EQ(cpu::ExpFast(100.0f), INFINITY);
  EXPECT_EQ(cpu::ExpFast(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(cpu::ExpFast(NAN)));
}

TEST(ElementTest, AdamWElementMatchesDefinition) {
  float m = 0.1f, v = 0.02f;
  const float p = 0.5f, g = -0.3f, lr = 0.01f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  const int t = 3;
  const double bc1 = 1.0 - std::pow(0.9, t), bc2 = 1.0 - std::pow(0.95, t);
  const double mt = 0.9 * 0.1 + 0.1 * -0.3;
  const double vt = 0.95 * 0.02 + 0.05 * 0.09;
  const double want = 0.5 - 0.01 * ((mt / bc1) / (std::sqrt(vt / bc2) + 1e-8) + 0.1 * 0.5);
  const float got = AdamWElement(p, g, &m, &v, lr, b1, b2, static_cast<float>(bc1),
                                 static_cast<float>(bc2), eps, wd);
  EXPECT_NEAR(m, mt, 1e-7);
  EXPECT_NEAR(v, vt, 1e-8);
  EXPECT_NEAR(got, want, 1e-6);
}

}  // namespace
}  // namespace rt
