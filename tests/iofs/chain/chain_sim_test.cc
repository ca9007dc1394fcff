// Deterministic simulator for the chain replication state machines (iofs/chain): random node
// counts, replication factors and chains; a network that loses, reorders and duplicates
// messages; crashes and restarts (durable chunk state survives, everything else is lost); client
// writes with retries and reads at random replicas. Each seed checks, while running:
//   - no two replicas ever commit different values for the same (chunk, version);
//   - a read returns a committed value (never a pending one, never a mix);
// and after healing (every node restarted, no more loss):
//   - every chain converges: all home members serving, identical committed state, nothing
//     pending;
//   - no acknowledged write is lost: each chunk's final version is at least the highest
//     acknowledged one and holds the value committed under that version.
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "base/crc32c.h"
#include "iofs/chain/chain_manager.h"
#include "iofs/chain/codec.h"
#include "iofs/chain/replica.h"
#include "iofs/chain/value_buffer.h"

namespace rt::iofs::chain {
namespace {

struct ClientOp {
  ChunkKey key = 0;
  std::string value;
  int sent_at = 0;
  int head = -1;  // node the write was sent to
};

class Simulation {
 public:
  explicit Simulation(uint64_t seed)
      : rng_(seed), trace_(std::getenv("IOFS_SIM_TRACE") != nullptr) {
    nodes_ = 1 + Rand(5);
    rf_ = 1 + Rand(std::min(3, nodes_));
    chains_ = 1 + Rand(3);
    keys_ = 1 + Rand(4);
    drop_ = Rand(4) * 0.08;
    dup_ = Rand(3) * 0.05;
    std::vector<NodeId> ids;
    for (int n = 0; n < nodes_; ++n) ids.push_back(static_cast<NodeId>(n));
    auto layout = BuildChains(ids, rf_, chains_);
    RT_CHECK(layout.ok());
    manager_ = std::make_unique<ChainManager>(*layout);
    durable_.resize(nodes_);
    alive_.assign(nodes_, true);
    machines_.resize(nodes_);
    for (int n = 0; n < nodes_; ++n) StartNode(n);
    for (const ChainConfig& c : *layout) Deliver(c);
  }

  std::string Describe() const {
    return "nodes=" + std::to_string(nodes_) + " rf=" + std::to_string(rf_) +
           " chains=" + std::to_string(chains_) + " keys=" + std::to_string(keys_) +
           " drop=" + std::to_string(drop_) + " dup=" + std::to_string(dup_);
  }

  // Runs the chaotic phase, then heals and checks. Returns "" or the first violation.
  std::string Run(int steps) {
    for (int step = 0; step < steps && error_.empty(); ++step) Step(step, /*chaos=*/true);
    if (!error_.empty()) return error_;
    // Heal: restart every node, no more loss.
    drop_ = 0;
    dup_ = 0;
    for (int n = 0; n < nodes_; ++n)
      if (!alive_[n]) Restart(n);
    for (int step = 0; step < 20000 && error_.empty(); ++step) {
      Step(steps + step, /*chaos=*/false);
      if (step % 50 == 49 && Quiescent()) break;
    }
    if (!error_.empty()) return error_;
    return CheckFinal();
  }

 private:
  int Rand(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }
  double Uniform() { return std::uniform_real_distribution<double>(0, 1)(rng_); }

  void StartNode(int n) {
    machines_[n].clear();
    for (int c = 0; c < chains_; ++c)
      machines_[n].emplace(
          c, ReplicaMachine(static_cast<NodeId>(n), static_cast<ChainId>(c), durable_[n][c]));
  }

  void Deliver(const ChainConfig& config) {
    if (trace_) {
      std::string t = "config chain " + std::to_string(config.chain) + " v" +
                      std::to_string(config.version) + " [";
      for (const Member& m : config.members)
        t += std::to_string(m.node) + (m.state == MemberState::kSyncing ? "s " : " ");
      std::fprintf(stderr, "%s]\n", t.c_str());
    }
    for (NodeId n : manager_->home(config.chain))
      if (alive_[n]) {
        ReplicaMachine& m = machines_[n].at(config.chain);
        m.OnConfig(config);
        Drain(n, m);
      }
  }

