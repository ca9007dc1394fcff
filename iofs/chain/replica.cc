#include "iofs/chain/replica.h"

#include <algorithm>

namespace rt::iofs::chain {

ReplicaMachine::ReplicaMachine(NodeId self, ChainId chain, std::map<ChunkKey, ChunkState> chunks,
                               uint64_t retransmit_ticks, uint64_t resync_ticks)
    : self_(self),
      chain_id_(chain),
      chunks_(std::move(chunks)),
      retransmit_ticks_(retransmit_ticks),
      resync_ticks_(resync_ticks) {
  config_.chain = chain;
  for (const auto& [key, st] : chunks_) {
    NoteVersion(st.committed_version);
    if (!st.pending.empty()) {
      pending_keys_.insert(key);
      NoteVersion(st.pending.rbegin()->first);
    }
  }
}

void ReplicaMachine::NoteVersion(uint64_t version) { clock_ = std::max(clock_, version); }

void ReplicaMachine::DropTombstones() {
  // A tombstone at the highest committed version stays: the clock restarts from the durable
  // state, which must hold a version above every one dropped.
  uint64_t highest = 0;
  for (const auto& [key, st] : chunks_) highest = std::max(highest, st.committed_version);
  for (auto it = chunks_.begin(); it != chunks_.end();) {
    const ChunkState& st = it->second;
    if (st.committed_version == 0 || !st.committed.tombstone || st.committed_version >= highest ||
        !st.pending.empty() || waiting_.contains(it->first)) {
      ++it;
      continue;
    }
    dirty_.insert(it->first);
    it = chunks_.erase(it);
  }
}

void ReplicaMachine::DropWhatTheRoundLacks(const std::set<ChunkKey>& round) {
  for (auto it = chunks_.begin(); it != chunks_.end();) {
    const ChunkState& st = it->second;
    if (st.committed_version == 0 || !st.pending.empty() || round.contains(it->first) ||
        touched_.contains(it->first) || waiting_.contains(it->first)) {
      ++it;
      continue;
    }
    dirty_.insert(it->first);
    it = chunks_.erase(it);
  }
}

void ReplicaMachine::NotePending(ChunkKey key, const ChunkState& st) {
  if (!st.pending.empty()) {
    pending_keys_.insert(key);
    return;
  }
  pending_keys_.erase(key);
  sent_at_.erase(key);
}

int ReplicaMachine::IndexOf(NodeId node) const {
  for (size_t i = 0; i < config_.members.size(); ++i)
    if (config_.members[i].node == node) return static_cast<int>(i);
  return -1;
}

std::optional<NodeId> ReplicaMachine::Successor() const {
  const int i = IndexOf(self_);
  if (i < 0 || i + 1 >= static_cast<int>(config_.members.size())) return std::nullopt;
  return config_.members[i + 1].node;
}

std::optional<NodeId> ReplicaMachine::Predecessor() const {
  const int i = IndexOf(self_);
  if (i <= 0) return std::nullopt;
  return config_.members[i - 1].node;
}

bool ReplicaMachine::serving() const {
  const int i = IndexOf(self_);
  return i >= 0 && config_.members[i].state == MemberState::kServing;
}

bool ReplicaMachine::IsLastServing() const {
  const int i = IndexOf(self_);
  if (i < 0 || config_.members[i].state != MemberState::kServing) return false;
  return i + 1 >= static_cast<int>(config_.members.size()) ||
         config_.members[i + 1].state == MemberState::kSyncing;
}

void ReplicaMachine::Send(Message::Kind kind, NodeId to, ChunkKey key, uint64_t version,
                          Value value, uint64_t count) {
  Output out;
  out.kind = Output::Kind::kSend;
  out.message =
      Message{kind, chain_id_, config_.version, self_, to, key, version, std::move(value), count};
  outputs_.push_back(std::move(out));
}

void ReplicaMachine::Commit(ChunkKey key, uint64_t version, const Value& value) {
  ChunkState& st = chunks_[key];
  if (version > st.committed_version) {
    st.committed_version = version;
    st.committed = value;
  }
  st.pending.erase(st.pending.begin(), st.pending.upper_bound(st.committed_version));
  NotePending(key, st);
  NoteVersion(version);
  touched_.insert(key);
  dirty_.insert(key);
}

void ReplicaMachine::ReplyWaiting(ChunkKey key) {
  auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  auto held = chunks_.find(key);
  const uint64_t committed = held == chunks_.end() ? 0 : held->second.committed_version;
  auto& by_version = it->second;
  for (auto w = by_version.begin(); w != by_version.end() && w->first <= committed;) {
    Output out;
    out.kind = Output::Kind::kReply;
    out.request_id = w->second;
    out.code = StatusCode::kOk;
    out.version = w->first;
    outputs_.push_back(out);
    w = by_version.erase(w);
  }
  if (by_version.empty()) waiting_.erase(it);
}

void ReplicaMachine::PushPending(bool only_stale) {
  if (IndexOf(self_) < 0) return;
  const std::optional<NodeId> succ = Successor();
  const std::optional<NodeId> pred = Predecessor();
  // A copy: a tail's Commit below takes the key out of the set.
  const std::vector<ChunkKey> keys(pending_keys_.begin(), pending_keys_.end());
  for (ChunkKey key : keys) {
    const ChunkState& st = chunks_.at(key);
    const auto& [version, value] = *st.pending.rbegin();
    if (succ) {
      auto sent = sent_at_.find(key);
      if (only_stale && sent != sent_at_.end() && sent->second + retransmit_ticks_ > ticks_)
        continue;
      sent_at_[key] = ticks_;
      Send(Message::Kind::kForward, *succ, key, version, value);
    } else {
      // Nobody follows: this replica is the tail and commits.
      const uint64_t v = version;
      const Value val = value;
      Commit(key, v, val);
      if (pred) Send(Message::Kind::kAck, *pred, key, v, {});
      ReplyWaiting(key);
    }
  }
}

void ReplicaMachine::SendSyncRound() {
  const std::optional<NodeId> succ = Successor();
  if (!succ) return;
  const uint64_t round = ++sync_round_;
  uint64_t count = 0;
  for (const auto& [key, st] : chunks_) {
    if (st.committed_version == 0) continue;
    Send(Message::Kind::kSync, *succ, key, st.committed_version, st.committed, round);
    ++count;
  }
  sync_round_count_ = count;
  sync_round_tick_ = ticks_;
  SendSyncDone();
}

void ReplicaMachine::SendSyncDone() {
  const std::optional<NodeId> succ = Successor();
  if (!succ || sync_round_ == 0) return;
  // A pending version here may already be committed further down (by a tail that since left),
  // so the sync may only complete once the syncing member has acknowledged all of them: the
  // round is closed only when nothing is pending.
  if (!pending_keys_.empty()) return;
  Send(Message::Kind::kSyncDone, *succ, 0, sync_round_, {}, sync_round_count_);
}

void ReplicaMachine::OnConfig(const ChainConfig& config) {
  if (config.chain != chain_id_ || config.version <= config_.version) return;
  const bool was_member = IndexOf(self_) >= 0;
  // The first version after a start may be the one the replica ran under before (a quick
  // restart), whose messages are still taken.
  const bool version_changed = config_.version != 0;
  config_ = config;
  round_keys_.clear();
  touched_.clear();
  sync_reported_ = false;
  const int i = IndexOf(self_);
  if (i != 0) {
    // Only the head answers clients; anyone waiting here retries at the new head.
    for (auto& [key, by_version] : waiting_)
      for (auto& [version, request] : by_version) {
        Output out;
        out.kind = Output::Kind::kReply;
        out.request_id = request;
        out.code = StatusCode::kNotServing;
        outputs_.push_back(out);
      }
    waiting_.clear();
  }
  if (i < 0) return;
  if (!was_member && config_.members[i].state == MemberState::kSyncing) {
    // Rejoining: pending versions from an earlier membership may never have committed, and the
    // chain may since have given their version numbers to other writes.
    for (ChunkKey key : pending_keys_) {
      auto held = chunks_.find(key);
      held->second.pending.clear();
      if (held->second.committed_version == 0) chunks_.erase(held);  // nothing left of it
      dirty_.insert(key);
    }
    pending_keys_.clear();
    sent_at_.clear();
  }
  // No message of an earlier chain version is taken from now on, so no late forward can bring
  // back a version below a tombstone dropped here.
  if (version_changed) DropTombstones();
  PushPending(/*only_stale=*/false);
  const std::optional<NodeId> succ = Successor();
  if (succ && IsLastServing()) SendSyncRound();
}

void ReplicaMachine::OnMessage(const Message& m) {
  if (m.chain != chain_id_ || m.chain_version != config_.version || m.to != self_) return;
  const int i = IndexOf(self_);
  if (i < 0) return;
  const std::optional<NodeId> succ = Successor();
  const std::optional<NodeId> pred = Predecessor();
  switch (m.kind) {
    case Message::Kind::kForward: {
      if (pred != m.from) return;
      ChunkState& st = chunks_[m.key];
      touched_.insert(m.key);  // written under this chain version, whatever a sync round lists
      if (m.version <= st.committed_version) {
        Send(Message::Kind::kAck, m.from, m.key, m.version, {});
        return;
      }
      // A duplicate of a pending version is not passed on: each replica retransmits its own
      // pending versions on its ticks, so a flood of duplicates cannot build up.
      if (!st.pending.emplace(m.version, m.value).second && succ) return;
      NotePending(m.key, st);
      NoteVersion(m.version);
      dirty_.insert(m.key);
      if (succ) {
        sent_at_[m.key] = ticks_;
        Send(Message::Kind::kForward, *succ, m.key, m.version, m.value);
      } else {
        Commit(m.key, m.version, m.value);
        Send(Message::Kind::kAck, m.from, m.key, m.version, {});
      }
      return;
    }
    case Message::Kind::kAck: {
      if (succ != m.from) return;
      auto held = chunks_.find(m.key);
      if (held == chunks_.end())
        return;  // nothing of it here: not a version this replica forwarded
      ChunkState& st = held->second;
      // Only the first acknowledgement of a version commits and travels on; a predecessor that
      // missed it re-forwards on its tick and gets a fresh acknowledgement.
      if (m.version <= st.committed_version) return;
      auto it = st.pending.find(m.version);
      if (it == st.pending.end()) return;  // not a version this replica forwarded
      const Value value = it->second;
      Commit(m.key, m.version, value);
      if (pred) Send(Message::Kind::kAck, *pred, m.key, m.version, {});
      ReplyWaiting(m.key);
      return;
    }
    case Message::Kind::kSync: {
      if (pred != m.from || config_.members[i].state != MemberState::kSyncing) return;
      ChunkState& st = chunks_[m.key];
      NoteVersion(m.version);
      if (m.version > st.committed_version) {
        st.committed_version = m.version;
        st.committed = m.value;
        st.pending.erase(st.pending.begin(), st.pending.upper_bound(m.version));
        NotePending(m.key, st);
        dirty_.insert(m.key);
      }
      round_keys_[m.count].insert(m.key);
      if (round_keys_.size() > 8) round_keys_.erase(round_keys_.begin());  // old rounds
      return;
    }
    case Message::Kind::kSyncDone: {
      if (pred != m.from || config_.members[i].state != MemberState::kSyncing) return;
      if (sync_reported_) return;
      auto it = round_keys_.find(m.version);
      const uint64_t have = it == round_keys_.end() ? 0 : it->second.size();
      if (have < m.count) return;  // some of this round was lost; a later round repeats it
      // A committed key the round does not list, not written since this chain version began,
      // was deleted while this member was away and its tombstone dropped.
      DropWhatTheRoundLacks(it->second);
      sync_reported_ = true;
      Output out;
      out.kind = Output::Kind::kSyncComplete;
      out.chain = chain_id_;
      out.chain_version = config_.version;
      out.node = self_;
      outputs_.push_back(out);
      return;
    }
  }
}

void ReplicaMachine::OnClientWrite(uint64_t request_id, ChunkKey key, Value value) {
  const int i = IndexOf(self_);
  if (i != 0 || config_.members[0].state != MemberState::kServing) {
    Output out;
    out.kind = Output::Kind::kReply;
    out.request_id = request_id;
    out.code = StatusCode::kNotServing;
    outputs_.push_back(out);
    return;
  }
  // A key not held here (never written, or its tombstone dropped) continues above every version
  // this replica has held: above its dropped tombstone here and on every other member.
  auto held = chunks_.find(key);
  uint64_t version = clock_ + 1;
  if (held != chunks_.end() && held->second.committed_version > 0) {
    const ChunkState& before = held->second;
    const uint64_t top = before.pending.empty() ? 0 : before.pending.rbegin()->first;
    version = std::max(before.committed_version, top) + 1;
  }  // a key with only pending versions: clock_ is above them already
  ChunkState& st = chunks_[key];
  st.pending[version] = value;
  NotePending(key, st);
  NoteVersion(version);
  touched_.insert(key);
  dirty_.insert(key);
  waiting_[key].emplace(version, request_id);
  if (const std::optional<NodeId> succ = Successor()) {
    sent_at_[key] = ticks_;
    Send(Message::Kind::kForward, *succ, key, version, std::move(value));
  } else {
    Commit(key, version, value);
    ReplyWaiting(key);
  }
}

void ReplicaMachine::OnTick() {
  ++ticks_;
  PushPending(/*only_stale=*/true);
  if (Successor() && IsLastServing()) {
    if (sync_round_ == 0 || ticks_ - sync_round_tick_ >= resync_ticks_) {
      SendSyncRound();  // the first, or a lost one: send the whole committed state again
    } else if (ticks_ % 2 == 0) {
      SendSyncDone();
    }
  }
}

Result<std::pair<uint64_t, Value>> ReplicaMachine::Read(ChunkKey key) const {
  if (!serving())
    return Status(StatusCode::kNotServing,
                  "node " + std::to_string(self_) + " does not serve chain " +
                      std::to_string(chain_id_) + " (version " + std::to_string(config_.version) +
                      ")",
                  /*retryable=*/true);
  auto it = chunks_.find(key);
  if (it == chunks_.end()) return std::pair<uint64_t, Value>{0, Value{}};
  return std::pair<uint64_t, Value>{it->second.committed_version, it->second.committed};
}

void ReplicaMachine::ReleaseCommittedData(ChunkKey key) {
  auto it = chunks_.find(key);
  if (it != chunks_.end()) it->second.committed.data.reset();
}

std::vector<Output> ReplicaMachine::TakeOutputs() { return std::exchange(outputs_, {}); }

std::vector<ChunkKey> ReplicaMachine::TakeDirty() {
  std::vector<ChunkKey> out(dirty_.begin(), dirty_.end());
  dirty_.clear();
  return out;
}

}  // namespace rt::iofs::chain
