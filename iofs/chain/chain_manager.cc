#include "iofs/chain/chain_manager.h"

#include <algorithm>

#include "base/bytes.h"
#include "iofs/chain/codec.h"

// GCC 12 false positives inside std::vector::resize inlined into ByteWriter::Put.
#pragma GCC diagnostic ignored "-Warray-bounds"
#ifndef __clang__  // a GCC-only warning group
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

namespace rt::iofs::chain {

ChainManager::ChainManager(std::vector<ChainConfig> initial) {
  for (ChainConfig& c : initial) {
    State s;
    for (const Member& m : c.members) s.home.push_back(m.node);
    s.config = std::move(c);
    chains_.push_back(std::move(s));
  }
}

int ChainManager::ServingCount(const State& s) {
  return static_cast<int>(
      std::count_if(s.config.members.begin(), s.config.members.end(),
                    [](const Member& m) { return m.state == MemberState::kServing; }));
}

bool ChainManager::IsMember(const State& s, NodeId node) const {
  return std::any_of(s.config.members.begin(), s.config.members.end(),
                     [&](const Member& m) { return m.node == node; });
}

bool ChainManager::AllHealthy() const {
  for (const State& s : chains_)
    if (ServingCount(s) != static_cast<int>(s.home.size())) return false;
  return true;
}

bool ChainManager::TryStartSync(State& s) {
  if (ServingCount(s) == 0) return false;
  for (const Member& m : s.config.members)
    if (m.state == MemberState::kSyncing) return false;
  while (!s.waiting.empty()) {
    const NodeId n = s.waiting.front();
    s.waiting.pop_front();
    if (down_.count(n) || IsMember(s, n)) continue;
    s.config.members.push_back(Member{n, MemberState::kSyncing});
    return true;
  }
  return false;
}

std::vector<ChainConfig> ChainManager::OnNodeDown(NodeId node) {
  std::vector<ChainConfig> changed;
  if (!down_.insert(node).second) return changed;
  for (State& s : chains_) {
    std::erase(s.waiting, node);
    auto it = std::find_if(s.config.members.begin(), s.config.members.end(),
                           [&](const Member& m) { return m.node == node; });
    if (it == s.config.members.end()) continue;
    const bool was_serving = it->state == MemberState::kServing;
    s.config.members.erase(it);
    if (was_serving && ServingCount(s) == 0) {
      // Nobody serves: syncing members are incomplete and cannot take over.
      s.last_serving = node;
      for (const Member& m : s.config.members) s.waiting.push_back(m.node);
      s.config.members.clear();
    }
    TryStartSync(s);
    ++s.config.version;
    changed.push_back(s.config);
  }
  return changed;
}

std::vector<ChainConfig> ChainManager::OnNodeUp(NodeId node) {
  std::vector<ChainConfig> changed;
  down_.erase(node);
  for (State& s : chains_) {
    if (std::find(s.home.begin(), s.home.end(), node) == s.home.end()) continue;
    if (IsMember(s, node)) {
      changed.push_back(s.config);  // it restarted before we saw it go: resend its config
      continue;
    }
    bool bumped = false;
    if (ServingCount(s) == 0 && s.last_serving == node) {
      s.config.members = {Member{node, MemberState::kServing}};
      s.last_serving.reset();
      bumped = true;
    } else if (std::find(s.waiting.begin(), s.waiting.end(), node) == s.waiting.end()) {
      s.waiting.push_back(node);
    }
    bumped = TryStartSync(s) || bumped;
    if (bumped) ++s.config.version;
    changed.push_back(s.config);
  }
  return changed;
}

std::vector<ChainConfig> ChainManager::OnSyncComplete(NodeId node, ChainId chain,
                                                      uint64_t chain_version) {
  std::vector<ChainConfig> changed;
  if (chain >= chains_.size()) return changed;
  State& s = chains_[chain];
  if (s.config.version != chain_version) return changed;
  for (Member& m : s.config.members) {
    if (m.node == node && m.state == MemberState::kSyncing) {
      m.state = MemberState::kServing;
      TryStartSync(s);
      ++s.config.version;
      changed.push_back(s.config);
      break;
    }
  }
  return changed;
}

std::vector<std::byte> ChainManager::Save() const {
  ByteWriter w;
  w.Put<uint32_t>(0x4d435452);  // "RTCM"
  w.Put<uint32_t>(static_cast<uint32_t>(chains_.size()));
  for (const State& s : chains_) {
    std::vector<std::byte> config = EncodeConfig(s.config);
    w.Put<uint32_t>(static_cast<uint32_t>(config.size()));
    w.PutBytes(config.data(), config.size());
    w.Put<uint32_t>(s.last_serving ? *s.last_serving : UINT32_MAX);
  }
  return w.Take();
}

Status ChainManager::Restore(std::span<const std::byte> saved) {
  ByteReader r(saved, "chain manager state");
  ASSIGN_OR_RETURN(uint32_t magic, r.Get<uint32_t>());
  if (magic != 0x4d435452) return Corruption("chain manager state: bad magic");
  ASSIGN_OR_RETURN(uint32_t n, r.Get<uint32_t>());
  if (n != chains_.size())
    return Corruption("chain manager state has " + std::to_string(n) + " chains, the layout " +
                      std::to_string(chains_.size()));
  std::vector<State> restored = chains_;
  for (State& s : restored) {
    ASSIGN_OR_RETURN(uint32_t len, r.Get<uint32_t>());
    ASSIGN_OR_RETURN(auto bytes, r.GetBytes(len));
    ASSIGN_OR_RETURN(ChainConfig config, DecodeConfig(bytes));
    for (const Member& m : config.members)
      if (std::find(s.home.begin(), s.home.end(), m.node) == s.home.end())
        return Corruption("chain manager state: node " + std::to_string(m.node) +
                          " is not a home node of chain " + std::to_string(s.config.chain));
    if (config.chain != s.config.chain)
      return Corruption("chain manager state: chains out of order");
    s.config = std::move(config);
    ASSIGN_OR_RETURN(uint32_t last, r.Get<uint32_t>());
    if (last != UINT32_MAX) s.last_serving = last;
  }
  chains_ = std::move(restored);
  return Status();
}

uint64_t ChainManager::VersionSum() const {
  uint64_t sum = 0;
  for (const State& s : chains_) sum += s.config.version;
  return sum;
}

uint64_t ChainManager::SavedVersionSum(std::span<const std::byte> saved) {
  ByteReader r(saved, "chain manager state");
  auto magic = r.Get<uint32_t>();
  auto n = r.Get<uint32_t>();
  if (!magic.ok() || *magic != 0x4d435452 || !n.ok()) return 0;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < *n; ++i) {
    auto len = r.Get<uint32_t>();
    if (!len.ok()) return 0;
    auto bytes = r.GetBytes(*len);
    if (!bytes.ok()) return 0;
    auto config = DecodeConfig(*bytes);
    if (!config.ok() || !r.Get<uint32_t>().ok()) return 0;
    sum += config->version;
  }
  return sum;
}

