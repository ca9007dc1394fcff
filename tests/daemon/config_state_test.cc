// node.toml parsing and the replicated cluster state's encoding.
#include <gtest/gtest.h>

#include "daemon/cluster_state.h"
#include "daemon/control_api.h"
#include "daemon/embedded_store.h"
#include "daemon/node_config.h"

namespace rt::daemon {
namespace {

TEST(NodeConfigTest, ReadsEveryKeyAndTheSeedList) {
  auto c = ParseNodeConfig(R"(
[node]
id = 3
listen = "127.0.0.1:7703"
state_dir = "/tmp/n3"
slots = 2
[cluster]
seeds = "127.0.0.1:7701, 127.0.0.1:7702,"
[auth]
secret_file = "/etc/ringtrain/secret"
[tls]
cert_file = "/etc/ringtrain/tls/node-3.pem"
key_file = "/etc/ringtrain/tls/node-3.key"
ca_file = "/etc/ringtrain/tls/ca.pem"
[worker]
stop_grace_ms = 500
env = "OMP_NUM_THREADS=1"
)",
                           "node.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->id, 3);
  EXPECT_EQ(c->slots, 2);
  EXPECT_EQ(c->AdvertisedAddress(), "127.0.0.1:7703");
  EXPECT_EQ(c->SeedList(), (std::vector<std::string>{"127.0.0.1:7701", "127.0.0.1:7702"}));
  EXPECT_EQ(c->secret_file, "/etc/ringtrain/secret");
  EXPECT_EQ(c->tls.cert_file, "/etc/ringtrain/tls/node-3.pem");
  EXPECT_EQ(c->tls.key_file, "/etc/ringtrain/tls/node-3.key");
  EXPECT_EQ(c->tls.ca_file, "/etc/ringtrain/tls/ca.pem");
  EXPECT_EQ(c->stop_grace_ms, 500);
}

TEST(NodeConfigTest, BadInputIsRefusedNamingFileLineAndKey) {
  auto missing = ParseNodeConfig("[node]\nstate_dir = \"/x\"\n", "node.toml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().ToString().find("node.id"), std::string::npos);
  auto unknown = ParseNodeConfig("[node]\nid = 1\nstate_dir = \"/x\"\nslot = 2\n", "node.toml");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().ToString().find("node.slot"), std::string::npos);
  EXPECT_NE(unknown.status().ToString().find("node.toml"), std::string::npos);
  auto zero = ParseNodeConfig("[node]\nid = 0\nstate_dir = \"/x\"\n", "node.toml");
  EXPECT_FALSE(zero.ok());
  auto port = ParseNodeConfig("[node]\nid = 1\nstate_dir = \"/x\"\nlisten = \"host\"\n", "n");
  ASSERT_FALSE(port.ok());
  EXPECT_NE(port.status().ToString().find("node.listen"), std::string::npos);
  auto seed = ParseNodeConfig(
      "[node]\nid = 1\nstate_dir = \"/x\"\n[cluster]\nseeds = \"a:1,b:99999\"\n", "n");
  ASSERT_FALSE(seed.ok());
  EXPECT_NE(seed.status().ToString().find("b:99999"), std::string::npos);
}

TEST(NodeConfigTest, HttpListenIsOptionalAndChecked) {
  auto off = ParseNodeConfig("[node]\nid = 1\nstate_dir = \"/x\"\n", "node.toml");
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->http_listen, "") << "no HTTP listener unless asked for";
  auto on = ParseNodeConfig(
      "[node]\nid = 1\nstate_dir = \"/x\"\n[http]\nlisten = \"0.0.0.0:7780\"\n", "node.toml");
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_EQ(on->http_listen, "0.0.0.0:7780");
  for (const char* bad : {"7780", "localhost:http", "127.0.0.1:70000", ":7780"}) {
    auto r = ParseNodeConfig(
        std::string("[node]\nid = 1\nstate_dir = \"/x\"\n[http]\n") + "listen = \"" + bad + "\"\n",
        "node.toml");
    ASSERT_FALSE(r.ok()) << bad;
    const std::string error = r.status().ToString();
    EXPECT_NE(error.find("http.listen"), std::string::npos) << error;
    EXPECT_NE(error.find(bad), std::string::npos) << error;
  }
  auto typed =
      ParseNodeConfig("[node]\nid = 1\nstate_dir = \"/x\"\n[http]\nlisten = 7780\n", "node.toml");
  ASSERT_FALSE(typed.ok());
  EXPECT_NE(typed.status().ToString().find("http.listen"), std::string::npos);
}

TEST(NodeConfigTest, EtcdKeysAreOptionalAndChecked) {
  auto off = ParseNodeConfig("[node]\nid = 1\nstate_dir = \"/x\"\n", "node.toml");
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->etcd, "") << "the ring's own membership unless etcd is named";
  EXPECT_EQ(off->etcd_prefix, "/ringtrain/default");
  EXPECT_EQ(off->etcd_lease_s, 2);
  auto on = ParseNodeConfig(
      "[node]\nid = 1\nstate_dir = \"/x\"\n[cluster]\netcd = \"http://10.0.0.9:2379\"\n"
      "etcd_prefix = \"/jobs/a\"\netcd_lease_s = 5\n",
      "node.toml");
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_EQ(on->etcd, "http://10.0.0.9:2379");
  EXPECT_EQ(on->etcd_prefix, "/jobs/a");
  EXPECT_EQ(on->etcd_lease_s, 5);
  for (const char* bad :
       {"etcd = \"10.0.0.9:2379\"", "etcd = \"https://h:2379\"", "etcd = \"http://h:99999\"",
        "etcd = \"http://h:2379\"\netcd_prefix = \"/a/\"",
        "etcd = \"http://h:2379\"\netcd_lease_s = 0"}) {
    auto r = ParseNodeConfig(
        std::string("[node]\nid = 1\nstate_dir = \"/x\"\n[cluster]\n") + bad + "\n", "node.toml");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().ToString().find("cluster.etcd"), std::string::npos)
        << r.status().ToString();
  }
}

