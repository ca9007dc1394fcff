// Shapes, views, buffers and arenas.
#include "kernels/tensor.h"

#include <cstdint>

#include <gtest/gtest.h>

#include "tests/kernels/test_util.h"

namespace rt::testing {
namespace {

TEST(ShapeTest, NumelRowsAndToString) {
  const Shape s{2, 3, 4};
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.last(), 4);
  EXPECT_EQ(s.rows(), 6);
  EXPECT_EQ(s.ToString(), "[2,3,4]");
  EXPECT_EQ(Shape().numel(), 1);
  EXPECT_EQ(Shape().ToString(), "[]");
  EXPECT_TRUE((Shape{2, 3} == Shape{2, 3}));
  EXPECT_FALSE((Shape{2, 3} == Shape{3, 2}));
  EXPECT_FALSE((Shape{6} == Shape{6, 1}));
}

Result<Tensor> FlatOfAll(const Tensor& t) { return t.Flat(0, t.numel()); }

TEST(TensorTest, ViewsShareMemory) {
  HostTensor h = Make(DType::kF32, Shape{4, 3});
  for (int i = 0; i < 12; ++i) h.t.data_as<float>()[i] = static_cast<float>(i);
  EXPECT_EQ(h.t.Describe(), "f32[4,3]@cpu");
  EXPECT_EQ(h.t.nbytes(), 48u);
  Result<Tensor> r = h.t.Reshape(Shape{2, 6});
  ASSERT_OK(r);
  EXPECT_EQ(r->data(), h.t.data());
  EXPECT_EQ(h.t.Reshape(Shape{5}).status().code(), StatusCode::kInvalidArgument);
  Result<Tensor> rows = h.t.Rows(1, 2);
  ASSERT_OK(rows);
  EXPECT_EQ(rows->shape(), (Shape{2, 3}));
  EXPECT_EQ(rows->data_as<float>()[0], 3.0f);
  EXPECT_EQ(h.t.Rows(3, 2).status().code(), StatusCode::kOutOfRange);
  Result<Tensor> one = FlatOfAll(h.t);
  ASSERT_OK(one);
  Result<Tensor> row = one->Rows(0, 1);  // a 1-D tensor is one row
  ASSERT_OK(row);
  EXPECT_EQ(row->shape(), (Shape{1, 12}));
  EXPECT_EQ(one->Rows(1, 1).status().code(), StatusCode::kOutOfRange);
  Result<Tensor> flat = h.t.Flat(5, 4);
  ASSERT_OK(flat);
  EXPECT_EQ(flat->shape(), (Shape{4}));
  EXPECT_EQ(flat->data_as<float>()[0], 5.0f);
  EXPECT_EQ(h.t.Flat(10, 3).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(h.t.Flat(-1, 1).status().code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(Tensor().defined());
}

TEST(BufferTest, AlignedAndZeroFilled) {
  Result<Buffer> b = Buffer::Allocate(Device::kCpu, 1000);
  ASSERT_OK(b);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 64, 0u);
  EXPECT_EQ(b->size(), 1000u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(static_cast<const char*>(b->data())[i], 0);
  Buffer moved = std::move(*b);
  EXPECT_NE(moved.data(), nullptr);
  EXPECT_EQ(moved.View(DType::kBF16, Shape{10, 50}).nbytes(), 1000u);
}

TEST(BufferTest, CudaWithoutBackendIsUnimplemented) {
#if defined(RINGTRAIN_WITH_CUDA)
  GTEST_SKIP() << "CUDA build";
#else
  Result<Buffer> b = Buffer::Allocate(Device::kCuda, 64);
  EXPECT_EQ(b.status().code(), StatusCode::kUnimplemented);
#endif
}

TEST(ArenaTest, AlignedOffsetsOneBuffer) {
  Arena arena;
  const int a = arena.Add("wte", DType::kF32, Shape{3, 5});
  const int b = arena.Add("ln.bias", DType::kBF16, Shape{7});
  const int c = arena.Add("wpe", DType::kF32, Shape{2, 2});
  EXPECT_FALSE(arena.Get(a).defined());  // not allocated yet
  ASSERT_OK(arena.Allocate(Device::kCpu));
  EXPECT_EQ(arena.size(), 3);
  EXPECT_EQ(arena.offset(a), 0u);
  EXPECT_EQ(arena.offset(b), 64u);   // 60 bytes rounded up
  EXPECT_EQ(arena.offset(c), 128u);  // 14 bytes rounded up
  EXPECT_EQ(arena.bytes(), 192u);
  EXPECT_EQ(arena.name(b), "ln.bias");
  EXPECT_EQ(arena.Get(b).shape(), (Shape{7}));
  EXPECT_EQ(arena.Get(b).dtype(), DType::kBF16);
  EXPECT_EQ(static_cast<char*>(arena.Get(c).data()) - static_cast<char*>(arena.Get(a).data()), 128);
  EXPECT_EQ(arena.All().nbytes(), 192u);
  EXPECT_EQ(arena.Allocate(Device::kCpu).code(), StatusCode::kFailedPrecondition);
  // Views write into the one buffer.
  arena.Get(c).data_as<float>()[3] = 2.5f;
  EXPECT_EQ(reinterpret_cast<float*>(static_cast<char*>(arena.All().data()) + 128)[3], 2.5f);
}

}  // namespace
}  // namespace rt::testing