  void Restart(int n) {
    if (trace_) std::fprintf(stderr, "restart %d\n", n);
    alive_[n] = true;
    StartNode(n);
    for (const ChainConfig& c : manager_->OnNodeUp(static_cast<NodeId>(n))) Deliver(c);
  }

  void Crash(int n) {
    if (trace_) std::fprintf(stderr, "crash %d\n", n);
    alive_[n] = false;
    machines_[n].clear();
    for (const ChainConfig& c : manager_->OnNodeDown(static_cast<NodeId>(n))) Deliver(c);
  }

  // Persists a machine's dirty chunks, checks commits, then carries out its outputs.
  void Drain(int n, ReplicaMachine& m) {
    for (ChunkKey key : m.TakeDirty()) {
      auto held = m.chunks().find(key);
      if (held ==
          m.chunks().end()) {  // forgotten (a dropped tombstone, or a key deleted while away)
        durable_[n][m.config().chain].erase(key);
        if (trace_)
          std::fprintf(stderr, "  node %d key %llu: forgotten\n", n, (unsigned long long)key);
        continue;
      }
      const ChunkState& st = held->second;
      durable_[n][m.config().chain][key] = st;
      if (trace_) {
        std::string p;
        for (const auto& [v, val] : st.pending) p += " " + std::to_string(v) + "=" + Show(val);
        std::fprintf(stderr, "  node %d key %llu: committed v%llu=%s pending{%s}\n", n,
                     (unsigned long long)key, (unsigned long long)st.committed_version,
                     st.committed_version ? Show(st.committed).c_str() : "-", p.c_str());
      }
      if (st.committed_version > 0) CheckCommit(key, st.committed_version, st.committed, n);
    }
    for (Output& out : m.TakeOutputs()) {
      switch (out.kind) {
        case Output::Kind::kSend:
          network_.push_back(std::move(out.message));
          break;
        case Output::Kind::kReply:
          OnReply(out);
          break;
        case Output::Kind::kSyncComplete:
          for (const ChainConfig& c :
               manager_->OnSyncComplete(out.node, out.chain, out.chain_version))
            Deliver(c);
          break;
      }
    }
  }

  static std::string Show(const Value& v) { return v.deleted() ? "<deleted>" : *v.data; }

  // What replica `m` holds of `key` once healed: "v<version>=<value>" for a live value,
  // "deleted" for a tombstone, a key never written or one forgotten.
  static std::string Live(const ReplicaMachine& m, ChunkKey key) {
    auto it = m.chunks().find(key);
    if (it == m.chunks().end() || it->second.committed_version == 0 ||
        it->second.committed.deleted())
      return "deleted";
    return "v" + std::to_string(it->second.committed_version) + "=" + Show(it->second.committed);
  }

  void CheckCommit(ChunkKey key, uint64_t version, const Value& value, int node) {
    auto [it, inserted] = commits_.emplace(std::make_pair(key, version), Show(value));
    if (!inserted && it->second != Show(value) && error_.empty())
      error_ = "node " + std::to_string(node) + " committed " + Show(value) + " as version " +
               std::to_string(version) + " of key " + std::to_string(key) +
               ", already committed as " + it->second;
  }

  void OnReply(const Output& out) {
    auto it = outstanding_.find(out.request_id);
    if (it == outstanding_.end()) return;
    if (out.code == StatusCode::kOk) {
      const ChunkKey key = it->second.key;
      acked_[key] = std::max(acked_[key], out.version);
      // The version acknowledged must have been committed with this request's value unless a
      // later version superseded it before it reached the tail.
      auto c = commits_.find({key, out.version});
      if (c != commits_.end() && c->second != it->second.value && error_.empty())
        error_ = "write " + it->second.value + " acknowledged as version " +
                 std::to_string(out.version) + " of key " + std::to_string(key) +
                 ", but that version committed " + c->second;
      outstanding_.erase(it);
    } else {
      retry_.push_back(std::move(it->second));
      outstanding_.erase(it);
    }
  }

