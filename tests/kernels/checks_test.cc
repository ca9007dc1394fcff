// Shape, dtype and device mismatches handed to an op are errors naming the argument and the
// shapes — never a crash or a wrong answer.
#include <string>

#include <gtest/gtest.h>

#include "kernels/ops.h"
#include "tests/kernels/test_util.h"

namespace rt::testing {
namespace {

void ExpectError(const Status& s, StatusCode code, std::initializer_list<std::string> parts) {
  EXPECT_EQ(s.code(), code) << s.ToString();
  for (const std::string& p : parts) {
    EXPECT_NE(s.ToString().find(p), std::string::npos) << "'" << p << "' not in " << s.ToString();
  }
}

TEST(ChecksTest, MatmulShapeMismatchNamesArgumentAndShapes) {
  HostTensor x = Make(DType::kF32, Shape{4, 8}), w = Make(DType::kF32, Shape{5, 7});
  HostTensor out = Make(DType::kF32, Shape{4, 5}), bias = Make(DType::kF32, Shape{6});
  ExpectError(MatmulForward(out.t, x.t, w.t, Tensor()), StatusCode::kShapeMismatch,
              {"MatmulForward", "inp", "[4,8]", "[5,7]"});
  HostTensor w2 = Make(DType::kF32, Shape{5, 8});
  ExpectError(MatmulForward(out.t, x.t, w2.t, bias.t), StatusCode::kShapeMismatch,
              {"bias", "[6]", "[5]"});
  HostTensor out2 = Make(DType::kF32, Shape{4, 6});
  ExpectError(MatmulForward(out2.t, x.t, w2.t, Tensor()), StatusCode::kShapeMismatch,
              {"out", "[4,6]", "[4,5]"});
  HostTensor dw = Make(DType::kF32, Shape{8, 5}), dout = Make(DType::kF32, Shape{4, 5});
  ExpectError(MatmulBackward(Tensor(), dw.t, Tensor(), dout.t, x.t, w2.t),
              StatusCode::kShapeMismatch, {"dweight", "[8,5]", "[5,8]"});
}

TEST(ChecksTest, DTypeMismatch) {
  HostTensor x = Make(DType::kF32, Shape{4, 8}), w = Make(DType::kBF16, Shape{5, 8});
  HostTensor out = Make(DType::kF32, Shape{4, 5});
  ExpectError(MatmulForward(out.t, x.t, w.t, Tensor()), StatusCode::kDTypeMismatch,
              {"weight", "bf16[5,8]", "f32[4,5]"});
  HostTensor xi = Make(DType::kI32, Shape{4});
  HostTensor yi = Make(DType::kI32, Shape{4});
  ExpectError(GeluForward(yi.t, xi.t), StatusCode::kDTypeMismatch, {"out", "i32"});
  HostTensor ln = Make(DType::kF32, Shape{4, 8}), wc = Make(DType::kF32, Shape{8});
  HostTensor mean_bf = Make(DType::kBF16, Shape{4}), rstd = Make(DType::kF32, Shape{4});
  ExpectError(LayerNormForward(ln.t, mean_bf.t, rstd.t, ln.t, wc.t, wc.t),
              StatusCode::kDTypeMismatch, {"mean", "f32"});
  HostTensor tok_f = Make(DType::kF32, Shape{4}), wte = Make(DType::kF32, Shape{10, 8});
  ExpectError(EmbeddingForward(ln.t, tok_f.t, wte.t, 0), StatusCode::kDTypeMismatch,
              {"tokens", "i32"});
  HostTensor p = Make(DType::kF32, Shape{8}), g = Make(DType::kF32, Shape{8});
  HostTensor copy32 = Make(DType::kF32, Shape{8}), m_bf = Make(DType::kBF16, Shape{8});
  ExpectError(AdamW(p.t, g.t, p.t, p.t, copy32.t, AdamWParams{}), StatusCode::kDTypeMismatch,
              {"param_copy"});
  ExpectError(AdamW(p.t, g.t, m_bf.t, p.t, Tensor(), AdamWParams{}), StatusCode::kDTypeMismatch,
              {"m", "bf16"});
  HostTensor c16 = Make(DType::kF16, Shape{8});
  ExpectError(Copy(c16.t, p.t), StatusCode::kDTypeMismatch, {"dst", "f16", "f32"});
}

TEST(ChecksTest, OtherOpsShapeMismatches) {
  HostTensor qkv = Make(DType::kF32, Shape{2, 4, 12}), out = Make(DType::kF32, Shape{2, 4, 4});
  HostTensor att_bad = Make(DType::kF32, Shape{2, 2, 4, 3});
  ExpectError(AttentionForward(out.t, att_bad.t, qkv.t, 2), StatusCode::kShapeMismatch,
              {"att", "[2,2,4,3]", "[2,2,4,4]"});
  HostTensor att = Make(DType::kF32, Shape{2, 3, 4, 4});
  EXPECT_EQ(AttentionForward(out.t, att.t, qkv.t, 3).code(), StatusCode::kInvalidArgument);
  HostTensor qkv_bad = Make(DType::kF32, Shape{2, 4, 13});
  ExpectError(AttentionForward(out.t, att.t, qkv_bad.t, 2), StatusCode::kShapeMismatch,
              {"qkv", "[2,4,13]"});
  HostTensor a = Make(DType::kF32, Shape{3, 4}), b = Make(DType::kF32, Shape{4, 3});
  ExpectError(Add(a.t, a.t, b.t), StatusCode::kShapeMismatch, {"b", "[4,3]", "[3,4]"});
  ExpectError(Accumulate(a.t, b.t), StatusCode::kShapeMismatch, {"src", "[4,3]", "[3,4]"});
  HostTensor logits = Make(DType::kF32, Shape{3, 5}), losses = Make(DType::kF32, Shape{2});
  HostTensor tg = Make(DType::kI32, Shape{3});
  ExpectError(SoftmaxCrossEntropy(losses.t, Tensor(), logits.t, tg.t, 1.0f),
              StatusCode::kShapeMismatch, {"losses", "[2]", "[3,5]"});
  HostTensor wpe = Make(DType::kF32, Shape{4, 4});
  ExpectError(PositionEmbeddingAdd(out.t, wpe.t, 1), StatusCode::kShapeMismatch,
              {"positions [1, 5)", "wpe", "[4,4]"});
  HostTensor gemm_a = Make(DType::kF32, Shape{3, 4}), gemm_b = Make(DType::kF32, Shape{5, 2});
  HostTensor gemm_c = Make(DType::kF32, Shape{3, 2});
  ExpectError(Gemm(gemm_c.t, gemm_a.t, gemm_b.t, false, false, 1.0f, 0.0f),
              StatusCode::kShapeMismatch, {"K=4", "K=5"});
  HostTensor dst = Make(DType::kBF16, Shape{5});
  ExpectError(Convert(dst.t, a.t), StatusCode::kShapeMismatch, {"dst", "[5]", "12"});
}

TEST(ChecksTest, UndefinedRequiredArgumentIsInvalidArgument) {
  HostTensor x = Make(DType::kF32, Shape{4});
  ExpectError(GeluForward(Tensor(), x.t), StatusCode::kInvalidArgument, {"out", "undefined"});
}

TEST(ChecksTest, DeviceMismatchIsAnErrorNotACrash) {
  HostTensor x = Make(DType::kF32, Shape{4, 8}), out = Make(DType::kF32, Shape{4, 5});
  // A CUDA view of host memory stands in for a device tensor: the check rejects it before any
  // kernel could touch it.
  Tensor w(x.t.data(), DType::kF32, Shape{5, 8}, Device::kCuda);
  ExpectError(MatmulForward(out.t, x.t, w, Tensor()), StatusCode::kDeviceMismatch,
              {"weight", "@cuda", "@cpu"});
  Tensor y(x.t.data(), DType::kF32, Shape{4, 8}, Device::kCuda);
  ExpectError(Add(x.t, x.t, y), StatusCode::kDeviceMismatch, {"b"});
#if !defined(RINGTRAIN_WITH_CUDA)
  ExpectError(GeluForward(y, y), StatusCode::kUnimplemented, {"CUDA"});
  ExpectError(Copy(x.t, y), StatusCode::kUnimplemented, {"CUDA"});
#endif
}

}  // namespace
}  // namespace rt::testing
