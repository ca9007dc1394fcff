// The CUDA backend against the CPU backend on the same inputs, op by op (f32 and bf16). Runs
// only in CUDA builds on a machine with a GPU; skipped otherwise.
#include <cmath>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/ops.h"
#include "tests/kernels/reference.h"
#include "tests/kernels/test_util.h"
#if defined(RINGTRAIN_WITH_CUDA)
#include <fstream>
#include <sstream>

#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/stream.h"
#endif

namespace rt::testing {
namespace {

bool HaveGpu() {
#if defined(RINGTRAIN_WITH_CUDA)
  return CudaDeviceAvailable();
#else
  return false;
#endif
}

#if defined(RINGTRAIN_WITH_CUDA)
// Whether libcublasLt is mapped into this process.
bool CublasLtMapped() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find("libcublasLt") != std::string::npos;
}

// cuBLAS is loaded on first use, not at start (it costs a process ~80 ms and ~210 MB), and the
// loaded entry points work — no GPU needed: cublasLtGetVersion runs on the host.
TEST(CublasApiTest, LoadedOnFirstUseOnly) {
  if (!cuda::CublasLoaded()) {
    EXPECT_FALSE(CublasLtMapped()) << "linked, not loaded on use";
  }
  Result<const cuda::CublasApi*> api = cuda::LoadCublas();
  ASSERT_TRUE(api.ok()) << api.status().ToString();
  EXPECT_TRUE(CublasLtMapped());
  EXPECT_TRUE(cuda::CublasLoaded());
  EXPECT_EQ((*api)->cublasLtGetVersion() / 10000, CUBLAS_VER_MAJOR);
  EXPECT_EQ(&cuda::Cublas(), *api);
  EXPECT_STREQ((*api)->cublasGetStatusString(CUBLAS_STATUS_SUCCESS), "success");
}
#endif

// A tensor on the GPU with a host twin.
struct Twin {
  HostTensor host;
  Buffer dev_buf;
  Tensor dev;
};

Twin MakeTwin(DType dt, Shape s, const std::vector<double>& v) {
  Twin t{FromVec(dt, s, v), Buffer(), Tensor()};
  Result<Buffer> b = Buffer::Allocate(Device::kCuda, t.host.t.nbytes());
  RT_CHECK(b.ok());
  t.dev_buf = std::move(*b);
  t.dev = t.dev_buf.View(dt, s);
  RT_CHECK(Copy(t.dev, t.host.t).ok());
  return t;
}

Vec Back(const Twin& t) {
  HostTensor h = Make(t.dev.dtype(), t.dev.shape());
  RT_CHECK(Copy(h.t, t.dev).ok());
  return ToVec(h.t);
}

class CudaCompareTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
  }
  double Tol() const { return GetParam() == DType::kF32 ? 1e-4 : 2e-2; }
  Twin In(Shape s, uint32_t seed, double lo = -1.0, double hi = 1.0) {
    return MakeTwin(GetParam(), s, Uniform(s.numel(), seed, lo, hi));
  }
  Twin Zeros(Shape s, DType dt) { return MakeTwin(dt, s, Vec(s.numel(), 0.0)); }
  Twin Zeros(Shape s) { return Zeros(s, GetParam()); }
  void ExpectClose(const Twin& t, const char* what, double tol = -1) {
    EXPECT_LT(RelErr(Back(t), ToVec(t.host.t)), tol < 0 ? Tol() : tol) << what;
  }
};