  void SendWrite(ClientOp op, int now) {
    const ChainId chain = ChainOf(op.key, chains_);
    const ChainConfig& config = manager_->config(chain);
    op.sent_at = now;
    op.head = config.members.empty() ? -1 : static_cast<int>(config.members[0].node);
    const uint64_t request = ++next_request_;
    outstanding_.emplace(request, op);
    if (config.members.empty() || !alive_[config.members[0].node]) return;  // times out, retried
    ReplicaMachine& m = machines_[config.members[0].node].at(chain);
    if (trace_)
      std::fprintf(stderr, "client write %s key %llu at node %u\n", op.value.c_str(),
                   (unsigned long long)op.key, config.members[0].node);
    Value value{op.value == "<deleted>" ? nullptr : std::make_shared<const std::string>(op.value),
                op.value == "<deleted>"};
    m.OnClientWrite(request, op.key, value);
    Drain(static_cast<int>(config.members[0].node), m);
  }

  void Step(int now, bool chaos) {
    const int r = Rand(100);
    if (r < 45 && !network_.empty()) {
      const size_t i = static_cast<size_t>(Rand(static_cast<int>(network_.size())));  // reorder
      Message m = network_[i];
      if (Uniform() >= dup_) {
        network_[i] = std::move(network_.back());
        network_.pop_back();
      }
      if (Uniform() < drop_) return;
      if (!alive_[m.to]) return;
      if (trace_)
        std::fprintf(stderr, "msg %d %u->%u chain %u cv%llu key %llu v%llu %s\n", (int)m.kind,
                     m.from, m.to, m.chain, (unsigned long long)m.chain_version,
                     (unsigned long long)m.key, (unsigned long long)m.version,
                     m.kind == Message::Kind::kForward || m.kind == Message::Kind::kSync
                         ? Show(m.value).c_str()
                         : "");
      ReplicaMachine& rm = machines_[m.to].at(m.chain);
      rm.OnMessage(m);
      Drain(static_cast<int>(m.to), rm);
    } else if (r < 62) {
      const int n = Rand(nodes_);
      if (!alive_[n]) return;
      for (auto& [c, m] : machines_[n]) {
        m.OnTick();
        Drain(n, m);
      }
    } else if (r < 74) {
      if (!retry_.empty()) {
        ClientOp op = std::move(retry_.front());
        retry_.erase(retry_.begin());
        SendWrite(std::move(op), now);
      } else if (chaos && outstanding_.size() < 6) {
        ClientOp op;
        op.key = static_cast<ChunkKey>(Rand(keys_));
        op.value = Rand(10) == 0 ? "<deleted>" : "w" + std::to_string(++next_value_);
        SendWrite(std::move(op), now);
      }
    } else if (r < 78) {
      // Client timeouts: a write whose head crashed or stopped being the head (the connection
      // broke), or that waited very long, is retried as a new write of the same value.
      for (auto it = outstanding_.begin(); it != outstanding_.end();) {
        const ChainConfig& config = manager_->config(ChainOf(it->second.key, chains_));
        const bool head_gone = it->second.head < 0 || !alive_[it->second.head] ||
                               config.members.empty() ||
                               static_cast<int>(config.members[0].node) != it->second.head;
        if ((head_gone && now - it->second.sent_at > 20) || now - it->second.sent_at > 2000) {
          retry_.push_back(it->second);
          it = outstanding_.erase(it);
        } else {
          ++it;
        }
      }
    } else if (r < 92) {
      // A read at a random live replica of a random key.
      const int n = Rand(nodes_);
      if (!alive_[n]) return;
      const ChunkKey key = static_cast<ChunkKey>(Rand(keys_));
      auto read = machines_[n].at(ChainOf(key, chains_)).Read(key);
      if (!read.ok()) return;
      const auto& [version, value] = *read;
      if (version == 0) return;
      auto c = commits_.find({key, version});
      if ((c == commits_.end() || c->second != Show(value)) && error_.empty())
        error_ = "read of key " + std::to_string(key) + " at node " + std::to_string(n) +
                 " returned " + Show(value) + " v" + std::to_string(version) +
                 " which was never committed as that version";
    } else if (chaos && r < 96) {
      const int n = Rand(nodes_);
      if (alive_[n]) Crash(n);
    } else if (chaos) {
      const int n = Rand(nodes_);
      if (!alive_[n]) Restart(n);
    }
  }

