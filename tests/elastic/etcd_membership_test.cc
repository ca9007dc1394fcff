// Membership kept in a real etcd (Debian's etcd-server, started by the test): views form from the
// nodes' leases, the replicated state is a compare-and-set (one of two racing proposals wins), a
// node that stops renewing its lease leaves the next view within the lease TTL, a leaving node
// leaves at once, a restarted node comes back, and a node cut off from etcd knows no view after
// its lease (and gets it back when etcd answers again). Skips, saying so, without etcd.
#include <atomic>
#include <chrono>
#include <csignal>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <gtest/gtest.h>

#include "elastic/membership.h"
#include "elastic/membership/etcd_client.h"
#include "elastic/membership/etcd_values.h"
#include "elastic/membership/local_etcd.h"
#include "tests/elastic/await.h"

namespace rt::elastic {
namespace {

namespace asio = boost::asio;
using std::chrono::milliseconds;

using testing::Await;

class EtcdMembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (LocalEtcd::Binary().empty())
      GTEST_SKIP() << "etcd is not installed (Debian's etcd-server; tools/run setup installs it)";
    auto etcd = LocalEtcd::Start(
        (std::filesystem::temp_directory_path() / ("etcd-membership-" + std::to_string(::getpid())))
            .string());
    ASSERT_TRUE(etcd.ok()) << etcd.status().ToString();
    etcd_ = std::move(*etcd);
  }

  // Node `id` with its notifications recorded; 2 s leases, etcd calls bounded by 300 ms.
  std::unique_ptr<MembershipService> StartNode(NodeId id) {
    MembershipServiceOptions options;
    options.node_id = id;
    options.advertise = "127.0.0.1:" + std::to_string(17000 + id);
    options.timing.send_timeout = milliseconds(300);
    options.on_notification = [this, id](const MembershipNotification& n) {
      std::lock_guard lock(mu_);
      notes_.push_back({id, n.kind, n.node, n.view.generation});
    };
    auto service =
        StartEtcdMembershipService(options, {etcd_->endpoint(), "/test", std::chrono::seconds(2)});
    EXPECT_TRUE(service.ok()) << service.status().ToString();
    return service.ok() ? std::move(*service) : nullptr;
  }

