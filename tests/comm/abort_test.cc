// Abort reaches the communicators Split from the aborted one (ranks as threads): a rank blocked
// in a sub-group collective that a silent peer never joins wakes within 100 ms of aborting its
// world, with CommAborted naming the sub-group; splits of splits follow, and a child destroyed
// before the abort is skipped.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/communicator.h"

namespace rt::comm {
namespace {

constexpr auto kLongTimeout = std::chrono::milliseconds(60'000);

std::vector<std::unique_ptr<Communicator>> MakeWorld(int n, Transport transport) {
  std::shared_ptr<Store> store = NewMemoryStore();
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < n; ++r) {
    CommOptions o;
    o.store = store;
    o.job = "abort-test";
    o.rank = r;
    o.size = n;
    o.transport = transport;
    o.op_timeout = kLongTimeout;  // a silent peer is never detected before the test ends
    o.shm_ring_bytes = 256 << 10;
    Result<std::unique_ptr<Communicator>> c = NewCpuCommunicator(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    comms.push_back(std::move(*c));
  }
  return comms;
}

// Split(color, key, name) on every rank at once (Split is collective over the parent).
std::vector<std::unique_ptr<Communicator>> SplitAll(
    std::vector<std::unique_ptr<Communicator>>& parents, const std::vector<int>& colors,
    const std::string& name) {
  std::vector<std::unique_ptr<Communicator>> out(parents.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < parents.size(); ++r)
    threads.emplace_back([&, r] {
      auto sub = parents[r]->Split(colors[r], static_cast<int>(r), Deadline::AfterMs(20'000), name);
      EXPECT_TRUE(sub.ok()) << sub.status().ToString();
      if (sub.ok()) out[r] = std::move(*sub);
    });
  for (std::thread& t : threads) t.join();
  return out;
}

class SubGroupAbort : public ::testing::TestWithParam<Transport> {};

// World of 4; sub-groups "pair" {0,1}, {2,3}, and each pair split again whole ("inner": a
// grandchild of the world). Rank 3 never calls the collectives (a dead peer); rank 2 blocks in
// its "pair" and "inner" all-reduces. Aborting rank 2's world wakes both within 100 ms.
TEST_P(SubGroupAbort, AbortingTheWorldWakesSubGroupWaiters) {
  const int n = 4;
  auto world = MakeWorld(n, GetParam());
  auto pairs = SplitAll(world, {0, 0, 1, 1}, "pair");
  auto inner = SplitAll(pairs, {0, 0, 0, 0}, "inner");
  ASSERT_EQ(pairs[2]->name(), "world/pair");
  ASSERT_EQ(inner[2]->name(), "world/pair/inner");
  for (auto* group : {&pairs, &inner})
    for (auto& c : *group) ASSERT_TRUE(c->WaitReady(Deadline::AfterMs(20'000)).ok());

  // A child destroyed before the abort is skipped (no dangling reference).
  auto doomed = SplitAll(world, {0, 0, 0, 0}, "doomed");
  doomed.clear();

  float a = 1, b = 2;
  WorkHandle in_pair = pairs[2]->AllReduce(&a, &a, 1, DType::kF32, ReduceOp::kSum);
  WorkHandle in_inner = inner[2]->AllReduce(&b, &b, 1, DType::kF32, ReduceOp::kSum);
  std::atomic<int64_t> woke_us[2] = {-1, -1};
  std::atomic<int64_t> aborted_at_us{0};
  Status got[2];
  auto now_us = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               MonoClock::now().time_since_epoch())
        .count();
  };
  std::vector<std::thread> waiters;
  for (int i = 0; i < 2; ++i)
    waiters.emplace_back([&, i] {
      got[i] = (i == 0 ? in_pair : in_inner)->Wait(Deadline::After(kLongTimeout));
      woke_us[i] = now_us() - aborted_at_us.load();
    });
  // Long enough for both waiters to sleep in the mesh (its wait, not the queue's).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(in_pair->Done());
  aborted_at_us = now_us();
  world[2]->Abort();
  for (std::thread& t : waiters) t.join();
  const char* names[2] = {"world/pair", "world/pair/inner"};
  for (int i = 0; i < 2; ++i) {
    std::printf("transport %d: %s waiter woke %.1f ms after the world's Abort()\n",
                static_cast<int>(GetParam()), names[i], woke_us[i].load() / 1000.0);
    EXPECT_EQ(got[i].code(), StatusCode::kCommAborted) << got[i].ToString();
    EXPECT_NE(got[i].ToString().find(std::string("communicator ") + names[i] + " (rank 0 of 2"),
              std::string::npos)
        << got[i].ToString();
    EXPECT_LT(woke_us[i].load(), 100'000) << names[i];
  }
  // Later ops fail at once, naming the group; the other ranks' groups are untouched.
  Status later = pairs[2]->Barrier()->Wait(Deadline::AfterMs(100));
  EXPECT_EQ(later.code(), StatusCode::kCommAborted);
  EXPECT_NE(later.ToString().find("aborted with its parent world"), std::string::npos)
      << later.ToString();
  EXPECT_EQ(world[2]->status().code(), StatusCode::kCommAborted);
  EXPECT_TRUE(pairs[0]->status().ok());
  EXPECT_TRUE(world[0]->status().ok());
  // A second Abort (of the child now, then the world again) changes nothing.
  pairs[2]->Abort();
  world[2]->Abort();
  EXPECT_NE(inner[2]->status().ToString().find("aborted with its parent world/pair"),
            std::string::npos)
      << inner[2]->status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Transports, SubGroupAbort,
                         ::testing::Values(Transport::kShm, Transport::kTcp), [](const auto& info) {
                           return info.param == Transport::kTcp ? "Tcp" : "Shm";
                         });

}  // namespace
}  // namespace rt::comm
