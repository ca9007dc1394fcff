// One replica of one chain as a pure state machine: no sockets, threads, clocks or disks. The
// driver (ringfsd, or the simulator in the tests) feeds it configs, messages, client writes and
// ticks, persists its chunk states (TakeDirty) and then carries out its outputs in order.
//
// Writes enter at the head, which assigns the next version of the chunk and forwards the whole
// value down the chain; the tail commits and acknowledges back up; each replica commits on the
// acknowledgement. A replica's committed version is always one its tail committed, so any
// serving replica may answer reads with it. Pending versions are re-forwarded on every tick and
// on every new chain version; a replica that is no longer followed by anyone commits its pending
// versions itself. A member rejoining a chain drops its pending versions (they may never have
// committed) and is brought up to date by a sync from the last serving member before it serves.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <vector>

#include "iofs/chain/chain_types.h"

namespace rt::iofs::chain {

// Not thread-safe; the driver serialises calls.
class ReplicaMachine {
 public:
  // `chunks` is this replica's durable state for `chain` (empty for a new replica). A pending
  // version is re-forwarded on a tick only when `retransmit_ticks` ticks have passed since it
  // was last sent (a new chain version re-forwards everything at once). A sync round (the
  // committed state sent to a syncing successor) is sent once per chain version and again only
  // after `resync_ticks` ticks without completing; in between, ticks repeat its end marker.
  ReplicaMachine(NodeId self, ChainId chain, std::map<ChunkKey, ChunkState> chunks = {},
                 uint64_t retransmit_ticks = 2, uint64_t resync_ticks = 12);

  // Installs a chain version from the manager; older or equal versions are ignored. A version
  // after the first one since the replica started forgets the committed tombstones (but those at
  // the highest committed version; docs/formats/iofs_chain.md, "Forgetting deletions").
  void OnConfig(const ChainConfig& config);
  // Handles a message from another replica.
  void OnMessage(const Message& message);
  // A client write of `value` to `key` (request id chosen by the client). Only the head accepts;
  // elsewhere the reply is kNotServing. The reply comes once the write (or a later version) is
  // committed.
  void OnClientWrite(uint64_t request_id, ChunkKey key, Value value);
  // Periodic: re-forwards pending versions, resends sync rounds. Drivers call it every few
  // hundred milliseconds; the simulator every few steps.
  void OnTick();

  // Answers a read: the committed value and version (version 0 = never written, or deleted and
  // its tombstone since forgotten). kNotServing if
  // this replica is not a serving member of the current chain version.
  Result<std::pair<uint64_t, Value>> Read(ChunkKey key) const;

  // Outputs produced since the last call, in order.
  std::vector<Output> TakeOutputs();
  // Keys whose ChunkState changed since the last call (the driver persists them before sending);
  // a key no longer in chunks() was forgotten (its durable state is to be removed).
  std::vector<ChunkKey> TakeDirty();

  // Drops the in-memory copy of a committed value once the driver has stored it (the driver
  // then loads it from disk when a message carries it).
  void ReleaseCommittedData(ChunkKey key);

  // Durable state, for persistence and checks.
  const std::map<ChunkKey, ChunkState>& chunks() const { return chunks_; }
  const ChainConfig& config() const { return config_; }
  // True if this replica is a serving member of its current config.
  bool serving() const;
  NodeId self() const { return self_; }

 private:
  int IndexOf(NodeId node) const;
  std::optional<NodeId> Successor() const;
  std::optional<NodeId> Predecessor() const;
  bool IsLastServing() const;
  void Send(Message::Kind kind, NodeId to, ChunkKey key, uint64_t version, Value value,
            uint64_t count = 0);
  void Commit(ChunkKey key, uint64_t version, const Value& value);
  // Keeps pending_keys_ (and sent_at_) in step with `st`, the state of `key`, after a change
  // of its pending versions.
  void NotePending(ChunkKey key, const ChunkState& st);
  // Raises clock_ to `version`.
  void NoteVersion(uint64_t version);
  // Forgets the committed tombstones with nothing pending, but those at the highest committed
  // version (called when a chain version begins). The driver sees their keys dirty and gone
  // from chunks().
  void DropTombstones();
  // A syncing member's complete round listed `round`: forgets every committed key not in it
  // and not written under the current chain version.
  void DropWhatTheRoundLacks(const std::set<ChunkKey>& round);
  void ReplyWaiting(ChunkKey key);
  void PushPending(bool only_stale);
  void SendSyncRound();
  void SendSyncDone();

  NodeId self_;
  ChainId chain_id_;
  ChainConfig config_;
  std::map<ChunkKey, ChunkState> chunks_;
  // The highest version of any key this replica has held (committed or pending); a key it does
  // not hold is written above it. Restored from chunks_, which always keeps an entry above every
  // tombstone dropped.
  uint64_t clock_ = 0;
  // Keys written under the current chain version (forwards, commits, client writes).
  std::set<ChunkKey> touched_;
  // Volatile state (lost on a crash).
  std::map<ChunkKey, std::multimap<uint64_t, uint64_t>> waiting_;  // key → version → request
  // Keys received by kSync under the current config, per sync round.
  std::map<uint64_t, std::set<ChunkKey>> round_keys_;
  bool sync_reported_ = false;  // kSyncComplete sent for the current config
  uint64_t ticks_ = 0;
  uint64_t sync_round_ = 0;        // id of the last sync round sent
  uint64_t sync_round_count_ = 0;  // keys in it
  uint64_t sync_round_tick_ = 0;   // tick it was sent
  uint64_t retransmit_ticks_ = 2;
  uint64_t resync_ticks_ = 12;
  // The keys with pending versions: a tick's work is proportional to them, not to every key the
  // chain ever held (deleted ones stay as tombstones).
  std::set<ChunkKey> pending_keys_;
  std::map<ChunkKey, uint64_t> sent_at_;  // tick a key's top pending version was last forwarded
  std::vector<Output> outputs_;
  std::set<ChunkKey> dirty_;
};

}  // namespace rt::iofs::chain