TEST(NodeConfigTest, StoreKeysGiveTheChunkServerOptions) {
  auto off = ParseNodeConfig("[node]\nid = 1\nstate_dir = \"/x\"\n", "node.toml");
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->store_listen, "") << "no chunk store unless [store] listen is given";

  // One node alone: its own endpoint, replication 1.
  auto alone = ParseNodeConfig(
      "[node]\nid = 4\nstate_dir = \"/x\"\n[store]\nlisten = \"0.0.0.0:7701\"\n", "node.toml");
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  Result<iofs::ServerOptions> o = StoreServerOptions(*alone);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->self, 4u);
  EXPECT_EQ(o->state_dir, "/x/store");
  EXPECT_EQ(o->listen_host, "0.0.0.0");
  ASSERT_EQ(o->nodes.size(), 1u);
  EXPECT_EQ(o->nodes[0].id, 4u);
  EXPECT_EQ(o->nodes[0].host, "127.0.0.1");
  EXPECT_EQ(o->nodes[0].port, 7701);
  EXPECT_EQ(o->replication, 1);

  // A cluster: replication 0 means min(3, nodes); the secret of [auth] protects it too.
  auto four = ParseNodeConfig(
      "[node]\nid = 2\nstate_dir = \"/x\"\n[auth]\nsecret_file = \"/s\"\n[store]\n"
      "listen = \"10.0.0.2:7701\"\nnodes = \"1@10.0.0.1:7701,2@10.0.0.2:7701,3@10.0.0.3:7701,"
      "4@10.0.0.4:7701\"\nchains = 16\ncapacity_gib = 2\n",
      "node.toml");
  ASSERT_TRUE(four.ok()) << four.status().ToString();
  o = StoreServerOptions(*four);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->nodes.size(), 4u);
  EXPECT_EQ(o->replication, 3);
  EXPECT_EQ(o->chains, 16);
  EXPECT_EQ(o->engine.capacity_bytes, uint64_t{2} << 30);
  EXPECT_EQ(o->secret_file, "/s");
  EXPECT_TRUE(o->tls.empty());

  const std::string head = "[node]\nid = 2\nstate_dir = \"/x\"\n[store]\n";
  const std::pair<const char*, const char*> bad[] = {
      {"listen = \"7701\"", "store.listen"},
      {"listen = \"127.0.0.1:7701\"\nnodes = \"1@127.0.0.1:7701\"", "does not list this node"},
      {"listen = \"127.0.0.1:7702\"\nnodes = \"2@127.0.0.1:7701\"", "port 7701"},
      {"listen = \"127.0.0.1:0\"\nnodes = \"1@127.0.0.1:7701,2@127.0.0.1:0\"", "fixed port"},
      {"listen = \"127.0.0.1:7701\"\nnodes = \"2@127.0.0.1:7701,2@127.0.0.1:7702\"", "twice"},
      {"listen = \"127.0.0.1:7701\"\nnodes = \"2@127.0.0.1\"", "ID@HOST:PORT"},
      {"listen = \"127.0.0.1:7701\"\nreplication = 2", "exceeds the 1 store node"},
      {"listen = \"127.0.0.1:7701\"\nreplication = 4", "store.replication"},
  };
  for (const auto& [keys, want] : bad) {
    auto r = ParseNodeConfig(head + keys + "\n", "node.toml");
    ASSERT_FALSE(r.ok()) << keys;
    const std::string error = r.status().ToString();
    EXPECT_NE(error.find("node.toml"), std::string::npos) << error;
    EXPECT_NE(error.find(want), std::string::npos) << keys << ": " << error;
  }
}

