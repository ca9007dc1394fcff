// The membership service in one process over real loopback sockets: views form, the replicated
// state is a compare-and-set (exactly one of two racing proposals wins), a node can share the
// daemon's RPC server, the cluster secret keeps outsiders out, and waits end at their deadline.
#include <future>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <gtest/gtest.h>

#include "base/net/auth.h"
#include "base/net/rpc.h"
#include "elastic/membership.h"
#include "tests/elastic/await.h"
#include "tests/iofs/process_util.h"

namespace rt::elastic {
namespace {

namespace asio = boost::asio;
using iofs::testing::FreePort;
using iofs::testing::TempDir;

using testing::Await;

bool HasMembers(const View& view, size_t count) { return view.members.size() == count; }

class MembershipServiceTest : public ::testing::Test {
 protected:
  MembershipServiceTest() : dir_("membership-service") {}

  std::unique_ptr<MembershipService> StartNode(NodeId id, std::vector<std::string> seeds,
                                               std::shared_ptr<const net::ClusterSecret> secret) {
    MembershipServiceOptions options;
    options.node_id = id;
    options.listen = "127.0.0.1:0";
    options.seeds = std::move(seeds);
    options.state_dir = dir_.path() + "/node" + std::to_string(id);
    options.secret = std::move(secret);
    auto service = StartMembershipService(options);
    EXPECT_TRUE(service.ok()) << service.status().ToString();
    return service.ok() ? std::move(*service) : nullptr;
  }

