// The rendezvous Store: the in-memory store and the TCP store, one table of checks for both,
// plus concurrent clients on the TCP store.
#include "comm/store.h"

#include <thread>

#include <gtest/gtest.h>

namespace rt::comm {
namespace {

struct StoreFixture {
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<Store> store;
};

StoreFixture MakeStore(bool tcp) {
  StoreFixture f;
  if (!tcp) {
    f.store = NewMemoryStore();
    return f;
  }
  auto server = TcpStoreServer::Start({});
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  f.server = std::move(*server);
  auto client = ConnectTcpStore("127.0.0.1", f.server->port(), Deadline::AfterMs(2000));
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  f.store = *client;
  return f;
}

class StoreTest : public ::testing::TestWithParam<bool> {};

TEST_P(StoreTest, SetGetWaitAddCasDelete) {
  auto f = MakeStore(GetParam());
  Store& s = *f.store;
  auto d = [] { return Deadline::AfterMs(2000); };
  ASSERT_TRUE(s.Set("a", ToBytes("1"), d()).ok());
  EXPECT_EQ(ToString(s.Get("a", d()).value()), "1");
  EXPECT_FALSE(s.TryGet("missing", d()).value().has_value());
  EXPECT_EQ(ToString(*s.TryGet("a", d()).value()), "1");
  // Get of a missing key waits and then names it.
  auto t0 = MonoClock::now();
  auto missing = s.Get("nope", Deadline::AfterMs(100));
  EXPECT_EQ(missing.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(missing.status().message().find("nope"), std::string_view::npos);
  EXPECT_LT(MonoClock::now() - t0, std::chrono::milliseconds(1000));
  // Add.
  EXPECT_EQ(s.Add("n", 5, d()).value(), 5);
  EXPECT_EQ(s.Add("n", -2, d()).value(), 3);
  EXPECT_EQ(s.Add("a", 1, d()).value(), 2);  // "1" is a counter too
  ASSERT_TRUE(s.Set("text", ToBytes("xyz"), d()).ok());
  EXPECT_EQ(s.Add("text", 1, d()).status().code(), StatusCode::kInvalidArgument);
  // Compare-and-set: create if missing, swap if equal, report the current value otherwise.
  EXPECT_EQ(ToString(s.CompareAndSet("c", std::nullopt, ToBytes("v1"), d()).value()), "v1");
  EXPECT_EQ(ToString(s.CompareAndSet("c", std::nullopt, ToBytes("v2"), d()).value()), "v1");
  EXPECT_EQ(ToString(s.CompareAndSet("c", ToBytes("v1"), ToBytes("v3"), d()).value()), "v3");
  EXPECT_EQ(ToString(s.CompareAndSet("c", ToBytes("v1"), ToBytes("v4"), d()).value()), "v3");
  // Wait for several keys, set by another thread.
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    (void)s.Set("w1", ToBytes("x"), d());
    (void)s.Set("w2", ToBytes("y"), d());
  });
  std::vector<std::string> keys{"w1", "w2"};
  EXPECT_TRUE(s.Wait(keys, d()).ok());
  setter.join();
  std::vector<std::string> some{"w1", "never"};
  auto w = s.Wait(some, Deadline::AfterMs(50));
  EXPECT_EQ(w.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(w.message().find("never"), std::string_view::npos);
  EXPECT_TRUE(s.Delete("w1", d()).value());
  EXPECT_FALSE(s.Delete("w1", d()).value());
  // Scoping: a generation never sees another's keys.
  auto g1 = ScopedStore(f.store, StoreScope("job", 1));
  auto g2 = ScopedStore(f.store, StoreScope("job", 2));
  ASSERT_TRUE(g1->Set("addr", ToBytes("gen1"), d()).ok());
  EXPECT_FALSE(g2->TryGet("addr", d()).value().has_value());
  EXPECT_EQ(ToString(s.Get("job/job/gen/1/addr", d()).value()), "gen1");
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Tcp" : "Memory"; });

TEST(TcpStore, ConcurrentClientsCountersAndBarrier) {
  auto server = TcpStoreServer::Start({}).value();
  constexpr int kClients = 8, kAdds = 50;
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      auto store = ConnectTcpStore("127.0.0.1", server->port(), Deadline::AfterMs(2000));
      if (!store.ok()) {
        ++errors;
        return;
      }
      for (int i = 0; i < kAdds; ++i)
        if (!(*store)->Add("counter", 1, Deadline::AfterMs(2000)).ok()) ++errors;
      // A barrier: everyone announces itself and waits for all.
      if (!(*store)->Set("here/" + std::to_string(c), ToBytes("1"), Deadline::AfterMs(2000)).ok())
        ++errors;
      std::vector<std::string> all;
      for (int k = 0; k < kClients; ++k) all.push_back("here/" + std::to_string(k));
      if (!(*store)->Wait(all, Deadline::AfterMs(5000)).ok()) ++errors;
      // Exactly one client wins the compare-and-set election.
      auto v = (*store)->CompareAndSet("leader", std::nullopt, ToBytes(std::to_string(c)),
                                       Deadline::AfterMs(2000));
      if (!v.ok()) ++errors;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  auto store = ConnectTcpStore("127.0.0.1", server->port(), Deadline::AfterMs(2000)).value();
  EXPECT_EQ(store->Add("counter", 0, Deadline::AfterMs(1000)).value(), kClients * kAdds);
  EXPECT_TRUE(store->TryGet("leader", Deadline::AfterMs(1000)).value().has_value());
}

TEST(TcpStore, StopWakesWaitersAndConnectFailsNamingTheStore) {
  auto server = TcpStoreServer::Start({}).value();
  uint16_t port = server->port();
  auto store = ConnectTcpStore("127.0.0.1", port, Deadline::AfterMs(2000)).value();
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    server->Stop();
  });
  auto t0 = MonoClock::now();
  auto r = store->Get("never", Deadline::AfterMs(10000));
  EXPECT_FALSE(r.ok());
  EXPECT_LT(MonoClock::now() - t0, std::chrono::milliseconds(1500));
  EXPECT_NE(r.status().message().find("store at 127.0.0.1"), std::string_view::npos)
      << r.status().ToString();
  stopper.join();
  auto again = ConnectTcpStore("127.0.0.1", port, Deadline::AfterMs(100));
  EXPECT_FALSE(again.ok());
}

}  // namespace
}  // namespace rt::comm