  bool Quiescent() const {
    if (!manager_->AllHealthy() || !outstanding_.empty() || !retry_.empty()) return false;
    for (int n = 0; n < nodes_; ++n)
      for (const auto& [c, m] : machines_[n])
        for (const auto& [key, st] : m.chunks())
          if (!st.pending.empty()) return false;
    return true;
  }

  std::string CheckFinal() {
    if (!manager_->AllHealthy()) return "chains did not heal: not every home member serves";
    if (!outstanding_.empty() || !retry_.empty()) {
      std::string detail;
      for (int c = 0; c < chains_; ++c) {
        const ChainConfig& cfg = manager_->config(c);
        detail += " chain " + std::to_string(c) + " v" + std::to_string(cfg.version) + " [";
        for (const Member& m : cfg.members)
          detail += std::to_string(m.node) + (m.state == MemberState::kSyncing ? "s " : " ");
        detail += "]";
        for (NodeId n : manager_->home(c)) {
          const ReplicaMachine& m = machines_[n].at(c);
          detail += " n" + std::to_string(n) + "@v" + std::to_string(m.config().version);
          for (const auto& [key, st] : m.chunks())
            if (!st.pending.empty()) detail += " pend(" + std::to_string(key) + ")";
        }
      }
      return std::to_string(outstanding_.size() + retry_.size()) + " writes never completed;" +
             detail + " in flight " + std::to_string(network_.size());
    }
    for (int c = 0; c < chains_; ++c) {
      const auto& home = manager_->home(c);
      const ReplicaMachine& ref = machines_[home[0]].at(c);
      for (NodeId n : home) {
        const ReplicaMachine& m = machines_[n].at(c);
        if (!m.serving())
          return "node " + std::to_string(n) + " not serving chain " + std::to_string(c);
        std::set<ChunkKey> keys;
        for (const auto& [key, st] : m.chunks()) {
          if (!st.pending.empty())
            return "node " + std::to_string(n) + " still has pending versions of key " +
                   std::to_string(key);
          keys.insert(key);
        }
        for (const auto& [key, st] : ref.chunks()) keys.insert(key);
        // A tombstone and a forgotten key are the same state; a live value must be equal.
        for (ChunkKey key : keys) {
          const std::string mine = Live(m, key), theirs = Live(ref, key);
          if (mine != theirs)
            return "replicas of chain " + std::to_string(c) + " diverge on key " +
                   std::to_string(key) + ": node " + std::to_string(n) + " has " + mine +
                   ", node " + std::to_string(home[0]) + " has " + theirs;
        }
      }
    }
    for (const auto& [key, acked] : acked_) {
      const ChainId c = ChainOf(key, chains_);
      const auto& chunks = machines_[manager_->home(c)[0]].at(c).chunks();
      auto it = chunks.find(key);
      if (it == chunks.end()) {
        // Forgotten: only right if the key's newest committed version deleted it.
        auto newest = commits_.lower_bound({key + 1, 0});
        if (newest == commits_.begin() || std::prev(newest)->first.first != key ||
            std::prev(newest)->second != "<deleted>" || std::prev(newest)->first.second < acked)
          return "key " + std::to_string(key) + " forgotten, but its newest committed version " +
                 "is not a deletion at or above the acknowledged v" + std::to_string(acked);
        continue;
      }
      const uint64_t have = it->second.committed_version;
      if (have < acked)
        return "acknowledged version " + std::to_string(acked) + " of key " + std::to_string(key) +
               " lost: replicas hold v" + std::to_string(have);
      auto commit = commits_.find({key, have});
      if (commit == commits_.end() || commit->second != Show(it->second.committed))
        return "final value of key " + std::to_string(key) + " was never committed";
    }
    return "";
  }

