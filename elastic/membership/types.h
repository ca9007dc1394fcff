// Types of the membership protocol (docs/membership.md): the decided entries the members agree
// on, the Paxos ballots that decide them, the messages members exchange and the durable state
// each keeps. Wire encoding: docs/formats/membership_wire.md; file: membership_state.md.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "elastic/membership.h"

namespace rt::elastic::membership {

// A Paxos ballot: rounds grow, ties are broken by the proposer's id, so two proposers never use
// the same ballot. Ballot{} (round 0) is below every real one.
struct Ballot {
  uint64_t round = 0;
  NodeId node = 0;
  friend auto operator<=>(const Ballot&, const Ballot&) = default;
};

// Identifies a ProposeState request: the node it was made at and its number there.
struct StateRequestId {
  NodeId origin = 0;
  uint64_t id = 0;
  friend bool operator==(const StateRequestId&, const StateRequestId&) = default;
};

// One decided change of the replicated state: the version it made and the request it carried.
struct StateChange {
  uint64_t version = 0;
  StateRequestId request;
  friend bool operator==(const StateChange&, const StateChange&) = default;
};

// How many recent state changes an entry remembers, so a node that missed a few decisions still
// learns whether its own request was among them.
inline constexpr size_t kRecentStateChanges = 16;

// The cluster after `slot` decisions: the view and the replicated state. Slot s + 1 is decided
// by a majority of the members of the entry at slot s, so entries form one chain on every node.
// An entry is self-contained: a node that is behind adopts the newest one directly.
struct Entry {
  uint64_t slot = 0;  // 0: none yet
  View view;
  ReplicatedState state;
  // The newest state changes, oldest first (at most kRecentStateChanges).
  std::vector<StateChange> recent;
  friend bool operator==(const Entry&, const Entry&) = default;
};

// A message between members. Every message carries the sender's decided slot; a receiver that
// is ahead answers with its newest entry (kDecided) and drops a Paxos message for an older slot,
// one that is behind asks the sender for it (kFetch).
struct Message {
  enum class Kind : uint8_t {
    kPing = 1,      // to the successor (or a suspect): are you alive?
    kPong = 2,      // the answer
    kSuspect = 3,   // "I suspect `subject`": asks the receiver to confirm
    kConfirm = 4,   // "I cannot reach `subject` either"
    kRefute = 5,    // "`subject` answered me"
    kPrepare = 6,   // Paxos phase 1a for slot `slot` + 1 with `ballot`
    kPromise = 7,   // phase 1b: `accepted_ballot` and `value` when something was accepted
    kAccept = 8,    // phase 2a: accept `value` under `ballot`
    kAccepted = 9,  // phase 2b
    kNack = 10,     // a Prepare or Accept refused: `ballot` is the higher one promised
    kDecided = 11,  // `value` is the sender's newest decided entry
    kFetch = 12,    // please send me your newest decided entry
    kJoin = 13,     // a non-member (`from`, `from_address`) asks to be admitted
  };
  Kind kind = Kind::kPing;
  NodeId from = 0;
  NodeId to = 0;  // 0: every seed address (kJoin from a node that knows no member)
  std::string from_address;
  uint64_t slot = 0;  // the sender's decided slot
  Ballot ballot;
  Ballot accepted_ballot;
  std::optional<Entry> value;
  NodeId subject = 0;
  friend bool operator==(const Message&, const Message&) = default;
};

// What a node must keep across restarts (persisted before any message that depends on it is
// sent): its newest decided entry, and its Paxos acceptor state for the next slot.
struct DurableState {
  Entry decided;
  Ballot promised;                // highest ballot promised for slot decided.slot + 1
  Ballot accepted_ballot;         // ballot of `accepted` (round 0: none)
  std::optional<Entry> accepted;  // value accepted for slot decided.slot + 1
  friend bool operator==(const DurableState&, const DurableState&) = default;
};

// The outcome of a ProposeState request (MembershipMachine::TakeStateResults).
struct StateResult {
  uint64_t request = 0;
  Status status;         // OK, FailedPrecondition (version moved), Unavailable (not a member)
  uint64_t version = 0;  // OK: the new version; otherwise the current one
};

// A short name of a message kind ("Prepare") for logs and errors.
const char* KindName(Message::Kind kind);

}  // namespace rt::elastic::membership