  static Result<View> AwaitMembers(MembershipService& node, std::vector<NodeId> ids,
                                   milliseconds timeout = milliseconds(20'000)) {
    return Await(
        node.AwaitView([ids](const View& v) { return v.Ids() == ids; }, Deadline::After(timeout)));
  }

  // Whether node `at` (0: any node) was told `kind` (about `about`, when not 0).
  bool Told(NodeId at, MembershipNotification::Kind kind, NodeId about = 0) {
    std::lock_guard lock(mu_);
    for (const Note& n : notes_)
      if ((at == 0 || n.at == at) && n.kind == kind && (about == 0 || n.about == about))
        return true;
    return false;
  }

  struct Note {
    NodeId at;
    MembershipNotification::Kind kind;
    NodeId about;
    uint64_t generation;
  };
  std::unique_ptr<LocalEtcd> etcd_;
  std::mutex mu_;
  std::vector<Note> notes_;
};

TEST_F(EtcdMembershipTest, ViewsFormAndTheStateIsOneCompareAndSet) {
  std::vector<std::unique_ptr<MembershipService>> nodes;
  for (NodeId id = 1; id <= 3; ++id) nodes.push_back(StartNode(id));
  uint64_t generation = 0;
  for (auto& node : nodes) {
    Result<View> view = AwaitMembers(*node, {1, 2, 3});
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    if (generation == 0) generation = view->generation;
    EXPECT_EQ(view->generation, generation) << "one generation names one member set";
    EXPECT_EQ(view->members[1].address, "127.0.0.1:17002");
  }

  Result<uint64_t> first = Await(nodes[1]->ProposeState(0, "job a", Deadline::AfterMs(5'000)));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, 1u);
  Result<uint64_t> stale = Await(nodes[2]->ProposeState(0, "job b", Deadline::AfterMs(5'000)));
  EXPECT_EQ(stale.status().code(), StatusCode::kFailedPrecondition) << stale.status().ToString();
  for (auto& node : nodes) {
    Result<ReplicatedState> s = Await(node->AwaitState(
        [](const ReplicatedState& s) { return s.version == 1; }, Deadline::AfterMs(5'000)));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->blob, "job a");
  }

  // Two racing proposals from version 1: exactly one wins, and every node ends with its blob.
  std::atomic<int> won{0};
  std::vector<std::thread> racers;
  std::vector<std::string> winners(3);
  for (int i = 0; i < 3; ++i)
    racers.emplace_back([&, i] {
      Result<uint64_t> r = Await(
          nodes[i]->ProposeState(1, "from " + std::to_string(i + 1), Deadline::AfterMs(5'000)));
      if (r.ok()) {
        ++won;
        winners[i] = "from " + std::to_string(i + 1);
      } else {
        EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
      }
    });
  for (auto& t : racers) t.join();
  EXPECT_EQ(won.load(), 1);
  std::string winner;
  for (const std::string& w : winners) winner += w;
  for (auto& node : nodes) {
    Result<ReplicatedState> s = Await(node->AwaitState(
        [](const ReplicatedState& s) { return s.version == 2; }, Deadline::AfterMs(5'000)));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->blob, winner);
  }
  EXPECT_TRUE(Told(1, MembershipNotification::Kind::kStateChanged));
}

TEST_F(EtcdMembershipTest, LeasesDecideWhoIsInTheView) {
  std::vector<std::unique_ptr<MembershipService>> nodes;
  for (NodeId id = 1; id <= 4; ++id) nodes.push_back(StartNode(id));
  for (auto& node : nodes) ASSERT_TRUE(AwaitMembers(*node, {1, 2, 3, 4}).ok());

  // A node that stops (no leave, as kill -9 would) is out of the next view after its lease.
  const auto stopped_at = MonoClock::now();
  ASSERT_TRUE(nodes[3]->Shutdown(Deadline::AfterMs(5'000)).ok());
  Result<View> without = AwaitMembers(*nodes[0], {1, 2, 3});
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  const double seconds = std::chrono::duration<double>(MonoClock::now() - stopped_at).count();
  std::printf("a stopped node left the view after %.2f s (lease 2 s)\n", seconds);
  EXPECT_LT(seconds, 6.0);
  // The node whose proposal removed it saw its key gone under the old view first.
  EXPECT_TRUE(Told(0, MembershipNotification::Kind::kSuspected, 4));

  // Leaving takes no lease expiry.
  const auto leave_at = MonoClock::now();
  ASSERT_TRUE(Await(nodes[2]->Leave(Deadline::AfterMs(5'000))).ok());
  ASSERT_TRUE(AwaitMembers(*nodes[1], {1, 2}, milliseconds(5'000)).ok());
  EXPECT_LT(std::chrono::duration<double>(MonoClock::now() - leave_at).count(), 1.5);
  EXPECT_FALSE(nodes[2]->CurrentView().Contains(3));

  // Node 4 comes back (a new process, a new incarnation) and is in the next view.
  nodes[3] = StartNode(4);
  Result<View> back = AwaitMembers(*nodes[0], {1, 2, 4});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_GT(back->generation, without->generation);
  EXPECT_TRUE(Told(1, MembershipNotification::Kind::kViewInstalled));
  // It is admitted anew, the others keep their seniority: node 4 is the youngest now.
  EXPECT_EQ(back->members[2].admitted, back->generation);
  EXPECT_EQ(back->members[0].admitted, without->members[0].admitted);
  EXPECT_EQ(back->EldestFirst().back(), 4u);
}

TEST_F(EtcdMembershipTest, ANodeCutOffFromEtcdKnowsNoViewAfterItsLease) {
  std::vector<std::unique_ptr<MembershipService>> nodes;
  for (NodeId id = 1; id <= 2; ++id) nodes.push_back(StartNode(id));
  for (auto& node : nodes) ASSERT_TRUE(AwaitMembers(*node, {1, 2}).ok());
  ASSERT_TRUE(etcd_->Signal(SIGSTOP).ok());
  Result<View> none = Await(nodes[0]->AwaitView([](const View& v) { return v.generation == 0; },
                                                Deadline::AfterMs(10'000)));
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(Told(1, MembershipNotification::Kind::kRemoved));
  // Calls end at their deadlines while etcd is silent.
  const auto call_at = MonoClock::now();
  Result<uint64_t> r = Await(nodes[1]->ProposeState(0, "x", Deadline::AfterMs(1'000)));
  EXPECT_FALSE(r.ok());
  EXPECT_LT(std::chrono::duration<double>(MonoClock::now() - call_at).count(), 2.0);
  ASSERT_TRUE(etcd_->Signal(SIGCONT).ok());
  for (auto& node : nodes) {
    Result<View> back = AwaitMembers(*node, {1, 2});
    EXPECT_TRUE(back.ok()) << back.status().ToString();
  }
  // Shutdown stops at once, etcd or not.
  for (auto& node : nodes) EXPECT_TRUE(node->Shutdown(Deadline::AfterMs(3'000)).ok());
}

TEST_F(EtcdMembershipTest, GenerationsOnlyGrowWhenEtcdLosesTheView) {
  std::vector<std::unique_ptr<MembershipService>> nodes;
  for (NodeId id = 1; id <= 2; ++id) nodes.push_back(StartNode(id));
  Result<View> formed = AwaitMembers(*nodes[0], {1, 2});
  ASSERT_TRUE(formed.ok()) << formed.status().ToString();
  Result<View> seen = AwaitMembers(*nodes[1], {1, 2});
  ASSERT_TRUE(seen.ok() && seen->generation == formed->generation);
  // Someone deletes the view key and node 2's key: the nodes put back a view past the one they
  // had, not 1, and node 2 registers again.
  Result<etcd::Client> client = etcd::Client::Create(etcd_->endpoint());
  ASSERT_TRUE(client.ok());
  std::vector<etcd::TxnWrite> erase = {{"/test/view", "", 0, true},
                                       {"/test/members/00000000000000000002", "", 0, true}};
  Result<bool> erased = Await(client->Txn({}, std::move(erase), Deadline::AfterMs(5'000)));
  ASSERT_TRUE(erased.ok() && *erased) << erased.status().ToString();
  for (auto& node : nodes) {
    Result<View> next = Await(node->AwaitView(
        [&](const View& v) {
          return v.generation > formed->generation && v.Ids() == std::vector<NodeId>{1, 2};
        },
        Deadline::AfterMs(10'000)));
    ASSERT_TRUE(next.ok()) << next.status().ToString();
  }
}

TEST_F(EtcdMembershipTest, BadOptionsAreRefused) {
  MembershipServiceOptions options;
  options.node_id = 1;
  options.advertise = "127.0.0.1:7001";
  EXPECT_EQ(StartEtcdMembershipService(options, {"https://127.0.0.1:2379"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(StartEtcdMembershipService(options, {"http://127.0.0.1"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      StartEtcdMembershipService(options, {etcd_->endpoint(), "/ends/in/slash/"}).status().code(),
      StatusCode::kInvalidArgument);
  options.advertise = "";
  options.listen = "127.0.0.1:0";
  EXPECT_EQ(StartEtcdMembershipService(options, {etcd_->endpoint()}).status().code(),
            StatusCode::kInvalidArgument);
  options.advertise = "127.0.0.1:7001";
  options.node_id = 0;
  EXPECT_EQ(StartEtcdMembershipService(options, {etcd_->endpoint()}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(EtcdValuesTest, RoundTripAndMalformedValuesAreCorruptionNamingTheKey) {
  using namespace membership;
  const View view{4, {Member{2, "h:2", 5, 4}, Member{1, "h:1", 3}}};
  Result<View> back = DecodeViewValue(EncodeViewValue(view), "/p/view");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->Ids(), (std::vector<NodeId>{1, 2})) << "sorted by id";
  EXPECT_EQ(back->members[1].address, "h:2");
  EXPECT_EQ(back->members[1].admitted, 4u);
  EXPECT_EQ(back->members[0].admitted, 0u) << "not written when unknown, read back as unknown";
  const ReplicatedState state{7, std::string("a\0b\xff", 4)};
  Result<ReplicatedState> state_back = DecodeStateValue(EncodeStateValue(state), "/p/state");
  ASSERT_TRUE(state_back.ok());
  EXPECT_EQ(*state_back, state);
  for (
      const char* bad :
      {"", "[]", "{}", R"({"generation":1,"members":[]})",
       R"({"generation":0,"members":[{"id":1,"address":"h:1","incarnation":1}]})",
       R"({"generation":1,"members":[{"id":1,"address":"h:1","incarnation":1},{"id":1,"address":"h:9","incarnation":2}]})",
       R"({"generation":1,"members":[{"id":0,"address":"h:1","incarnation":1}]})",
       R"({"generation":-1,"members":[{"id":1,"address":"h:1","incarnation":1}]})",
       R"({"generation":2,"members":[{"id":1,"address":"h:1","incarnation":1,"admitted":3}]})",
       R"({"generation":2,"members":[{"id":1,"address":"h:1","incarnation":1,"admitted":"1"}]})"}) {
    Result<View> r = DecodeViewValue(bad, "/p/view");
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << bad;
    EXPECT_NE(r.status().ToString().find("/p/view"), std::string::npos) << r.status().ToString();
  }
  for (const char* bad :
       {R"({"version":1,"blob":"abc"})", R"({"version":"1","blob":""})", R"({"blob":""})"})
    EXPECT_EQ(DecodeStateValue(bad, "/p/state").status().code(), StatusCode::kCorruption) << bad;
  EXPECT_EQ(
      DecodeMemberValue(R"({"id":3,"address":7,"incarnation":1})", "/p/members/3").status().code(),
      StatusCode::kCorruption);
}

TEST(EtcdBase64Test, RoundTripsAndRejectsGarbage) {
  for (const std::string& s :
       std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    std::optional<std::string> back = etcd::Base64Decode(etcd::Base64Encode(s));
    ASSERT_TRUE(back.has_value()) << s;
    EXPECT_EQ(*back, s);
  }
  EXPECT_EQ(etcd::Base64Encode("hello"), "aGVsbG8=");
  EXPECT_FALSE(etcd::Base64Decode("abc").has_value());
  EXPECT_FALSE(etcd::Base64Decode("ab!d").has_value());
}

}  // namespace
}  // namespace rt::elastic