  std::mt19937_64 rng_;
  int nodes_ = 0, rf_ = 0, chains_ = 0, keys_ = 0;
  double drop_ = 0, dup_ = 0;
  std::unique_ptr<ChainManager> manager_;
  std::vector<std::map<ChainId, std::map<ChunkKey, ChunkState>>> durable_;
  std::vector<std::map<ChainId, ReplicaMachine>> machines_;
  std::vector<bool> alive_;
  std::vector<Message> network_;
  std::map<uint64_t, ClientOp> outstanding_;
  std::vector<ClientOp> retry_;
  std::map<std::pair<ChunkKey, uint64_t>, std::string> commits_;
  std::map<ChunkKey, uint64_t> acked_;
  uint64_t next_request_ = 0, next_value_ = 0;
  std::string error_;
  bool trace_ = false;
};

TEST(ChainSimTest, InvariantsHoldOverManySeeds) {
  const char* env = std::getenv("IOFS_SIM_SEEDS");
  const uint64_t seeds = env ? std::strtoull(env, nullptr, 10) : 10000;
  const char* first_env = std::getenv("IOFS_SIM_FIRST_SEED");
  const uint64_t first = first_env ? std::strtoull(first_env, nullptr, 10) : 1;
  int failures = 0;
  for (uint64_t seed = first; seed < first + seeds && failures < 3; ++seed) {
    Simulation sim(seed);
    const std::string error = sim.Run(400);
    if (!error.empty()) {
      ++failures;
      ADD_FAILURE() << "seed " << seed << " (" << sim.Describe() << "): " << error;
    }
  }
}

TEST(ChainSimTest, BuildChainsSpreadsHeadsAndRejectsBadLayouts) {
  auto chains = BuildChains({10, 20, 30}, 3, 3);
  ASSERT_TRUE(chains.ok());
  std::set<NodeId> heads;
  for (const ChainConfig& c : *chains) {
    ASSERT_EQ(c.members.size(), 3u);
    heads.insert(c.members[0].node);
  }
  EXPECT_EQ(heads.size(), 3u);
  EXPECT_EQ(BuildChains({1, 2}, 3, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildChains({1, 2, 3, 4}, 4, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildChains({1, 1}, 1, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildChains({}, 1, 1).status().code(), StatusCode::kInvalidArgument);
}

// Passes every message the replicas send until none is left (no loss); replies are dropped.
// Returns the configs a completed sync made the manager install (already delivered).
std::vector<ChainConfig> Pump(ChainManager& manager, std::map<NodeId, ReplicaMachine*> replicas) {
  std::vector<ChainConfig> installed;
  for (bool moved = true; moved;) {
    moved = false;
    for (auto& [id, replica] : replicas) {
      (void)replica->TakeDirty();
      for (const Output& o : replica->TakeOutputs()) {
        moved = true;
        if (o.kind == Output::Kind::kSend && replicas.contains(o.message.to)) {
          replicas.at(o.message.to)->OnMessage(o.message);
        } else if (o.kind == Output::Kind::kSyncComplete) {
          for (const ChainConfig& c : manager.OnSyncComplete(o.node, o.chain, o.chain_version)) {
            installed.push_back(c);
            for (auto& [other, r] : replicas) r->OnConfig(c);
          }
        }
      }
    }
  }
  return installed;
}

// Writes `text` to `key` at `head` (an empty text deletes the key).
void Write(ReplicaMachine& head, ChunkKey key, const std::string& text) {
  static uint64_t request = 0;
  head.OnClientWrite(
      ++request, key,
      text.empty() ? Value{nullptr, true} : Value{std::make_shared<const std::string>(text)});
}

// Deleted chunks are not kept forever: a new chain version forgets the tombstones (all but one
// at the highest committed version, which keeps the versions growing across restarts), a
// returning member forgets a chunk deleted while it was away (its tombstone already forgotten
// by the others, so the sync round no longer lists it), and a key written again after its
// tombstone was forgotten continues above every earlier version.
TEST(ChainSimTest, DeletedChunksAreForgottenWhenTheChainChanges) {
  auto layout = BuildChains({0, 1, 2}, 3, 1);
  ASSERT_TRUE(layout.ok());
  ChainManager manager(*layout);
  ReplicaMachine a(0, 0), b(1, 0), c(2, 0);
  for (ReplicaMachine* r : {&a, &b, &c}) r->OnConfig(manager.config(0));
  for (ChunkKey key = 1; key <= 10; ++key) Write(a, key, "v" + std::to_string(key));
  for (ChunkKey key = 1; key <= 9; ++key) Write(a, key, "");
  Write(a, 20, "twenty");
  Pump(manager, {{0, &a}, {1, &b}, {2, &c}});
  for (ReplicaMachine* r : {&a, &b, &c}) ASSERT_EQ(r->chunks().size(), 11u);  // 9 tombstones

  // c leaves: the new chain version makes a and b forget the nine tombstones.
  auto down = manager.OnNodeDown(2);
  ASSERT_EQ(down.size(), 1u);
  for (ReplicaMachine* r : {&a, &b}) {
    r->OnConfig(down[0]);
    EXPECT_EQ(r->chunks().size(), 2u) << "node " << r->self();
    EXPECT_EQ(r->Read(3)->first, 0u);
  }
  // While c is away key 10 is deleted (then forgotten at the next change) and key 21 written.
  Write(a, 10, "");
  Write(a, 21, "twenty-one");
  Pump(manager, {{0, &a}, {1, &b}});
  const uint64_t deleted_at = b.chunks().at(10).committed_version;

  // c returns from its durable state, which still holds key 10's old value.
  ReplicaMachine c2(2, 0, c.chunks());
  ASSERT_EQ(c2.Read(10).status().code(), StatusCode::kNotServing);
  auto up = manager.OnNodeUp(2);
  ASSERT_EQ(up.size(), 1u);
  for (ReplicaMachine* r : {&a, &b, &c2}) r->OnConfig(up[0]);
  const std::vector<ChainConfig> healed = Pump(manager, {{0, &a}, {1, &b}, {2, &c2}});
  ASSERT_EQ(healed.size(), 1u);
  for (ReplicaMachine* r : {&a, &b, &c2}) {
    EXPECT_EQ(r->Read(10)->first, 0u) << "node " << r->self();
    EXPECT_EQ(*r->Read(21)->second.data, "twenty-one") << "node " << r->self();
    EXPECT_EQ(r->chunks().size(), 2u) << "node " << r->self();  // keys 20 and 21
  }

  // Key 10 written again goes above the version that deleted it, on every member.
  Write(a, 10, "again");
  Pump(manager, {{0, &a}, {1, &b}, {2, &c2}});
  for (ReplicaMachine* r : {&a, &b, &c2}) {
    auto read = r->Read(10);
    ASSERT_TRUE(read.ok());
    EXPECT_GT(read->first, deleted_at) << "node " << r->self();
    EXPECT_EQ(*read->second.data, "again") << "node " << r->self();
  }
}

TEST(ChainSimTest, ReturningReplicaSyncsBeforeServing) {
  auto layout = BuildChains({0, 1}, 2, 1);
  ASSERT_TRUE(layout.ok());
  ChainManager manager(*layout);
  ReplicaMachine a(0, 0), b(1, 0);
  a.OnConfig(manager.config(0));
  b.OnConfig(manager.config(0));
  // b leaves; a takes writes alone.
  auto down = manager.OnNodeDown(1);
  ASSERT_EQ(down.size(), 1u);
  a.OnConfig(down[0]);
  a.OnClientWrite(1, 7, Value{std::make_shared<const std::string>("x")});
  auto outs = a.TakeOutputs();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].kind, Output::Kind::kReply);
  // b returns as a syncing member and does not serve until its sync completes.
  auto up = manager.OnNodeUp(1);
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].members.back().state, MemberState::kSyncing);
  ReplicaMachine b2(1, 0, b.chunks());
  b2.OnConfig(up[0]);
  a.OnConfig(up[0]);
  EXPECT_EQ(b2.Read(7).status().code(), StatusCode::kNotServing);
  std::vector<ChainConfig> healed;
  for (const Output& o : a.TakeOutputs()) {
    ASSERT_EQ(o.kind, Output::Kind::kSend);
    b2.OnMessage(o.message);
  }
  for (const Output& o : b2.TakeOutputs())
    if (o.kind == Output::Kind::kSyncComplete)
      healed = manager.OnSyncComplete(o.node, o.chain, o.chain_version);
  ASSERT_EQ(healed.size(), 1u);
  b2.OnConfig(healed[0]);
  auto read = b2.Read(7);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->first, 1u);
  EXPECT_EQ(*read->second.data, "x");
}