TEST(EmbeddedStoreTest, ResolvesOnlyTheLocalStoreUri) {
  EXPECT_EQ(*ResolveLocalStore("ringfs:///ckpt/run1", "10.0.0.2:7701"),
            "ringfs://10.0.0.2:7701/ckpt/run1");
  for (const char* other : {"/data/ckpt", "ringfs://h:1/ckpt", "mem://m", "file:///d", ""})
    EXPECT_EQ(*ResolveLocalStore(other, ""), other);
  Result<std::string> none = ResolveLocalStore("ringfs:///ckpt", "");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().ToString().find("[store]"), std::string::npos);
}

ClusterState Sample() {
  ClusterState s;
  s.PutNode({3, 2, "127.0.0.1:4003", 12});
  s.PutNode({1, 4, "127.0.0.1:4001"});
  s.job = JobEntry{7, "tiny", "[model]\nn_layer = 2 # \"quoted\"\n", JobDesire::kStop, 0};
  s.epoch = 12;
  s.max_nodes = 2;
  s.drained = {2, 5};
  s.cause = {"worker rank 1 on node 3 exited: signal 9 (Killed)", 1764150000123};
  s.stop_at = StopAt{"3.4.12", 41, "node(s) 2 joined", /*snapshot=*/true};
  s.committed = Committed{"3.4.11", 35, "/tmp/ckpt"};
  return s;
}

TEST(ClusterStateTest, RoundTripsEveryField) {
  const ClusterState s = Sample();
  ASSERT_EQ(s.nodes.size(), 2u);
  EXPECT_EQ(s.nodes[0].id, 1u) << "PutNode keeps the nodes sorted";
  auto back = DecodeClusterState(EncodeClusterState(s));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, s);
  ClusterState empty;
  auto none = DecodeClusterState(EncodeClusterState(empty));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, empty);
  auto blank = DecodeClusterState("");
  ASSERT_TRUE(blank.ok());
  EXPECT_EQ(*blank, empty);
}

