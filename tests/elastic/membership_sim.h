// A deterministic simulator of the membership protocol: N MembershipMachines, a disk per node
// (the durable state, kept across crashes), and a network that loses, duplicates, delays and
// reorders messages, cuts partitions and reports unreachable peers like the service's
// connections do. Everything is driven by one seeded generator, so a seed replays exactly.
//
// While it runs it checks the safety invariants at every step:
//   - one entry per slot and one member set per generation, on every node, ever;
//   - every decided entry was accepted by a majority of the previous slot's view (so a minority
//     never installs a view or a state);
//   - slots are decided in order, each on top of the one before;
//   - a member keeps the generation that admitted it while its incarnation stays in the views,
//     and one that joins (or returns with a new incarnation) is admitted by the view it enters;
//   - compare-and-set results agree with the decided versions (CheckStateHistory).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "elastic/membership/machine.h"

namespace rt::elastic::membership::sim {

// One ProposeState as the client made it, and what it was told.
struct StateCall {
  NodeId node = 0;
  uint64_t request = 0;
  uint64_t expected = 0;
  std::string blob;
  std::optional<StateResult> result;
};

class Simulator {
 public:
  // `nodes` nodes with ids 1..nodes, node 1 bootstraps (on its first start), every node lists
  // every node as a seed (a node whose disk was lost must find the members wherever they are).
  // Nodes start crashed except those in `start`.
  Simulator(uint64_t seed, int nodes, std::set<NodeId> start);

  // Network behaviour (probabilities per message; delay in ticks, uniform 0..max_delay).
  double loss = 0;
  double duplicate = 0;
  uint32_t max_delay = 2;

  // Advances one tick: delivers the messages due, ticks every running node.
  void Step();
  void Run(int ticks) {
    for (int i = 0; i < ticks; ++i) Step();
  }

  void Crash(NodeId node);
  // Crashes a node and loses its disk: it restarts as a new incarnation (Member::incarnation).
  void Wipe(NodeId node);
  // True if `node` runs as the incarnation `view` lists for it (so it may vote on the next slot).
  bool Votes(NodeId node, const View& view) const;
  // Starts a crashed node again from its disk (or fresh when it never persisted).
  void Restart(NodeId node);
  bool running(NodeId node) const { return nodes_.at(node).machine.has_value(); }
  // Splits the network: messages between different groups are dropped. Empty: healed.
  void Partition(std::vector<std::set<NodeId>> groups) { groups_ = std::move(groups); }
  bool Connected(NodeId a, NodeId b) const;

  // A client ProposeState at `node` (which must be running).
  void ProposeState(NodeId node, uint64_t expected, std::string blob);
  void Leave(NodeId node);

  // Every ProposeState so far, in order, with its result once known.
  const std::vector<StateCall>& calls() const { return calls_; }
  // The running machine of a node.
  const MembershipMachine& machine(NodeId node) const { return *nodes_.at(node).machine; }
  const std::vector<NodeId>& ids() const { return ids_; }
  std::mt19937_64& random() { return random_; }
  uint64_t now() const { return now_; }

  // The view of the newest decided entry on any disk and of every value a disk holds accepted
  // for the slot after it: the views whose majorities the live nodes may need.
  std::vector<View> CandidateViews() const;
  // True if every node in `live` runs, has installed the same view, and its members are `live`.
  bool Converged(const std::set<NodeId>& live) const;
  // Checks the ProposeState results against the decided versions; adds violations.
  void CheckStateHistory();

  // Invariant violations found so far (empty: all held).
  const std::vector<std::string>& violations() const { return violations_; }
  // The highest slot decided so far.
  uint64_t max_slot() const { return chosen_.empty() ? 0 : chosen_.rbegin()->first; }

 private:
  struct Node {
    std::optional<MembershipMachine> machine;
    std::optional<DurableState> disk;
    uint64_t starts = 0;
    uint64_t known_slot = 0;
    uint64_t next_request = 1;
  };
  struct InFlight {
    Message message;
    bool unreachable = false;  // report `message.to` unreachable to `message.from` instead
  };

  // Persists, routes messages, checks new entries, records results; after every machine call.
  void Flush(NodeId node);
  void Route(const Message& message);
  void Schedule(uint64_t delay, InFlight item);
  void CheckEntry(NodeId node, const Entry& entry);
  // Checks the members' `admitted` in `after`, the view decided after `before` (at `where`).
  void CheckAdmitted(const std::string& where, const View& before, const View& after);
  void Violation(std::string what);

  std::mt19937_64 random_;
  std::vector<NodeId> ids_;
  std::map<NodeId, Node> nodes_;
  std::vector<std::set<NodeId>> groups_;
  std::vector<std::vector<InFlight>> wheel_;  // by tick modulo its size
  uint64_t now_ = 0;
  std::map<uint64_t, Entry> chosen_;                            // slot → entry
  std::map<uint64_t, std::vector<NodeId>> generation_members_;  // generation → ids
  std::map<uint64_t, std::vector<std::pair<Entry, std::set<NodeId>>>> accepted_;  // slot →
  std::vector<StateCall> calls_;
  std::vector<std::string> violations_;
  bool trace_ = false;  // MEMBERSHIP_SIM_TRACE set: every delivery on stderr
};

}  // namespace rt::elastic::membership::sim