// A new manager continues from the newest saved state plus the newer versions replicas hold:
// every chain gets a version above both and above the floor, and the down node leaves them.
TEST(ChainSimTest, TakeOverContinuesAboveEveryEarlierVersion) {
  auto layout = BuildChains({1, 2, 3}, 2, 3);
  ASSERT_TRUE(layout.ok());
  ChainManager old_manager(*layout);
  (void)old_manager.OnNodeDown(3);
  const std::vector<std::byte> saved = old_manager.Save();
  EXPECT_EQ(ChainManager::SavedVersionSum(saved), old_manager.VersionSum());
  EXPECT_EQ(ChainManager::SavedVersionSum({}), 0u);
  // After the save node 3 came back: its chains moved on, and only the replicas know it.
  const std::vector<ChainConfig> newer = old_manager.OnNodeUp(3);
  EXPECT_GT(old_manager.VersionSum(), ChainManager::SavedVersionSum(saved));
  ChainConfig stranger = newer[0];
  stranger.version = 1000;
  stranger.members = {Member{7, MemberState::kServing}};  // not a home node: ignored

  ChainManager next(*layout);
  ASSERT_TRUE(next.Restore(saved).ok());
  std::vector<ChainConfig> seen = newer;
  seen.push_back(stranger);
  const uint64_t floor = uint64_t{5} << 32;
  const std::vector<ChainConfig> out = next.TakeOver(seen, floor, {1});
  ASSERT_EQ(out.size(), 3u);
  for (const ChainConfig& c : out) {
    EXPECT_GE(c.version, floor);
    for (const Member& m : c.members) EXPECT_NE(m.node, 1u) << "chain " << c.chain;
    EXPECT_EQ(c, next.config(c.chain));
  }
  // Chain 1 (home 2, 3): node 3 syncs again as the replicas knew, node 1 was never in it.
  ASSERT_EQ(next.config(1).members.size(), 2u);
  EXPECT_EQ(next.config(1).members[0], (Member{2, MemberState::kServing}));
  EXPECT_EQ(next.config(1).members[1], (Member{3, MemberState::kSyncing}));
  // Chain 0 (home 1, 2): node 1 down leaves node 2 serving alone.
  EXPECT_EQ(next.config(0).members, (std::vector<Member>{{2, MemberState::kServing}}));
  // A later change goes on above the floor.
  const std::vector<ChainConfig> healed = next.OnSyncComplete(3, 1, next.config(1).version);
  ASSERT_EQ(healed.size(), 1u);
  EXPECT_EQ(healed[0].version, out[1].version + 1);
}

}  // namespace
}  // namespace rt::iofs::chain

