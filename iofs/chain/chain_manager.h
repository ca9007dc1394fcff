// The chain manager: decides chain membership from node up/down events and sync completions, as
// a pure state machine (the 3FS mgmtd's routing-table role). Each call returns the configs that
// changed; the driver sends each to every home node of that chain.
//
// Rules: a node that goes down leaves every chain it is in (chain version + 1). A node that comes
// back waits, then joins its chain at the tail as a syncing member (one at a time per chain) and
// becomes serving when it reports its sync complete. If every serving member of a chain is down,
// the chain stops until the last one that served comes back (it holds every committed write) and
// serves again without a sync.
#pragma once

#include <deque>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "iofs/chain/chain_types.h"

namespace rt::iofs::chain {

// Not thread-safe.
class ChainManager {
 public:
  // `initial`: every chain at version 1 with its home members, all serving (from BuildChains).
  explicit ChainManager(std::vector<ChainConfig> initial);

  // A node failed: it leaves every chain it is in.
  std::vector<ChainConfig> OnNodeDown(NodeId node);
  // A node is reachable again: it waits for (or starts) its resync, or serves again if it was
  // the last serving member of a stopped chain.
  std::vector<ChainConfig> OnNodeUp(NodeId node);
  // A syncing member finished its sync under `chain_version` (stale reports are ignored).
  std::vector<ChainConfig> OnSyncComplete(NodeId node, ChainId chain, uint64_t chain_version);

  // The current config of a chain, and its home nodes (the members it was built with).
  const ChainConfig& config(ChainId chain) const { return chains_.at(chain).config; }
  const std::vector<NodeId>& home(ChainId chain) const { return chains_.at(chain).home; }
  size_t chain_count() const { return chains_.size(); }
  // True if every chain has every home node as a serving member.
  bool AllHealthy() const;

  // Serialises every chain's current version and last serving member, so a restarted manager
  // continues with higher versions instead of starting over (chain versions must only grow).
  std::vector<std::byte> Save() const;
  // Restores what Save() wrote over the same layout. Corruption if it does not parse or does not
  // match the layout (other chain count or home nodes).
  Status Restore(std::span<const std::byte> saved);
  // The sum of every chain's version: it grows with every change, so of two saved states of one
  // cluster the one with the larger sum is the newer (SavedVersionSum reads it from Save()'s
  // bytes; 0 if they do not parse).
  uint64_t VersionSum() const;
  static uint64_t SavedVersionSum(std::span<const std::byte> saved);

  // Continues the work of another manager (a metadata node that failed or handed over), after
  // Restore of the newest saved state there is: `seen` are chain versions the replicas hold
  // (ChainNode::Config); each one newer than this manager's replaces it. Then every chain gets a
  // version above both its own and `min_version` (the caller passes one above anything an
  // earlier manager handed out, so replicas take the new versions and ignore a stale manager's),
  // and `down` nodes leave their chains. Returns every chain's new config, to broadcast.
  std::vector<ChainConfig> TakeOver(std::span<const ChainConfig> seen, uint64_t min_version,
                                    const std::set<NodeId>& down);

 private:
  struct State {
    ChainConfig config;
    std::vector<NodeId> home;
    std::optional<NodeId> last_serving;  // set while no member serves
    std::deque<NodeId> waiting;          // up, not yet a member
  };
  static int ServingCount(const State& s);
  bool IsMember(const State& s, NodeId node) const;
  bool TryStartSync(State& s);

  std::vector<State> chains_;
  std::set<NodeId> down_;
};

}  // namespace rt::iofs::chain
