// The NCCL backend on a real GPU: every collective of a one-rank world against its definition,
// Split, Abort, and two ranks that share one device. Skipped in builds without the NCCL backend
// or on machines without a CUDA device (CI has none; run it where a GPU is).
#include <chrono>
#include <functional>
#include <numeric>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "kernels/ops.h"
#include "kernels/tensor.h"
#if defined(RINGTRAIN_WITH_CUDA)
#include <cuda_runtime.h>

#include "kernels/cuda/stream.h"
#endif

namespace rt::comm {
namespace {

bool HaveGpu() {
#if defined(RINGTRAIN_WITH_CUDA)
  return NcclAvailable() && CudaDeviceAvailable();
#else
  return false;
#endif
}

// `n` floats on the GPU with the given host values.
Buffer DeviceFloats(const std::vector<float>& values) {
  Result<Buffer> b = Buffer::Allocate(Device::kCuda, values.size() * sizeof(float));
  RT_CHECK(b.ok());
  const Shape s{static_cast<int64_t>(values.size())};
  RT_CHECK(Copy(b->View(DType::kF32, s),
                Tensor(const_cast<float*>(values.data()), DType::kF32, s, Device::kCpu))
               .ok());
  return std::move(*b);
}

std::vector<float> HostFloats(const Buffer& b, size_t n) {
  std::vector<float> out(n);
  const Shape s{static_cast<int64_t>(n)};
  RT_CHECK(Copy(Tensor(out.data(), DType::kF32, s, Device::kCpu), b.View(DType::kF32, s)).ok());
  return out;
}

// Expects got == want element by element, naming the first element that differs.
void ExpectSame(const std::vector<float>& got, const std::vector<float>& want,
                std::string_view what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << what << ": element " << i << " of " << got.size();
}

std::vector<float> Iota(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

CommOptions Options(std::shared_ptr<Store> store, int rank, int size, std::string job) {
  CommOptions o;
  o.store = std::move(store);
  o.job = std::move(job);
  o.rank = rank;
  o.size = size;
  o.op_timeout = std::chrono::milliseconds(10'000);
  o.bootstrap_timeout = std::chrono::milliseconds(20'000);
  return o;
}

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no NCCL backend in this build or no CUDA device";
  }
};

TEST_F(NcclTest, OneRankWorldRunsEveryCollective) {
  auto made = NewNcclCommunicator(Options(NewMemoryStore(), 0, 1, "nccl-one"));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Communicator& c = **made;
  ASSERT_TRUE(c.WaitReady(Deadline::AfterMs(20'000)).ok()) << c.status().ToString();
  EXPECT_EQ(c.backend(), "nccl");
  EXPECT_EQ(c.size(), 1);
  const size_t n = 4097;
  const std::vector<float> in = Iota(n, -100.0f);
  const auto wait = [](WorkHandle w) { return w->Wait(Deadline::AfterMs(10'000)); };

  // With one rank every reduction is the identity and every gather a copy.
  Buffer src = DeviceFloats(in), dst = DeviceFloats(std::vector<float>(n, 0.0f));
  ASSERT_TRUE(wait(c.AllReduce(src.data(), dst.data(), n, DType::kF32, ReduceOp::kSum)).ok());
  ExpectSame(HostFloats(dst, n), in, "all_reduce sum");
  ASSERT_TRUE(wait(c.AllReduce(src.data(), src.data(), n, DType::kF32, ReduceOp::kMax)).ok());
  ExpectSame(HostFloats(src, n), in, "all_reduce max in place");
  // kAvg on one rank is a copy in our backend (NCCL 2.28.3 dropped the last element of 4097).
  for (auto op : {ReduceOp::kAvg, ReduceOp::kMin}) {
    Buffer out = DeviceFloats(std::vector<float>(n, 0.0f));
    ASSERT_TRUE(wait(c.AllReduce(src.data(), out.data(), n, DType::kF32, op)).ok());
    ExpectSame(HostFloats(out, n), in, ReduceOpName(op));
  }
  const std::vector<std::pair<const char*, std::function<WorkHandle(void*)>>> copies = {
      {"reduce_scatter",
       [&](void* out) { return c.ReduceScatter(src.data(), out, n, DType::kF32, ReduceOp::kSum); }},
      {"reduce_scatter avg",
       [&](void* out) { return c.ReduceScatter(src.data(), out, n, DType::kF32, ReduceOp::kAvg); }},
      {"all_gather", [&](void* out) { return c.AllGather(src.data(), out, n, DType::kF32); }},
      {"broadcast", [&](void* out) { return c.Broadcast(src.data(), out, n, DType::kF32, 0); }},
      {"reduce",
       [&](void* out) { return c.Reduce(src.data(), out, n, DType::kF32, ReduceOp::kSum, 0); }},
      {"all_to_all", [&](void* out) { return c.AllToAll(src.data(), out, n, DType::kF32); }},
  };
  for (const auto& [name, issue] : copies) {
    Buffer out = DeviceFloats(std::vector<float>(n, 0.0f));
    Status s = wait(issue(out.data()));
    ASSERT_TRUE(s.ok()) << name << ": " << s.ToString();
    ExpectSame(HostFloats(out, n), in, name);
  }
  ASSERT_TRUE(wait(c.Barrier()).ok());

  // Split: color 0 gives a one-rank communicator that works; a negative color takes no part.
  auto sub = c.Split(0, 0, Deadline::AfterMs(20'000), "sub");
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  ASSERT_NE(*sub, nullptr);
  ASSERT_TRUE((*sub)->WaitReady(Deadline::AfterMs(20'000)).ok()) << (*sub)->status().ToString();
  Buffer out = DeviceFloats(std::vector<float>(n, 0.0f));
  ASSERT_TRUE(wait((*sub)->AllReduce(src.data(), out.data(), n, DType::kF32, ReduceOp::kSum)).ok());
  ExpectSame(HostFloats(out, n), in, "all_reduce on the split communicator");
  auto none = c.Split(-1, 0, Deadline::AfterMs(20'000));
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, nullptr);

  // Abort fails every later op with CommAborted, at once.
  c.Abort();
  const auto start = std::chrono::steady_clock::now();
  Status s = wait(c.AllReduce(src.data(), out.data(), n, DType::kF32, ReduceOp::kSum));
  EXPECT_EQ(s.code(), StatusCode::kCommAborted) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  EXPECT_EQ(c.status().code(), StatusCode::kCommAborted);
  // The world's Abort reached the communicator split from it (ncclCommAbort on it too).
  EXPECT_EQ((*sub)->name(), "world/sub");
  Status sub_s = wait((*sub)->AllReduce(src.data(), out.data(), n, DType::kF32, ReduceOp::kSum));
  EXPECT_EQ(sub_s.code(), StatusCode::kCommAborted) << sub_s.ToString();
  EXPECT_NE(sub_s.ToString().find("communicator world/sub (rank 0 of 1, generation 0) aborted "
                                  "with its parent world"),
            std::string::npos)
      << sub_s.ToString();
}

#if defined(RINGTRAIN_WITH_CUDA)
// A one-rank communicator costs no host synchronisation: its ops are done as soon as they are
// issued, and an out-of-place op's copy runs on the caller's current stream (here a
// non-blocking one, which orders with no other stream), so the caller's next copy on that
// stream reads the result.
TEST_F(NcclTest, OneRankOpsAreDoneAtOnceAndOrderedOnTheCallersStream) {
  auto made = NewNcclCommunicator(Options(NewMemoryStore(), 0, 1, "nccl-alone"));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Communicator& c = **made;
  ASSERT_TRUE(c.WaitReady(Deadline::AfterMs(20'000)).ok()) << c.status().ToString();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  {
    StreamGuard guard(stream);
    // 64 MiB: a copy that takes the GPU a while, so an op waited for on the host would not be
    // done the moment it is issued.
    const size_t n = size_t{1} << 24;
    const std::vector<float> in = Iota(n, 1.0f);
    Buffer src = DeviceFloats(in), dst = DeviceFloats(std::vector<float>(n, 0.0f));
    struct Op {
      const char* name;
      std::function<WorkHandle()> issue;
      bool copies;  // writes `in` into dst
    };
    const Op ops[] = {
        {"all_reduce",
         [&] { return c.AllReduce(src.data(), dst.data(), n, DType::kF32, ReduceOp::kSum); }, true},
        {"all_reduce in place",
         [&] { return c.AllReduce(dst.data(), dst.data(), n, DType::kF32, ReduceOp::kAvg); },
         false},
        {"all_gather", [&] { return c.AllGather(src.data(), dst.data(), n, DType::kF32); }, true},
        {"reduce_scatter",
         [&] { return c.ReduceScatter(src.data(), dst.data(), n, DType::kF32, ReduceOp::kMax); },
         true},
        {"barrier", [&] { return c.Barrier(); }, false},
    };
    for (const Op& op : ops) {
      ASSERT_TRUE(Zero(dst.View(DType::kF32, Shape{static_cast<int64_t>(n)})).ok());
      const WorkHandle w = op.issue();
      EXPECT_TRUE(w->Done()) << op.name;
      ASSERT_TRUE(w->Wait(Deadline::AfterMs(10'000)).ok()) << op.name;
      if (op.copies) ExpectSame(HostFloats(dst, n), in, op.name);
    }
    EXPECT_EQ(c.stats()[OpKind::kAllReduce].ops, 2u);
    EXPECT_EQ(c.stats()[OpKind::kBarrier].ops, 1u);
    // An aborted one-rank communicator fails its ops as any other does.
    c.Abort();
    const Status s =
        c.AllGather(src.data(), dst.data(), n, DType::kF32)->Wait(Deadline::AfterMs(10'000));
    EXPECT_EQ(s.code(), StatusCode::kCommAborted) << s.ToString();
    ASSERT_TRUE(SynchronizeCurrentStream().ok());
  }
  cudaStreamDestroy(stream);
}
#endif

// NCCL refuses two ranks of one communicator on the same GPU ("duplicate GPU"); either way the
// ranks must not hang: they both bootstrap and sum correctly, or both report an error in time.
TEST_F(NcclTest, TwoRanksOnOneDeviceSumOrFailWithoutHanging) {
  std::shared_ptr<Store> store = NewMemoryStore();
  const size_t n = 1000;
  std::vector<Status> ready(2), reduced(2);
  std::vector<std::vector<float>> results(2);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto made = NewNcclCommunicator(Options(store, r, 2, "nccl-two"));
      if (!made.ok()) {
        ready[r] = made.status();
        return;
      }
      ready[r] = (*made)->WaitReady(Deadline::AfterMs(30'000));
      if (!ready[r].ok()) return;
      Buffer b = DeviceFloats(Iota(n, static_cast<float>(r)));
      reduced[r] = (*made)
                       ->AllReduce(b.data(), b.data(), n, DType::kF32, ReduceOp::kSum)
                       ->Wait(Deadline::AfterMs(10'000));
      if (reduced[r].ok()) results[r] = HostFloats(b, n);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(45));
  if (ready[0].ok() && ready[1].ok()) {
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(reduced[r].ok()) << reduced[r].ToString();
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(results[r][i], 2.0f * i + 1.0f) << i;
    }
  } else {
    for (int r = 0; r < 2; ++r) {
      EXPECT_FALSE(ready[r].ok()) << "rank " << r << " bootstrapped alone";
      std::printf("rank %d: %s\n", r, ready[r].ToString().c_str());
    }
  }
}

}  // namespace
}  // namespace rt::comm