// A version 1 blob (written before stop_at and committed existed) still decodes, without them;
// version 1 ignores those keys.
TEST(ClusterStateTest, VersionOneStillDecodes) {
  const std::string v1 =
      R"({"format":"ringtrain.cluster_state","version":1,"nodes":[{"id":1,"slots":2,)"
      R"("rendezvous":"127.0.0.1:4000"}],"job":null,"epoch":3,"max_nodes":0,"drained":[],)"
      R"("cause":{"what":"node 1 registered","at_unix_ms":7},"stop_at":"ignored"})";
  auto s = DecodeClusterState(v1);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->epoch, 3u);
  ASSERT_EQ(s->nodes.size(), 1u);
  EXPECT_EQ(s->nodes[0].rendezvous, "127.0.0.1:4000");
  EXPECT_FALSE(s->stop_at.has_value());
  EXPECT_FALSE(s->committed.has_value());
  EXPECT_EQ(s->nodes[0].joined_epoch, 0u);
  // Re-encoded it is version 3, with null stop_at and committed.
  const std::string v3 = EncodeClusterState(*s);
  EXPECT_NE(v3.find("\"version\":3"), std::string::npos) << v3;
  EXPECT_NE(v3.find("\"stop_at\":null"), std::string::npos) << v3;
  auto back = DecodeClusterState(v3);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *s);
}

// Version 2 (before joined_epoch): nodes registered at epoch 0, so every plan may use them.
TEST(ClusterStateTest, VersionTwoNodesJoinedAtEpochZero) {
  std::string v2 = EncodeClusterState(Sample());
  const std::string field = ",\"joined_epoch\":12";
  ASSERT_NE(v2.find(field), std::string::npos) << v2;
  v2.erase(v2.find(field), field.size());
  v2.replace(v2.find("\"version\":3"), 11, "\"version\":2");
  auto s = DecodeClusterState(v2);
  ASSERT_TRUE(s.ok()) << s.status().ToString() << "\n" << v2;
  for (const NodeEntry& n : s->nodes) {
    EXPECT_EQ(n.joined_epoch, 0u);
    EXPECT_TRUE(s->Plannable(n));
  }
}

// A node that registered during the state's epoch is left out of that epoch's plans, and of no
// later one's; registering again with the same slots and address is no change.
TEST(ClusterStateTest, NodesRegisteredDuringTheEpochWaitForTheNext) {
  ClusterState s = Sample();
  const NodeEntry* late = s.FindNode(3);
  ASSERT_NE(late, nullptr);
  EXPECT_FALSE(s.Plannable(*late)) << "joined_epoch 12 = epoch 12";
  EXPECT_TRUE(s.Plannable(*s.FindNode(1)));
  EXPECT_TRUE(late->SameRegistration({3, 2, "127.0.0.1:4003", 0}));
  EXPECT_FALSE(late->SameRegistration({3, 2, "127.0.0.1:5003", 12}));
  ++s.epoch;
  EXPECT_TRUE(s.Plannable(*s.FindNode(3)));
}

// Registering: a new node waits for the next epoch; a node the epoch's plans use that
// registers anew (restarted, with another rendezvous address) starts a new epoch and keeps its
// place, so no daemon plans it at the address that is gone; the same registration is no change.
TEST(ClusterStateTest, ARestartedNodeRegistersIntoANewEpochAndANewOneWaits) {
  ClusterState s = Sample();  // epoch 12; node 1 plannable, node 3 registered during epoch 12
  ASSERT_TRUE(s.Plannable(*s.FindNode(1)));
  const uint64_t joined1 = s.FindNode(1)->joined_epoch;
  EXPECT_FALSE(s.Register(*s.FindNode(1), 5)) << "the same registration";
  EXPECT_EQ(s.epoch, 12u);

  EXPECT_TRUE(s.Register({1, s.FindNode(1)->slots, "127.0.0.1:6001", 0}, 6));
  EXPECT_EQ(s.epoch, 13u);
  EXPECT_EQ(s.FindNode(1)->rendezvous, "127.0.0.1:6001");
  EXPECT_EQ(s.FindNode(1)->joined_epoch, joined1);
  EXPECT_TRUE(s.Plannable(*s.FindNode(1)));
  EXPECT_NE(s.cause.what.find("node 1 registered anew"), std::string::npos) << s.cause.what;

  EXPECT_TRUE(s.Register({9, 1, "127.0.0.1:6009", 0}, 7));  // a new node
  EXPECT_EQ(s.epoch, 13u);
  EXPECT_EQ(s.FindNode(9)->joined_epoch, 13u);
  EXPECT_FALSE(s.Plannable(*s.FindNode(9)));
  EXPECT_TRUE(s.Register({9, 1, "127.0.0.1:7009", 0}, 8));  // again within its first epoch
  EXPECT_EQ(s.epoch, 13u);
  EXPECT_FALSE(s.Plannable(*s.FindNode(9)));
}