std::vector<ChainConfig> ChainManager::TakeOver(std::span<const ChainConfig> seen,
                                                uint64_t min_version,
                                                const std::set<NodeId>& down) {
  for (const ChainConfig& c : seen) {
    if (c.chain >= chains_.size()) continue;
    State& s = chains_[c.chain];
    const bool from_home = std::all_of(c.members.begin(), c.members.end(), [&](const Member& m) {
      return std::find(s.home.begin(), s.home.end(), m.node) != s.home.end();
    });
    if (c.version <= s.config.version || !from_home) continue;
    s.config = c;
    if (!s.config.members.empty()) s.last_serving.reset();
  }
  down_.clear();
  std::vector<ChainConfig> changed;
  for (State& s : chains_) {
    s.waiting.clear();
    s.config.version = std::max(s.config.version + 1, min_version);
  }
  for (NodeId node : down) (void)OnNodeDown(node);
  for (const State& s : chains_) changed.push_back(s.config);
  return changed;
}

Result<std::vector<ChainConfig>> BuildChains(const std::vector<NodeId>& nodes, int replication,
                                             int chain_count) {
  if (nodes.empty()) return InvalidArgument("chain layout: the node list is empty");
  if (replication < 1 || replication > 3)
    return InvalidArgument("chain layout: replication factor " + std::to_string(replication) +
                           " is outside [1, 3]");
  if (replication > static_cast<int>(nodes.size()))
    return InvalidArgument("chain layout: replication factor " + std::to_string(replication) +
                           " exceeds the " + std::to_string(nodes.size()) + " nodes");
  if (chain_count < 1) return InvalidArgument("chain layout: chain count must be at least 1");
  std::vector<NodeId> sorted = nodes;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return InvalidArgument("chain layout: the node list has duplicates");
  std::vector<ChainConfig> chains;
  for (int i = 0; i < chain_count; ++i) {
    ChainConfig c;
    c.chain = static_cast<ChainId>(i);
    c.version = 1;
    for (int j = 0; j < replication; ++j)
      c.members.push_back(Member{nodes[(i + j) % nodes.size()], MemberState::kServing});
    chains.push_back(std::move(c));
  }
  return chains;
}

ChainId ChainOf(ChunkKey key, size_t chain_count) {
  uint64_t x = key + 0x9e3779b97f4a7c15ull;  // splitmix64
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<ChainId>(x % chain_count);
}

}  // namespace rt::iofs::chain
