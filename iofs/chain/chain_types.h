// Types of the CRAQ-style chain replication protocol (after 3FS): chains of replicas, the
// messages replicas exchange, and what a replica state machine asks its driver to do.
// Protocol description: docs/formats/iofs_chain.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace rt::iofs::chain {

using NodeId = uint32_t;
using ChainId = uint32_t;
using ChunkKey = uint64_t;

// A replica's role in its chain. Syncing members sit after every serving one (at the tail end),
// receive forwarded writes, and do not serve reads until their sync completes.
enum class MemberState : uint8_t { kServing = 0, kSyncing = 1 };

// One member of a chain.
struct Member {
  NodeId node = 0;
  MemberState state = MemberState::kServing;
  bool operator==(const Member&) const = default;
};

// One version of a chain: members in order head → tail. Every message carries the chain version
// it was sent under; a replica drops messages of any other version.
struct ChainConfig {
  ChainId chain = 0;
  uint64_t version = 0;
  std::vector<Member> members;
  bool operator==(const ChainConfig&) const = default;
};

// An immutable chunk value: the whole content of one version, or a deletion (tombstone). The
// state machine never looks inside; a driver may leave `data` null for a committed value that
// lives on its disk and load it when a message needs it.
struct Value {
  std::shared_ptr<const std::string> data;  // null for a tombstone or a value kept on disk
  bool tombstone = false;
  // CRC32C of *data when the driver knows it (verified on arrival), so a forward need not
  // checksum the value again. Carried along with the value; the state machine never reads it.
  std::optional<uint32_t> crc = std::nullopt;
  // A node that holds this value's bytes already (it sent the write to this chain head), so a
  // forward to it may leave them out (0: none), and which of its staged copies they are. Driver
  // only, like `crc`.
  NodeId staged_at = 0;
  uint64_t staged_id = 0;
  bool deleted() const { return tombstone; }
};

// A chunk as one replica holds it. Durable: the driver persists it before sending.
struct ChunkState {
  uint64_t committed_version = 0;  // 0 = never written
  Value committed;
  std::map<uint64_t, Value> pending;  // versions above committed_version, not yet acknowledged
};

// A message between replicas of one chain.
struct Message {
  enum class Kind : uint8_t {
    kForward = 1,   // predecessor → successor: store `version` of `key` (pending)
    kAck = 2,       // successor → predecessor: `version` of `key` is committed at the tail
    kSync = 3,      // last serving → syncing member: committed state of `key`
    kSyncDone = 4,  // last serving → syncing member: `count` kSync messages make the full set
  };
  Kind kind = Kind::kForward;
  ChainId chain = 0;
  uint64_t chain_version = 0;
  NodeId from = 0;
  NodeId to = 0;
  ChunkKey key = 0;
  uint64_t version = 0;
  Value value;
  uint64_t count = 0;
};

// What a replica asks its driver to do after a step, in order.
struct Output {
  enum class Kind : uint8_t {
    kSend = 1,          // deliver `message`
    kReply = 2,         // answer client request `request_id` with `code` (and `version`)
    kSyncComplete = 3,  // tell the chain manager this member finished syncing `chain_version`
  };
  Kind kind = Kind::kSend;
  Message message;
  uint64_t request_id = 0;
  StatusCode code = StatusCode::kOk;
  uint64_t version = 0;
  ChainId chain = 0;
  uint64_t chain_version = 0;
  NodeId node = 0;
};

// Derives chains from a node list: chain i holds nodes[(i + j) % n] for j < rf, so every node
// heads the same number of chains. InvalidArgument if rf is outside [1, 3] or exceeds the node
// count, or the list is empty or has duplicates.
Result<std::vector<ChainConfig>> BuildChains(const std::vector<NodeId>& nodes, int replication,
                                             int chain_count);

// The chain a chunk key belongs to (a stable hash).
ChainId ChainOf(ChunkKey key, size_t chain_count);

}  // namespace rt::iofs::chain