  // Starts nodes 1, 2 and 3 (2 and 3 join through 1) and waits until each sees all three.
  std::vector<std::unique_ptr<MembershipService>> StartThreeNodes() {
    std::vector<std::unique_ptr<MembershipService>> nodes;
    nodes.push_back(StartNode(1, {}, secret_));
    if (nodes[0] == nullptr) return {};
    for (NodeId id : {2, 3}) nodes.push_back(StartNode(id, {nodes[0]->address()}, secret_));
    for (const auto& n : nodes) {
      if (n == nullptr) return {};
      auto view = Await(
          n->AwaitView([](const View& v) { return HasMembers(v, 3); }, Deadline::AfterMs(30'000)));
      EXPECT_TRUE(view.ok()) << view.status().ToString();
      if (!view.ok()) return {};
    }
    return nodes;
  }

  TempDir dir_;
  std::shared_ptr<const net::ClusterSecret> secret_ =
      net::ClusterSecret::FromKey("membership-test-secret-0123456789");
};

TEST_F(MembershipServiceTest, CompareAndSetIsDecidedOnceAndSeenEverywhere) {
  auto nodes = StartThreeNodes();
  ASSERT_EQ(nodes.size(), 3u);
  auto& n1 = nodes[0];
  auto& n2 = nodes[1];
  auto& n3 = nodes[2];
  auto first = Await(n2->ProposeState(0, "job-a", Deadline::AfterMs(10'000)));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, 1u);
  auto stale = Await(n3->ProposeState(0, "job-b", Deadline::AfterMs(10'000)));
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kFailedPrecondition) << stale.status().ToString();
  auto seen = Await(n1->AwaitState([](const ReplicatedState& s) { return s.version == 1; },
                                   Deadline::AfterMs(10'000)));
  ASSERT_TRUE(seen.ok()) << seen.status().ToString();
  EXPECT_EQ(seen->blob, "job-a");

  // Two proposals from version 1 race from two threads: exactly one wins.
  auto race = [&](MembershipService* n, std::string blob) {
    return std::async(std::launch::async, [n, blob] {
      return Await(n->ProposeState(1, blob, Deadline::AfterMs(10'000)));
    });
  };
  auto a = race(n1.get(), "from-1");
  auto b = race(n3.get(), "from-3");
  Result<uint64_t> ra = a.get(), rb = b.get();
  ASSERT_NE(ra.ok(), rb.ok()) << ra.status().ToString() << " / " << rb.status().ToString();
  const std::string winner = ra.ok() ? "from-1" : "from-3";
  const Result<uint64_t>& loser = ra.ok() ? rb : ra;
  EXPECT_EQ(loser.status().code(), StatusCode::kFailedPrecondition);
  auto final_state = Await(n2->AwaitState([](const ReplicatedState& s) { return s.version == 2; },
                                          Deadline::AfterMs(10'000)));
  ASSERT_TRUE(final_state.ok());
  EXPECT_EQ(final_state->blob, winner);
  for (auto* n : {n1.get(), n2.get(), n3.get()})
    EXPECT_TRUE(n->Shutdown(Deadline::AfterMs(5'000)).ok());
}

// Every node of a cluster leaves at once (all daemons get SIGTERM): each Leave returns without
// an error — the last one left in the view has nothing to leave — and none waits out its
// deadline (it used to wait the whole deadline and fail with "no majority accepted its leaving").
TEST_F(MembershipServiceTest, AWholeClusterLeavingAtOnceEndsAtOnce) {
  auto nodes = StartThreeNodes();
  ASSERT_EQ(nodes.size(), 3u);
  const Deadline deadline = Deadline::AfterMs(60'000);
  std::vector<std::future<Status>> leaving;
  for (const auto& node : nodes)
    leaving.push_back(std::async(std::launch::async,
                                 [n = node.get(), deadline] { return Await(n->Leave(deadline)); }));
  for (auto& left : leaving) {
    const Status s = left.get();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_FALSE(deadline.Expired()) << "a Leave waited out its deadline";
  for (const auto& n : nodes) EXPECT_TRUE(n->Shutdown(Deadline::AfterMs(5'000)).ok());
}

TEST_F(MembershipServiceTest, SharedServerSecretAndDeadlines) {
  auto n1 = StartNode(1, {}, secret_);
  auto n2 = StartNode(2, {n1->address()}, secret_);

  // Node 3 serves membership on a server it shares (the daemon's control port).
  asio::io_context server_io;
  const uint16_t port = FreePort();
  auto server = net::RpcServer::Create(server_io.get_executor(),
                                       {.port = port, .name = "daemon control", .secret = secret_});
  MembershipServiceOptions options;
  options.node_id = 3;
  options.seeds = {n1->address()};
  options.state_dir = dir_.path() + "/node3";
  options.secret = secret_;
  options.server = server;
  options.advertise = "127.0.0.1:" + std::to_string(port);
  auto n3 = StartMembershipService(options);
  ASSERT_TRUE(n3.ok()) << n3.status().ToString();
  ASSERT_TRUE(server->Start().ok());
  auto work = asio::make_work_guard(server_io);
  std::thread server_thread([&] { server_io.run(); });

  auto three = Await(
      (*n3)->AwaitView([](const View& v) { return HasMembers(v, 3); }, Deadline::AfterMs(30'000)));
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  EXPECT_EQ(three->members[2].address, options.advertise);

  // A node with the wrong secret is never admitted.
  auto outsider =
      StartNode(9, {n1->address()}, net::ClusterSecret::FromKey("another-secret-0123456789abcdef"));
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(outsider->CurrentView().generation, 0u);
  EXPECT_EQ(n1->CurrentView().members.size(), 3u);

  // Waits end at their deadline, naming what was last seen.
  auto never =
      Await(n1->AwaitView([](const View& v) { return HasMembers(v, 7); }, Deadline::AfterMs(200)));
  ASSERT_FALSE(never.ok());
  EXPECT_EQ(never.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(never.status().ToString().find("generation"), std::string::npos);

  // Node 3 stops without leaving: the others notice and install a view without it.
  ASSERT_TRUE((*n3)->Shutdown(Deadline::AfterMs(5'000)).ok());
  auto two =
      Await(n1->AwaitView([](const View& v) { return !v.Contains(3); }, Deadline::AfterMs(20'000)));
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(two->Ids(), (std::vector<NodeId>{1, 2}));
  auto after = Await((*n3)->AwaitView([](const View&) { return true; }, Deadline::AfterMs(100)));
  EXPECT_EQ(after.status().code(), StatusCode::kAborted);
  work.reset();
  server->Abort();
  server_io.stop();
  server_thread.join();
}

TEST_F(MembershipServiceTest, BadOptionsAndDamagedStateAreRefused) {
  MembershipServiceOptions options;
  options.state_dir = dir_.path() + "/bad";
  auto no_id = StartMembershipService(options);
  EXPECT_EQ(no_id.status().code(), StatusCode::kInvalidArgument);
  options.node_id = 1;
  options.seeds = {"no-port"};
  auto bad_seed = StartMembershipService(options);
  ASSERT_FALSE(bad_seed.ok());
  EXPECT_NE(bad_seed.status().ToString().find("no-port"), std::string::npos);
  options.seeds = {};
  std::filesystem::create_directories(options.state_dir);
  std::FILE* f = std::fopen((options.state_dir + "/membership.state").c_str(), "wb");
  std::fputs("not a membership state", f);
  std::fclose(f);
  auto damaged = StartMembershipService(options);
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), StatusCode::kCorruption);
  EXPECT_NE(damaged.status().ToString().find("membership.state"), std::string::npos);
}

}  // namespace
}  // namespace rt::elastic