INSTANTIATE_TEST_SUITE_P(DTypes, CudaCompareTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST_P(CudaCompareTest, MatmulAndGemm) {
  const int64_t n = 64, ic = 96, oc = 80;
  Twin x = In(Shape{n, ic}, 1), w = In(Shape{oc, ic}, 2), b = In(Shape{oc}, 3);
  Twin out = Zeros(Shape{n, oc}), dout = In(Shape{n, oc}, 4);
  Twin dx = In(Shape{n, ic}, 5), dw = In(Shape{oc, ic}, 6), db = In(Shape{oc}, 7);
  for (bool dev : {false, true}) {
    auto T = [&](Twin& t) { return dev ? t.dev : t.host.t; };
    ASSERT_OK(MatmulForward(T(out), T(x), T(w), T(b)));
    ASSERT_OK(MatmulBackward(T(dx), T(dw), T(db), T(dout), T(x), T(w)));
  }
  ExpectClose(out, "out");
  ExpectClose(dx, "dinp");
  ExpectClose(dw, "dweight");
  ExpectClose(db, "dbias");
  // A bias view that is not 16-byte aligned (cuBLASLt's bias epilogue is skipped for it).
  Twin b_odd = In(Shape{oc + 1}, 10), out_odd = Zeros(Shape{n, oc});
  for (bool dev : {false, true}) {
    auto T = [&](Twin& t) { return dev ? t.dev : t.host.t; };
    ASSERT_OK(MatmulForward(T(out_odd), T(x), T(w), T(b_odd).Flat(1, oc).value()));
  }
  ExpectClose(out_odd, "out with an unaligned bias");
  Twin a = In(Shape{ic, n}, 8), c = In(Shape{n, oc}, 9);
  for (bool dev : {false, true}) {
    auto T = [&](Twin& t) { return dev ? t.dev : t.host.t; };
    ASSERT_OK(Gemm(T(c), T(a), T(w), true, true, 0.5f, 2.0f));
  }
  ExpectClose(c, "gemm");
}

TEST_P(CudaCompareTest, LayerNormGeluAttention) {
  const int64_t b = 2, t = 40, c = 48, nh = 4;
  Twin x = In(Shape{b, t, c}, 10, -2, 2), w = In(Shape{c}, 11), bias = In(Shape{c}, 12);
  Twin out = Zeros(Shape{b, t, c}), mean = Zeros(Shape{b * t}, DType::kF32);
  Twin rstd = Zeros(Shape{b * t}, DType::kF32), dout = In(Shape{b, t, c}, 13);
  Twin dx = Zeros(Shape{b, t, c}), dw = Zeros(Shape{c}), db = Zeros(Shape{c});
  Twin g = Zeros(Shape{b, t, c}), dg = Zeros(Shape{b, t, c});
  Twin qkv = In(Shape{b, t, 3 * c}, 14, -2, 2), att = Zeros(Shape{b, nh, t, t}, DType::kF32);
  Twin ao = Zeros(Shape{b, t, c}), dqkv = In(Shape{b, t, 3 * c}, 15);
  for (bool dev : {false, true}) {
    auto T = [&](Twin& z) { return dev ? z.dev : z.host.t; };
    ASSERT_OK(LayerNormForward(T(out), T(mean), T(rstd), T(x), T(w), T(bias)));
    ASSERT_OK(LayerNormBackward(T(dx), T(dw), T(db), T(dout), T(x), T(w), T(mean), T(rstd)));
    ASSERT_OK(GeluForward(T(g), T(x)));
    ASSERT_OK(GeluBackward(T(dg), T(x), T(dout)));
    ASSERT_OK(AttentionForward(T(ao), T(att), T(qkv), static_cast<int>(nh)));
    ASSERT_OK(AttentionBackward(T(dqkv), T(dout), T(qkv), T(att), static_cast<int>(nh)));
  }
  ExpectClose(out, "ln out");
  ExpectClose(mean, "mean", 1e-5);
  ExpectClose(rstd, "rstd", 1e-4);
  ExpectClose(dx, "ln dinp");
  ExpectClose(dw, "ln dweight");
  ExpectClose(db, "ln dbias");
  ExpectClose(g, "gelu");
  ExpectClose(dg, "gelu dinp");
  ExpectClose(ao, "attention out");
  ExpectClose(att, "att", 1e-4);
  ExpectClose(dqkv, "dqkv");
}

TEST_P(CudaCompareTest, EmbeddingCrossEntropyElementwiseAdamW) {
  const int64_t b = 2, t = 8, c = 16, v = 50;
  const Vec tok = Uniform(b * t, 20, 0, 49.99);
  Vec toks(tok.size());
  for (size_t i = 0; i < tok.size(); ++i) toks[i] = std::floor(tok[i]);
  Twin tokens = MakeTwin(DType::kI32, Shape{b, t}, toks);
  Twin wte = In(Shape{30, c}, 21), wpe = In(Shape{t + 2, c}, 22), emb = Zeros(Shape{b, t, c});
  Twin dout = In(Shape{b, t, c}, 23), dwte = Zeros(Shape{30, c}), dwpe = Zeros(Shape{t + 2, c});
  Twin logits = In(Shape{b * t, v}, 24, -4, 4), losses = Zeros(Shape{b * t}, DType::kF32);
  Twin dlogits = Zeros(Shape{b * t, v});
  Twin sum = Zeros(Shape{b, t, c}), acc = In(Shape{b, t, c}, 25);
  Twin p = MakeTwin(DType::kF32, Shape{300}, Uniform(300, 26)), gr = In(Shape{300}, 27);
  Twin m = Zeros(Shape{300}, DType::kF32), vv = Zeros(Shape{300}, DType::kF32);
  Twin pc = Zeros(Shape{300}, DType::kBF16), conv = Zeros(Shape{b, t, c}, DType::kF16);
  double ss[2] = {0, 0};
  for (bool dev : {false, true}) {
    auto T = [&](Twin& z) { return dev ? z.dev : z.host.t; };
    ASSERT_OK(EmbeddingForward(T(emb), T(tokens), T(wte), 10));
    ASSERT_OK(PositionEmbeddingAdd(T(emb), T(wpe), 2));
    ASSERT_OK(EmbeddingBackward(T(dwte), T(dout), T(tokens), 10));
    ASSERT_OK(PositionEmbeddingBackward(T(dwpe), T(dout), 1));
    ASSERT_OK(SoftmaxCrossEntropy(T(losses), T(dlogits), T(logits), T(tokens), 0.25f));
    ASSERT_OK(Add(T(sum), T(emb), T(dout)));
    ASSERT_OK(Accumulate(T(acc), T(sum)));
    ASSERT_OK(Scale(T(acc), 0.75f));
    AdamWParams hp;
    hp.weight_decay = 0.1f;
    hp.step = 2;
    ASSERT_OK(AdamW(T(p), T(gr), T(m), T(vv), T(pc), hp));
    ASSERT_OK(Convert(T(conv), T(acc)));
    Result<double> s = SumOfSquares(T(acc));
    ASSERT_OK(s);
    ss[dev] = *s;
  }
  ExpectClose(emb, "embedding");
  ExpectClose(dwte, "dwte");
  ExpectClose(dwpe, "dwpe");
  ExpectClose(losses, "losses", 1e-4);
  ExpectClose(dlogits, "dlogits");
  ExpectClose(sum, "add");
  ExpectClose(acc, "accumulate+scale");
  ExpectClose(p, "adamw param", 1e-5);
  ExpectClose(m, "adamw m", 1e-5);
  ExpectClose(vv, "adamw v", 1e-5);
  ExpectClose(pc, "adamw copy", 1e-2);
  ExpectClose(conv, "convert", 1e-3);
  EXPECT_NEAR(ss[1], ss[0], 1e-6 * ss[0]);
}

}  // namespace
}  // namespace rt::testing
