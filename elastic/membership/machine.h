// One member's side of the membership protocol as a pure state machine: no sockets, threads,
// clocks or disks (the pattern of iofs/chain/replica.h). The driver (the service, or the
// simulator in tests/elastic) feeds it messages, ticks and unreachable peers; after every call
// it persists durable() when TakeDirty() says so, and only then sends TakeMessages() in order.
//
// The protocol (docs/membership.md): decided entries (view + replicated state) form a chain of
// slots; slot s + 1 is decided by single-decree Paxos among the members of the entry at slot s,
// so any member may propose, two proposers converge (the higher ballot wins, the loser backs off
// for a random time) and a minority never decides anything. Members watch their ring successor
// (pings; an unreachable peer or a silence of suspect_ticks raises a suspicion), ask the other
// members to confirm, and propose a view without a confirmed suspect. Non-members (new,
// restarted after removal) send kJoin to the members or seeds until a view admits them.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "elastic/membership/types.h"

namespace rt::elastic::membership {

// Construction settings of a MembershipMachine.
struct MachineOptions {
  NodeId self = 0;
  std::string address;  // advertised to the others in every message
  // Create a one-member view (slot 1, generation 1) if there is no durable state.
  bool bootstrap = false;
  // The tick periods (MembershipTiming; `tick` only scales kSuspected's detected_after).
  MembershipTiming timing;
  // Seed of the random back-off after a lost ballot (a different one per node and start).
  uint64_t random_seed = 0;
  // This node's incarnation when there is no durable state (random; see Member::incarnation).
  uint64_t incarnation = 0;
};

// Not thread-safe; the driver serialises every call.
class MembershipMachine {
 public:
  // `durable`: what a previous run persisted (nullopt for a fresh node).
  MembershipMachine(MachineOptions options, std::optional<DurableState> durable);

  // Handles a message from another node (or a duplicate, a late one, one from an old slot).
  void OnMessage(const Message& message);
  // One tick: heartbeats, suspicion timeouts, proposal retries, join requests.
  void OnTick();
  // The driver could not reach `peer` (connection refused or broken, send timed out).
  void OnUnreachable(NodeId peer);

  // Queues a compare-and-set of the replicated state (request numbers are the caller's, unique
  // per node across restarts: decided entries remember them). Its StateResult comes once it is
  // decided or refused.
  void RequestState(uint64_t request, uint64_t expected_version, std::string blob);
  // Forgets a queued request (its caller gave up); if it was proposed it may still be decided.
  void CancelStateRequest(uint64_t request);
  // Starts leaving: proposes a view without this node and stops asking to join afterwards.
  void RequestLeave();

  // Outputs produced since the last call, in order.
  std::vector<Message> TakeMessages();
  std::vector<MembershipNotification> TakeNotifications();
  std::vector<StateResult> TakeStateResults();
  // True if durable() changed since the last call (persist it before sending).
  bool TakeDirty();

  const DurableState& durable() const { return durable_; }
  const View& view() const { return durable_.decided.view; }
  const ReplicatedState& state() const { return durable_.decided.state; }
  NodeId self() const { return options_.self; }
  // True if this node is a member of its newest decided view.
  bool IsMember() const;
  bool leaving() const { return leaving_; }

 private:
  struct Proposal {
    Ballot ballot;
    bool accepting = false;  // phase 2 (else phase 1)
    uint64_t started = 0;    // tick
    std::map<NodeId, std::pair<Ballot, std::optional<Entry>>> promises;
    std::set<NodeId> accepted;
    Entry value;
  };
  struct Suspicion {
    uint64_t raised = 0;  // tick
    bool confirmed = false;
  };
  struct Confirmation {
    uint64_t started = 0;  // tick
    std::set<NodeId> requesters;
  };
  struct Joiner {
    std::string address;
    uint64_t incarnation = 0;
    uint64_t seen = 0;  // tick
  };
  struct PendingState {
    uint64_t request = 0;
    uint64_t expected_version = 0;
    std::string blob;
  };

  void Handle(const Message& message);
  void HandlePaxos(const Message& message);
  void Send(Message::Kind kind, NodeId to, Message message = {});
  void SendDecided(NodeId to);
  void DrainSelf();
  // Installs a decided entry newer than ours; `own_proposal`: this node's proposal decided it
  // (then it led the view change, if the view changed).
  void Adopt(const Entry& entry, bool own_proposal = false);
  void ResolveStateRequests();
  std::optional<NodeId> Successor() const;
  // The entry this node wants for the next slot, if it wants a change.
  std::optional<Entry> Target() const;
  void MaybePropose();
  void StartPrepare();
  void Abandon();
  // Ticks a proposal may take before it is retried (grows with every failed try).
  uint64_t Patience() const;
  void RaiseSuspicion(NodeId suspect);
  void Notify(MembershipNotification::Kind kind, NodeId node = 0, uint64_t silent_ticks = 0);
  bool Majority(size_t count) const { return count * 2 > view().members.size(); }

  MachineOptions options_;
  DurableState durable_;
  bool dirty_ = false;
  // Volatile state (lost on a restart).
  uint64_t ticks_ = 0;
  uint64_t highest_round_ = 0;     // highest ballot round seen
  uint64_t next_attempt_ = 0;      // tick before which no new proposal starts
  uint32_t failed_proposals_ = 0;  // proposals abandoned since the last decided slot
  uint64_t promised_at_ = 0;       // tick of the last Promise or Accepted sent
  std::optional<Proposal> proposal_;
  std::map<NodeId, uint64_t> heard_;  // tick of the last message from a peer
  std::map<NodeId, Suspicion> suspects_;
  std::map<NodeId, Confirmation> confirming_;
  std::map<NodeId, Joiner> joiners_;
  std::map<NodeId, uint64_t> catchup_sent_;  // tick of the last kDecided/kFetch to a peer
  std::deque<PendingState> pending_states_;
  bool leaving_ = false;
  std::mt19937_64 random_;
  std::deque<Message> to_self_;
  std::vector<Message> messages_;
  std::vector<MembershipNotification> notifications_;
  std::vector<StateResult> state_results_;
};

}  // namespace rt::elastic::membership