TEST(ClusterStateTest, MalformedBlobsAreCorruptionNamingTheProblem) {
  const std::string good = EncodeClusterState(Sample());
  auto replace = [&good](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "not valid JSON"},
      {"[1,2]", "not a JSON object"},
      {replace("ringtrain.cluster_state", "other"), "format"},
      {replace("\"version\":3", "\"version\":4"), "version 4"},
      {replace("\"joined_epoch\":12", "\"joined_epoch\":-12"), "joined_epoch"},
      {replace("\"step\":41", "\"step\":0"), "stop_at.step is 0"},
      {replace("\"snapshot\":true", "\"snapshot\":1"), "stop_at.snapshot"},
      {replace("\"generation\":\"3.4.11\"", "\"generation\":\"\""), "committed.generation"},
      {replace("\"uri\":\"/tmp/ckpt\"", "\"uri\":5"), "committed.uri"},
      {replace("\"stop_at\":{", "\"stop_at\":7,\"x\":{"), "stop_at is not an object"},
      {replace("\"epoch\":12", "\"epoch\":-1"), "epoch"},
      {replace("\"epoch\":12", "\"epoch\":\"12\""), "epoch"},
      {replace("\"id\":1,", "\"id\":0,"), "node id 0"},
      {replace("\"id\":1,", "\"id\":9,"), "sorted"},
      {replace("\"slots\":4", "\"slots\":1025"), "slots"},
      {replace("\"desire\":\"stop\"", "\"desire\":\"pause\""), "pause"},
      {replace("[2,5]", "[5,2]"), "drained"},
      {replace("\"max_nodes\":2", "\"max_nodes\":99999"), "max_nodes"},
  };
  for (const auto& [blob, expected] : cases) {
    auto r = DecodeClusterState(blob);
    ASSERT_FALSE(r.ok()) << blob;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
    EXPECT_NE(r.status().ToString().find(expected), std::string::npos)
        << r.status().ToString() << " should name " << expected;
  }
  EXPECT_FALSE(DecodeClusterState(std::string(kMaxClusterStateBytes + 1, ' ')).ok());
}

TEST(ControlApiTest, JsonFieldsAreCheckedForTypeAndRange) {
  auto j = DecodeJsonObject(EncodeJson({{"nodes", 3}, {"name", "x"}, {"neg", -2}}), "scale");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(*IntField(*j, "nodes", 0, 10, "scale"), 3);
  EXPECT_FALSE(IntField(*j, "nodes", 4, 10, "scale").ok());
  EXPECT_FALSE(IntField(*j, "name", 0, 10, "scale").ok());
  EXPECT_FALSE(IntField(*j, "absent", 0, 10, "scale").ok());
  EXPECT_EQ(*IntField(*j, "absent", 0, 10, "scale", 7), 7);
  EXPECT_EQ(*StringField(*j, "name", "scale"), "x");
  EXPECT_FALSE(StringField(*j, "nodes", "scale").ok());
  const std::string text = "[1]";
  auto p = reinterpret_cast<const std::byte*>(text.data());
  EXPECT_FALSE(DecodeJsonObject({p, text.size()}, "x").ok());
}

}  // namespace
}  // namespace rt::daemon
