// Server::SetMembers (the embedded store's chains follow ringtraind's views): three ringfsd
// servers in this process, RF=2 over 6 chains. Leaving node 3 out of the membership takes it out
// of its chains at once although it still answers heartbeats, and heartbeats do not bring it
// back while it is out; put back in, it resyncs and every chain serves with its home nodes again.
// A file written while node 3 is out reads back whole afterwards, also through node 3. Only the
// metadata node acts on the call.
// With follow_views (what ringtraind runs) the metadata role follows the views: no node serves
// files before the first view, then node 1 does; with node 1 gone and a view without it, node 2
// takes the role over (the namespace and every file written before are there, new files can be
// written); when node 1 returns as the youngest member of a newer view node 2 keeps the role, and
// when a view names node 1 first it takes the role back with what node 2 changed; an older view
// changes nothing. A node 1 that was only cut off (it missed the views without
// it) takes the role over anew when it is back. A metadata node that hears from no majority of
// the store nodes freezes until it takes the role over again; so does one the others no longer
// follow, and a takeover waits for the old metadata node's last answers, not a fixed bound. A
// newer view ends a takeover that waits on a member that does not answer.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "iofs/client.h"
#include "iofs/server.h"
#include "tests/iofs/io_util.h"
#include "tests/iofs/process_util.h"
#include "tests/iofs/test_util.h"