namespace rt::iofs::chain {
namespace {

// A forward's value travels in a frame without a payload CRC: the message's own CRC32C must
// catch a value corrupted on the way, and the head form must be the message minus the value.
TEST(ChainCodecTest, ValueCorruptedInTransitIsDetected) {
  Message m;
  m.kind = Message::Kind::kForward;
  m.chain = 3;
  m.chain_version = 7;
  m.from = 1;
  m.to = 2;
  m.key = 99;
  m.version = 5;
  std::string value(300000, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i * 7 + (i >> 9));
  m.value.data = std::make_shared<const std::string>(value);
  std::vector<std::byte> bytes = EncodeMessage(m);
  const std::vector<std::byte> head = EncodeMessageHead(m);
  ASSERT_EQ(bytes.size(), head.size() + value.size());
  EXPECT_TRUE(std::equal(head.begin(), head.end(), bytes.begin()));
  auto ok = DecodeMessage(bytes);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok->value.data, value);
  bytes[head.size() + 123457] ^= std::byte{4};
  auto bad = DecodeMessage(bytes);
  EXPECT_EQ(bad.status().code(), StatusCode::kChecksumMismatch) << bad.status().ToString();
  // A CRC32C carried with the value is sent as is: a wrong one makes the receiver refuse the value.
  EXPECT_EQ(ok->value.crc, Crc32c(value.data(), value.size()));
  Message carried = m;
  carried.value.crc = *ok->value.crc ^ 1;
  auto refused = DecodeMessage(EncodeMessage(carried));
  EXPECT_EQ(refused.status().code(), StatusCode::kChecksumMismatch) << refused.status().ToString();
}

// Value buffers have the size asked for; a freed large one is handed out again (no new
// allocation, no zero fill), and buffers in use are never shared.
TEST(ValueBufferTest, BuffersHaveTheirSizeAndLargeOnesAreReused) {
  auto a = NewValueBuffer(3 << 20);
  ASSERT_EQ(a->size(), size_t{3} << 20);
  a->assign(3 << 20, 'a');
  const char* a_bytes = a->data();
  a.reset();
  auto b = NewValueBuffer(2 << 20);
  EXPECT_EQ(b->size(), size_t{2} << 20);
  EXPECT_EQ(b->data(), a_bytes);
  auto c = NewValueBuffer(2 << 20);
  EXPECT_NE(c->data(), b->data());
  auto small = NewValueBuffer(100);
  EXPECT_EQ(*small, std::string(100, '\0'));
}

// A forward to a node that staged the value carries only its length and CRC32C; only a receiver
// that asks for staged values accepts it, and only in a forward.
TEST(ChainCodecTest, StagedForwardNamesTheValueWithoutItsBytes) {
  Message m;
  m.kind = Message::Kind::kForward;
  m.chain = 1;
  m.chain_version = 4;
  m.from = 2;
  m.to = 1;
  m.key = 77;
  m.version = 9;
  const std::string value(200000, 'q');
  m.value.data = std::make_shared<const std::string>(value);
  m.value.staged_id = 31;
  const std::vector<std::byte> bytes = EncodeStagedMessage(m);
  EXPECT_LT(bytes.size(), 100u);
  EXPECT_EQ(DecodeMessage(bytes).status().code(), StatusCode::kCorruption);
  std::optional<StagedValueRef> staged;
  auto decoded = DecodeMessage(bytes, &staged);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_TRUE(staged.has_value());
  EXPECT_EQ(staged->size, value.size());
  EXPECT_EQ(staged->crc, Crc32c(value.data(), value.size()));
  EXPECT_EQ(staged->id, 31u);
  EXPECT_EQ(decoded->key, 77u);
  EXPECT_EQ(decoded->version, 9u);
  EXPECT_EQ(decoded->value.data, nullptr);
  m.kind = Message::Kind::kSync;
  std::optional<StagedValueRef> not_forward;
  EXPECT_EQ(DecodeMessage(EncodeStagedMessage(m), &not_forward).status().code(),
            StatusCode::kCorruption);
}

}  // namespace
}  // namespace rt::iofs::chain