namespace rt::iofs {
namespace {

using testing::Content;
using testing::FreePort;
using testing::Io;
using testing::TempDir;

Deadline Secs(int s) { return Deadline::After(std::chrono::seconds(s)); }

std::unique_ptr<Server> StartNode(const std::string& dir, uint32_t self,
                                  const std::vector<uint16_t>& ports, bool follow_views = false,
                                  int heartbeat_ms = 100) {
  ServerOptions o;
  o.self = self;
  o.state_dir = dir + "/node" + std::to_string(self);
  for (uint32_t id = 1; id <= ports.size(); ++id)
    o.nodes.push_back(NodeEndpoint{id, "127.0.0.1", ports[id - 1]});
  o.replication = 2;
  o.chains = 6;
  o.engine.chunk_size = 256 << 10;
  o.engine.small_chunk_size = 65536;
  o.engine.slots_per_file = 64;
  o.engine.capacity_bytes = uint64_t{1} << 30;
  o.tick_ms = 50;
  o.heartbeat_ms = heartbeat_ms;
  o.down_after = 10;
  o.follow_views = follow_views;
  auto server = Server::Start(o);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return server.ok() ? std::move(*server) : nullptr;
}

// Starts one node per port (ids 1, 2, ...); a node that failed to start is null (and the test
// has failed).
std::vector<std::unique_ptr<Server>> StartNodes(const std::string& dir,
                                                const std::vector<uint16_t>& ports,
                                                bool follow_views, int heartbeat_ms = 100) {
  std::vector<std::unique_ptr<Server>> nodes;
  for (uint32_t id = 1; id <= ports.size(); ++id)
    nodes.push_back(StartNode(dir, id, ports, follow_views, heartbeat_ms));
  return nodes;
}

// True if every node started.
bool AllStarted(const std::vector<std::unique_ptr<Server>>& nodes) {
  return std::all_of(nodes.begin(), nodes.end(), [](const auto& n) { return n != nullptr; });
}

// Polls a node's stats until `done` holds or `seconds` pass.
bool WaitStats(Server& meta, int seconds, const std::function<bool(const ServerStats&)>& done) {
  const Deadline deadline = Secs(seconds);
  do {
    if (done(meta.Stats())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (!deadline.Expired());
  return false;
}

TEST(MembershipViewTest, ChainsFollowTheMembershipNotOnlyHeartbeats) {
  TempDir dir("iofs-view");
  const std::vector<uint16_t> ports = {FreePort(), FreePort(), FreePort()};
  std::vector<std::unique_ptr<Server>> nodes = StartNodes(dir.path(), ports, false);
  ASSERT_TRUE(AllStarted(nodes));
  Server& meta = *nodes[0];
  ASSERT_TRUE(meta.Stats().metadata_node);
  ASSERT_FALSE(nodes[1]->Stats().metadata_node);
  ASSERT_TRUE(WaitStats(meta, 10, [](const ServerStats& s) {
    return s.chains == 6 && s.chains_degraded == 0;
  })) << "the chains never all served";

  // Only the metadata node acts on the membership.
  nodes[1]->SetMembers({1, 2}, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(meta.Stats().chains_degraded, 0u);

  // Node 3 out of the view: its chains lose it at once (RF=2 over 3 nodes: 4 of 6 hold it), and
  // its answered heartbeats (5 per half second) do not bring it back.
  meta.SetMembers({1, 2}, 1);
  EXPECT_EQ(meta.Stats().chains_degraded, 4u);
  EXPECT_EQ(meta.Stats().chains_stopped, 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_EQ(meta.Stats().chains_degraded, 4u) << "a heartbeat brought node 3 back";

  Io io;
  auto client = io.Run(Client::Connect("127.0.0.1", ports[1], Secs(10)));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const std::vector<std::byte> data = Content(7, 1, 1'500'000);
  const std::span<const std::byte> bytes(data);
  ASSERT_TRUE(io.Run((*client)->Create("/f", Secs(10))).ok());
  Status wrote = io.Run((*client)->WriteParallel("/f", 0, bytes, 4, Secs(30)));
  ASSERT_TRUE(wrote.ok()) << wrote.ToString();
  ASSERT_TRUE(io.Run((*client)->Seal("/f", Secs(10))).ok());

  // Back in the view: it resyncs what it missed and every chain serves with both home nodes.
  meta.SetMembers({1, 2, 3}, 2);
  ASSERT_TRUE(WaitStats(meta, 30, [](const ServerStats& s) { return s.chains_degraded == 0; }))
      << "node 3's chains did not heal";
  auto via3 = io.Run(Client::Connect("127.0.0.1", ports[2], Secs(10)));
  ASSERT_TRUE(via3.ok()) << via3.status().ToString();
  auto got = io.Run((*via3)->Read("/f", 0, data.size(), Secs(30)));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data) << "the file read through node 3 differs";
  EXPECT_GT(meta.Stats().written_bytes + nodes[1]->Stats().written_bytes, data.size());
  for (auto& n : nodes) EXPECT_TRUE(n->Shutdown(Secs(10)).ok());
}

// Creates, writes and seals `path` through the node at `port`.
void WriteFile(Io& io, uint16_t port, const std::string& path, const std::vector<std::byte>& data) {
  auto client = io.Run(Client::Connect("127.0.0.1", port, Secs(10)));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto created = io.Run((*client)->Create(path, Secs(30)));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Status wrote = io.Run((*client)->WriteParallel(path, 0, std::span(data), 4, Secs(30)));
  ASSERT_TRUE(wrote.ok()) << wrote.ToString();
  ASSERT_TRUE(io.Run((*client)->Seal(path, Secs(10))).ok());
}

// Reads `path` whole through the node at `port`.
Result<std::vector<std::byte>> ReadFile(Io& io, uint16_t port, const std::string& path,
                                        size_t size) {
  auto client = io.Run(Client::Connect("127.0.0.1", port, Secs(10)));
  if (!client.ok()) return client.status();
  return io.Run((*client)->Read(path, 0, size, Secs(30)));
}

TEST(MetadataFailoverTest, TheRoleMovesWithTheViewsAndKeepsTheNamespace) {
  TempDir dir("iofs-failover");
  const std::vector<uint16_t> ports = {FreePort(), FreePort(), FreePort()};
  std::vector<std::unique_ptr<Server>> nodes = StartNodes(dir.path(), ports, true);
  ASSERT_TRUE(AllStarted(nodes));
  Io io;
  // Before the first view nobody serves files, and a client is told why.
  auto early = io.Run(Client::Connect("127.0.0.1", ports[1], Secs(10)));
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.status().code(), StatusCode::kUnavailable) << early.status().ToString();
  EXPECT_NE(early.status().message().find("no metadata node yet"), std::string::npos)
      << early.status().ToString();

  for (auto& n : nodes) n->SetMembers({1, 2, 3}, 1);
  ASSERT_TRUE(WaitStats(*nodes[0], 10, [](const ServerStats& s) {
    return s.metadata_node && s.chains == 6 && s.chains_degraded == 0;
  })) << "node 1 never served every chain";
  EXPECT_EQ(nodes[1]->Stats().meta_node, 1u);
  const std::vector<std::byte> a = Content(11, 1, 1'500'000);
  WriteFile(io, ports[1], "/ckpt/a", a);

  // Node 1 is gone and the next view leaves it out: node 2 takes the role over.
  ASSERT_TRUE(nodes[0]->Shutdown(Secs(10)).ok());
  nodes[0].reset();
  nodes[1]->SetMembers({2, 3}, 2);
  nodes[2]->SetMembers({2, 3}, 2);
  // (The takeover ends after the view names node 2: wait for it, not only for the view.)
  ASSERT_TRUE(WaitStats(*nodes[1], 30, [](const ServerStats& s) {
    return s.metadata_node && s.takeovers > 0;
  })) << "node 2 never took the metadata role over";
  const ServerStats taken = nodes[1]->Stats();
  EXPECT_EQ(taken.takeovers, 1u);
  EXPECT_EQ(taken.chains_degraded, 4u) << "RF 2 over 3 nodes: 4 of 6 chains held node 1";
  EXPECT_EQ(taken.chains_stopped, 0u);
  EXPECT_EQ(nodes[2]->Stats().meta_node, 2u);
  auto got_a = ReadFile(io, ports[2], "/ckpt/a", a.size());
  ASSERT_TRUE(got_a.ok()) << got_a.status().ToString();
  EXPECT_TRUE(*got_a == a) << "the file written before the takeover differs";
  const std::vector<std::byte> b = Content(12, 1, 900'000);
  WriteFile(io, ports[2], "/ckpt/b", b);

  // An older view changes nothing.
  nodes[1]->SetMembers({1, 2, 3}, 1);
  EXPECT_EQ(nodes[1]->Stats().meta_node, 2u);
  EXPECT_TRUE(nodes[1]->Stats().metadata_node);

  // Node 1 returns as the youngest member of a newer view (ringtraind lists the members eldest
  // first): node 2 keeps the role without a takeover, and node 1's chains heal.
  nodes[0] = StartNode(dir.path(), 1, ports, true);
  ASSERT_NE(nodes[0], nullptr);
  for (auto& n : nodes) n->SetMembers({2, 3, 1}, 3);
  ASSERT_TRUE(WaitStats(*nodes[1], 30, [](const ServerStats& s) { return s.chains_degraded == 0; }))
      << "node 1's chains did not heal under node 2";
  EXPECT_TRUE(nodes[1]->Stats().metadata_node);
  EXPECT_EQ(nodes[1]->Stats().takeovers, 1u);
  EXPECT_EQ(nodes[0]->Stats().meta_node, 2u);
  EXPECT_FALSE(nodes[0]->Stats().metadata_node);
  auto via_1 = ReadFile(io, ports[0], "/ckpt/b", b.size());
  ASSERT_TRUE(via_1.ok()) << via_1.status().ToString();
  EXPECT_TRUE(*via_1 == b);

  // A view that names node 1 first gives it the role, with node 2's changes.
  for (auto& n : nodes) n->SetMembers({1, 2, 3}, 4);
  ASSERT_TRUE(WaitStats(*nodes[0], 30, [](const ServerStats& s) {
    return s.metadata_node && s.chains_degraded == 0;
  })) << "node 1 did not take the role back with every chain healed";
  EXPECT_TRUE(WaitStats(*nodes[1], 10, [](const ServerStats& s) { return !s.metadata_node; }));
  EXPECT_EQ(nodes[1]->Stats().meta_node, 1u);
  for (uint16_t port : ports) {
    auto again_a = ReadFile(io, port, "/ckpt/a", a.size());
    auto again_b = ReadFile(io, port, "/ckpt/b", b.size());
    ASSERT_TRUE(again_a.ok()) << again_a.status().ToString();
    ASSERT_TRUE(again_b.ok()) << again_b.status().ToString();
    EXPECT_TRUE(*again_a == a) << "port " << port;
    EXPECT_TRUE(*again_b == b) << "port " << port;
  }

  // Node 1 is cut off (it sees no view without it) while nodes 2 and 3 go on: node 2 takes the
  // role over. Back in a view, node 1 missed views, so it takes the role over anew instead of
  // going on with its old chain manager and namespace.
  nodes[1]->SetMembers({2, 3}, 5);
  nodes[2]->SetMembers({2, 3}, 5);
  ASSERT_TRUE(WaitStats(*nodes[1], 30, [](const ServerStats& s) { return s.metadata_node; }));
  const std::vector<std::byte> c = Content(13, 1, 700'000);
  WriteFile(io, ports[2], "/ckpt/c", c);
  for (auto& n : nodes) n->SetMembers({1, 2, 3}, 6);
  ASSERT_TRUE(WaitStats(*nodes[0], 30, [](const ServerStats& s) {
    return s.metadata_node && s.takeovers == 2 && s.chains_degraded == 0;
  })) << "node 1 did not take the role over anew after the views it missed";
  auto got_c = ReadFile(io, ports[0], "/ckpt/c", c.size());
  ASSERT_TRUE(got_c.ok()) << got_c.status().ToString();
  EXPECT_TRUE(*got_c == c) << "the file written while node 1 was cut off differs";

  auto client = io.Run(Client::Connect("127.0.0.1", ports[0], Secs(10)));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto fsck = io.Run((*client)->Fsck(false, Secs(60)));
  ASSERT_TRUE(fsck.ok()) << fsck.status().ToString();
  EXPECT_TRUE(fsck->problems.empty()) << fsck->problems.front();
  EXPECT_EQ(fsck->files, 3u);
  for (auto& n : nodes) EXPECT_TRUE(n->Shutdown(Secs(10)).ok());
}

// A metadata node that loses a majority of the store nodes (here: both others stop) freezes
// within a second: file operations fail with Unavailable instead of acting on a namespace another
// node may be taking over. When a majority answers again it takes the role over anew and serves.
TEST(MetadataFailoverTest, AnIsolatedMetadataNodeFreezesAndTakesTheRoleOverAgain) {
  TempDir dir("iofs-isolated");
  const std::vector<uint16_t> ports = {FreePort(), FreePort(), FreePort()};
  std::vector<std::unique_ptr<Server>> nodes = StartNodes(dir.path(), ports, true);
  ASSERT_TRUE(AllStarted(nodes));
  for (auto& n : nodes) n->SetMembers({1, 2, 3}, 1);
  ASSERT_TRUE(WaitStats(*nodes[0], 10, [](const ServerStats& s) {
    return s.metadata_node && s.chains_degraded == 0;
  }));
  Io io;
  const std::vector<std::byte> a = Content(21, 1, 600'000);
  WriteFile(io, ports[0], "/a", a);
  auto client = io.Run(Client::Connect("127.0.0.1", ports[0], Secs(10)));
  ASSERT_TRUE(client.ok()) << client.status().ToString();

  for (int i : {1, 2}) {
    ASSERT_TRUE(nodes[i]->Shutdown(Secs(10)).ok());
    nodes[i].reset();
  }
  Status frozen;
  const Deadline deadline = Secs(10);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    frozen = io.Run((*client)->Stat("/a", Secs(5))).status();
  } while (frozen.ok() && !deadline.Expired());
  EXPECT_EQ(frozen.code(), StatusCode::kUnavailable) << frozen.ToString();
  EXPECT_NE(frozen.message().find("majority"), std::string::npos) << frozen.ToString();

  for (int i : {1, 2}) {
    nodes[i] = StartNode(dir.path(), static_cast<uint32_t>(i + 1), ports, true);
    ASSERT_NE(nodes[i], nullptr);
  }
  ASSERT_TRUE(WaitStats(*nodes[0], 30, [](const ServerStats& s) {
    return s.metadata_node && s.takeovers == 2 && s.chains_degraded == 0;
  })) << "node 1 did not take the role over again";
  auto got = ReadFile(io, ports[0], "/a", a.size());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == a);
  for (auto& n : nodes) EXPECT_TRUE(n->Shutdown(Secs(10)).ok());
}

// Seconds since `start`.
double Since(MonoTime start) {
  return std::chrono::duration<double>(MonoClock::now() - start).count();
}

// Node 1, the metadata node, is cut off in its own eyes only: it still reaches nodes 2 and 3,
// but their view leaves it out. They answer only the metadata node they follow (node 2) from
// then on, so node 1 freezes although it reaches them, and before node 2 serves: node 2 acts
// 1.4 s (the freeze bound, heartbeats of 200 ms) after their last answer to node 1, not sooner.
// Later node 2 is gone for longer than the bound when node 1 takes the role back: no answer to
// node 2 is that recent, so this takeover does not wait; with node 2 back every file reads whole.
TEST(MetadataFailoverTest, TakeoversWaitForTheOldMetadataNodesLastAnswerOnly) {
  TempDir dir("iofs-last-answer");
  const std::vector<uint16_t> ports = {FreePort(), FreePort(), FreePort()};
  std::vector<std::unique_ptr<Server>> nodes =
      StartNodes(dir.path(), ports, true, /*heartbeat_ms=*/200);
  ASSERT_TRUE(AllStarted(nodes));
  for (auto& n : nodes) n->SetMembers({1, 2, 3}, 1);
  ASSERT_TRUE(WaitStats(*nodes[0], 10, [](const ServerStats& s) {
    return s.metadata_node && s.chains_degraded == 0;
  }));
  Io io;
  const std::vector<std::byte> a = Content(31, 1, 400'000);
  WriteFile(io, ports[0], "/a", a);
  auto old_meta = io.Run(Client::Connect("127.0.0.1", ports[0], Secs(10)));
  ASSERT_TRUE(old_meta.ok()) << old_meta.status().ToString();

  const MonoTime cut = MonoClock::now();
  nodes[1]->SetMembers({2, 3}, 2);
  nodes[2]->SetMembers({2, 3}, 2);
  ASSERT_TRUE(WaitStats(*nodes[1], 30, [](const ServerStats& s) {
    return s.metadata_node && s.takeovers > 0;
  })) << "node 2 never took the metadata role over";
  EXPECT_GE(Since(cut), 1.2) << "node 2 acted before node 1 was sure to have frozen";
  const Status frozen = io.Run((*old_meta)->Stat("/a", Secs(5))).status();
  EXPECT_EQ(frozen.code(), StatusCode::kUnavailable) << frozen.ToString();
  EXPECT_NE(frozen.message().find("majority"), std::string::npos) << frozen.ToString();
  EXPECT_TRUE(nodes[0]->Stats().metadata_node) << "node 1 saw no view: the role is its own";
  const std::vector<std::byte> b = Content(32, 1, 300'000);
  WriteFile(io, ports[2], "/b", b);

  ASSERT_TRUE(nodes[1]->Shutdown(Secs(10)).ok());
  nodes[1].reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  const MonoTime back = MonoClock::now();
  nodes[0]->SetMembers({1, 3}, 3);
  nodes[2]->SetMembers({1, 3}, 3);
  ASSERT_TRUE(WaitStats(*nodes[0], 30, [](const ServerStats& s) {
    return s.metadata_node && s.takeovers == 2;
  })) << "node 1 did not take the role over anew";
  EXPECT_LT(Since(back), 1.0) << "the takeover waited although node 2 was gone for 2 s";
  // Node 2 holds the only copy of some chains (node 1 was out of them): back in a view, it
  // rejoins them and every file reads whole.
  nodes[1] = StartNode(dir.path(), 2, ports, true, /*heartbeat_ms=*/200);
  ASSERT_NE(nodes[1], nullptr);
  for (auto& n : nodes) n->SetMembers({1, 2, 3}, 4);
  ASSERT_TRUE(WaitStats(*nodes[0], 30, [](const ServerStats& s) {
    return s.metadata_node && s.chains_degraded == 0 && s.chains_stopped == 0;
  })) << "node 2 did not rejoin its chains";
  for (const auto& [path, content] : {std::pair{"/a", a}, std::pair{"/b", b}}) {
    auto got = ReadFile(io, ports[2], path, content.size());
    ASSERT_TRUE(got.ok()) << path << ": " << got.status().ToString();
    EXPECT_TRUE(*got == content) << path;
  }
  for (auto& n : nodes) EXPECT_TRUE(n->Shutdown(Secs(10)).ok());
}

// A takeover asks every other member of the view for what it knows, all at once, 3 s each at
// most; a member cut off by a partition (here: a port that accepts connections and never
// answers) must not hold the role when a newer view comes meanwhile. Node 2 becomes the
// metadata node of view 1 {2, 3} (node 3 silent), then of view 2 {2}: it holds the role within
// the freeze bound (0.7 s) of view 2, not after node 3's 3 s.
TEST(MetadataFailoverTest, ANewerViewEndsATakeoverWaitingOnASilentMember) {
  TempDir dir("iofs-silent-member");
  const int silent = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(silent, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(silent, 16), 0);  // connections complete in the backlog; nothing answers
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(silent, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::vector<uint16_t> ports = {FreePort(), FreePort(), ntohs(address.sin_port)};
  std::vector<std::unique_ptr<Server>> nodes;  // nodes 1 and 2; node 3 is the silent socket
  for (uint32_t id = 1; id <= 2; ++id) {
    nodes.push_back(StartNode(dir.path(), id, ports, true));
    ASSERT_NE(nodes.back(), nullptr);
  }
  const MonoTime start = MonoClock::now();
  for (auto& n : nodes) n->SetMembers({2, 3}, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (auto& n : nodes) n->SetMembers({2}, 2);
  ASSERT_TRUE(WaitStats(*nodes[1], 10, [](const ServerStats& s) { return s.metadata_node; }))
      << "node 2 never took the metadata role";
  const double seconds = std::chrono::duration<double>(MonoClock::now() - start).count();
  EXPECT_LT(seconds, 2.5) << "the takeover waited for the silent member";
  EXPECT_FALSE(nodes[0]->Stats().metadata_node);
  for (auto& n : nodes) EXPECT_TRUE(n->Shutdown(Secs(10)).ok());
  close(silent);
}

}  // namespace
}  // namespace rt::iofs
