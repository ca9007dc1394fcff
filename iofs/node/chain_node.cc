#include "iofs/chain_node.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <set>

#include "base/fault.h"
#include "base/log.h"
#include "iofs/chain/replica.h"
#include "iofs/chain/value_buffer.h"
#include "iofs/engine/block_crc.h"

namespace rt::iofs {

using chain::ChainConfig;
using chain::ChainId;
using chain::ChunkKey;
using chain::ChunkState;
using chain::Message;
using chain::Output;
using chain::Value;

namespace {

// What a waiting writer receives.
struct WriteOutcome {
  StatusCode code = StatusCode::kOk;
  uint64_t version = 0;
};

constexpr uint64_t kVersionMask = ~kTombstoneBit;
// Ticks before an unacknowledged forward is sent again (ringfsd ticks every 100 ms).
constexpr uint64_t kRetransmitTicks = 5;
// Ticks before a sync round that did not complete is sent again in full.
constexpr uint64_t kResyncTicks = 100;

}  // namespace

// A waiting writer: its outcome and the key it wrote (its reply goes out once that key's state
// is durable).
struct Waiter {
  std::shared_ptr<std::promise<WriteOutcome>> promise;
  ChunkKey key = 0;
};

// One home chain. A step (a call into the machine) runs under `mu`; storing its changed chunk
// states does not: steps of one chain store different keys in parallel, a key's states are
// stored in step order, and every output waits until what it announces is durable.
struct ChainNode::Slot {
  explicit Slot(chain::ReplicaMachine m) : machine(std::move(m)) {}
  std::mutex mu;
  std::condition_variable changed;     // a step stored its states, or the slot was reloaded
  chain::ReplicaMachine machine;       // GUARDED_BY(mu)
  std::map<uint64_t, Waiter> waiters;  // GUARDED_BY(mu)
  uint64_t next_request = 1;           // GUARDED_BY(mu)
  uint64_t next_step = 1;              // GUARDED_BY(mu)
  std::set<uint64_t> storing;          // steps storing states now; GUARDED_BY(mu)
  std::map<ChunkKey, std::set<uint64_t>> claims;  // key → steps storing it; GUARDED_BY(mu)
  // A store failed: the machine is ahead of the disk until every running store has finished and
  // the machine is reloaded from the disk. No step enters meanwhile.
  bool broken = false;   // GUARDED_BY(mu)
  Status broken_status;  // GUARDED_BY(mu)

  // True if a step before `step` is still storing `key`.
  bool EarlierStoring(ChunkKey key, uint64_t step) const {
    auto it = claims.find(key);
    return it != claims.end() && *it->second.begin() < step;
  }
  // True if a step before `step` is still storing anything.
  bool AnyEarlierStoring(uint64_t step) const {
    return !storing.empty() && *storing.begin() < step;
  }
};

ChainNode::ChainNode(chain::NodeId self, size_t chain_count, ChunkEngine* engine,
                     ChainTransport* transport)
    : self_(self), chain_count_(chain_count), engine_(engine), transport_(transport) {}

ChainNode::~ChainNode() = default;

namespace {

// Reads the durable chunk states of `chain` from the engine.
Result<std::map<ChunkKey, ChunkState>> LoadChain(ChunkEngine* engine, ChainId chain,
                                                 size_t chain_count) {
  std::map<ChunkKey, ChunkState> states;
  for (const ChunkInfo& c : engine->List()) {
    const bool pending = c.id & kPendingBit;
    const ChunkKey key = c.id & ~kPendingBit;
    if (chain::ChainOf(key, chain_count) != chain) continue;
    const uint64_t version = c.version & kVersionMask;
    const bool tombstone = c.version & kTombstoneBit;
    ChunkState& st = states[key];
    if (pending) {
      Value v;
      v.tombstone = tombstone;
      if (!tombstone) {
        std::vector<std::byte> data;
        RETURN_IF_ERROR(engine->ReadAll(c.id, &data));
        v.data = std::make_shared<const std::string>(reinterpret_cast<const char*>(data.data()),
                                                     data.size());
      }
      st.pending[version] = v;
    } else {
      st.committed_version = version;
      st.committed.tombstone = tombstone;  // data stays on disk
    }
  }
  // A pending version at or below the committed one is left over from a crash mid-commit.
  for (auto& [key, st] : states)
    st.pending.erase(st.pending.begin(), st.pending.upper_bound(st.committed_version));
  return states;
}

}  // namespace

Result<std::unique_ptr<ChainNode>> ChainNode::Open(chain::NodeId self, size_t chain_count,
                                                   const std::vector<ChainId>& home_chains,
                                                   ChunkEngine* engine, ChainTransport* transport) {
  if (chain_count == 0) return InvalidArgument("chain node: chain count is 0");
  std::unique_ptr<ChainNode> node(new ChainNode(self, chain_count, engine, transport));
  for (ChainId c : home_chains) {
    if (c >= chain_count)
      return InvalidArgument("chain node: home chain " + std::to_string(c) + " out of range");
    ASSIGN_OR_RETURN(auto states, LoadChain(engine, c, chain_count));
    node->slots_[c] = std::make_unique<Slot>(
        chain::ReplicaMachine(self, c, std::move(states), kRetransmitTicks, kResyncTicks));
  }
  return node;
}

ChainNode::Slot* ChainNode::Find(ChainId chain) {
  auto it = slots_.find(chain);
  return it == slots_.end() ? nullptr : it->second.get();
}

Status ChainNode::Store(const std::vector<std::pair<ChunkKey, ChunkState>>& states,
                        std::vector<std::pair<ChunkKey, uint64_t>>* stored_committed) {
  std::vector<ChunkWrite> writes;
  std::vector<ChunkId> removes;
  for (const auto& [key, st] : states) {
    const ChunkId pending_id = key | kPendingBit;
    Result<ChunkInfo> on_disk = engine_->Stat(key);
    const uint64_t disk_version = on_disk.ok() ? (on_disk->version & kVersionMask) : 0;
    Result<ChunkInfo> pending_disk = engine_->Stat(pending_id);
    uint64_t pending_version = pending_disk.ok() ? (pending_disk->version & kVersionMask) : 0;
    if (st.committed_version == 0 && st.pending.empty()) {  // forgotten by the machine
      if (on_disk.ok()) removes.push_back(key);
      if (pending_disk.ok()) removes.push_back(pending_id);
      continue;
    }
    if (st.committed_version > disk_version) {
      const uint64_t stored = st.committed_version | (st.committed.tombstone ? kTombstoneBit : 0);
      if (pending_version == st.committed_version) {
        // The pending copy is exactly this version: commit it by moving metadata, no data copy.
        RETURN_IF_ERROR(engine_->Move(pending_id, key, stored));
        pending_version = 0;
        // On disk now: the machine's copy can go (a commit of a forwarded value lands here).
        stored_committed->emplace_back(key, st.committed_version);
      } else if (st.committed.tombstone) {
        writes.push_back(ChunkWrite{key, stored, {}});
      } else if (st.committed.data) {
        const std::string& d = *st.committed.data;
        writes.push_back(ChunkWrite{key, stored, std::as_bytes(std::span(d.data(), d.size()))});
      } else {
        return Internal("chain node: committed v" + std::to_string(st.committed_version) +
                        " of key " + std::to_string(key) + " has no data to store");
      }
    }
    if (!st.pending.empty()) {
      const auto& [version, value] = *st.pending.rbegin();
      if (pending_version != version) {
        const uint64_t stored = version | (value.tombstone ? kTombstoneBit : 0);
        if (value.tombstone || !value.data) {
          writes.push_back(ChunkWrite{pending_id, stored, {}});
        } else {
          writes.push_back(
              ChunkWrite{pending_id, stored,
                         std::as_bytes(std::span(value.data->data(), value.data->size()))});
        }
      }
    } else if (pending_version != 0) {
      removes.push_back(pending_id);
    }
  }
  if (!writes.empty()) RETURN_IF_ERROR(engine_->Write(writes));
  if (!removes.empty()) RETURN_IF_ERROR(engine_->Remove(removes));
  for (const ChunkWrite& w : writes)
    if (!(w.id & kPendingBit)) stored_committed->emplace_back(w.id, w.version & kVersionMask);
  return Status();
}

Status ChainNode::Reload(Slot& slot) {
  const ChainConfig config = slot.machine.config();
  ASSIGN_OR_RETURN(auto states, LoadChain(engine_, config.chain, chain_count_));
  slot.machine =
      chain::ReplicaMachine(self_, config.chain, std::move(states), kRetransmitTicks, kResyncTicks);
  slot.machine.OnConfig(config);
  (void)slot.machine.TakeOutputs();
  (void)slot.machine.TakeDirty();
  return Status();
}

void ChainNode::Process(Slot& slot, std::unique_lock<std::mutex>& lock) {
  std::vector<ChunkKey> dirty = slot.machine.TakeDirty();
  std::vector<Output> outputs = slot.machine.TakeOutputs();
  if (dirty.empty() && outputs.empty()) return;
  const uint64_t step = slot.next_step++;
  // The states this step stores, as they are now (later steps may change the machine while
  // they are being written).
  std::vector<std::pair<ChunkKey, ChunkState>> states;
  states.reserve(dirty.size());
  for (ChunkKey key : dirty) {
    // A key the machine forgot is stored as a state that never held anything: removed.
    auto it = slot.machine.chunks().find(key);
    states.emplace_back(key, it == slot.machine.chunks().end() ? ChunkState{} : it->second);
    slot.claims[key].insert(step);
  }
  slot.storing.insert(step);
  // A key's states reach the disk in step order.
  slot.changed.wait(lock, [&] {
    for (ChunkKey key : dirty)
      if (slot.EarlierStoring(key, step)) return false;
    return true;
  });
  std::vector<std::pair<ChunkKey, uint64_t>> stored_committed;
  Status stored;
  if (!states.empty()) {
    lock.unlock();
    stored = Store(states, &stored_committed);
    lock.lock();
  }
  slot.storing.erase(step);
  for (ChunkKey key : dirty) {
    auto it = slot.claims.find(key);
    it->second.erase(step);
    if (it->second.empty()) slot.claims.erase(it);
  }
  slot.changed.notify_all();
  if (!stored.ok() && !slot.broken) {
    // The machine is ahead of the disk: it restarts from the disk, as after a crash, once every
    // running store has finished; the writers waiting here fail (they retry).
    LOG_ERROR("chain {} on node {}: storing chunk state failed: {}; reloading from disk",
              slot.machine.config().chain, self_, stored.ToString());
    slot.broken = true;
    slot.broken_status = stored;
  }
  // A committed value on disk needs no copy in memory (unless a later step replaced it).
  for (const auto& [key, version] : stored_committed) {
    auto it = slot.machine.chunks().find(key);
    if (it != slot.machine.chunks().end() && it->second.committed_version == version)
      slot.machine.ReleaseCommittedData(key);
  }
  for (Output& out : outputs) {
    // Each output waits until what it announces is durable: the state of its key, or (for sync
    // reports) every state stored before it.
    slot.changed.wait(lock, [&] {
      if (slot.broken) return true;
      switch (out.kind) {
        case Output::Kind::kSend:
          if (out.message.kind == Message::Kind::kSyncDone) return !slot.AnyEarlierStoring(step);
          return !slot.EarlierStoring(out.message.key, step);
        case Output::Kind::kReply: {
          auto w = slot.waiters.find(out.request_id);
          return w == slot.waiters.end() || !slot.EarlierStoring(w->second.key, step);
        }
        case Output::Kind::kSyncComplete:
          return !slot.AnyEarlierStoring(step);
      }
      return true;
    });
    if (slot.broken) break;  // dropped, as in a crash
    Emit(slot, out);
  }
  if (slot.broken && slot.storing.empty()) Recover(slot);
}

void ChainNode::Emit(Slot& slot, Output& out) {
  switch (out.kind) {
    case Output::Kind::kSend: {
      Message& m = out.message;
      if ((m.kind == Message::Kind::kSync || m.kind == Message::Kind::kForward) &&
          !m.value.tombstone && !m.value.data) {
        // A committed value kept on disk: load it for the message.
        std::vector<std::byte> data;
        ChunkInfo info;
        Status s = engine_->ReadAll(m.key, &data, &info);
        if (!s.ok() || (info.version & kVersionMask) != m.version) {
          LOG_WARN("chain {}: cannot load key {} v{} for a peer: {}", m.chain, m.key, m.version,
                   s.ok() ? "version changed" : s.ToString());
          return;
        }
        m.value.data = std::make_shared<const std::string>(
            reinterpret_cast<const char*>(data.data()), data.size());
        m.value.crc = info.crc;  // the whole-chunk read checked the bytes against it
      }
      if (m.kind == Message::Kind::kForward) {
        if (Status s = RT_FAULT_POINT("iofs.chain.before_forward"); !s.ok()) return;
      }
      transport_->Send(m);
      return;
    }
    case Output::Kind::kReply: {
      auto it = slot.waiters.find(out.request_id);
      if (it == slot.waiters.end()) return;
      it->second.promise->set_value(WriteOutcome{out.code, out.version});
      slot.waiters.erase(it);
      return;
    }
    case Output::Kind::kSyncComplete:
      transport_->ReportSyncComplete(out.node, out.chain, out.chain_version);
      return;
  }
}

void ChainNode::Recover(Slot& slot) {
  for (auto& [request, waiter] : slot.waiters)
    waiter.promise->set_value(WriteOutcome{slot.broken_status.code(), 0});
  slot.waiters.clear();
  if (Status s = Reload(slot); !s.ok())
    LOG_ERROR("chain {} on node {}: reload failed: {}", slot.machine.config().chain, self_,
              s.ToString());
  slot.broken = false;
  slot.broken_status = Status();
  slot.changed.notify_all();
}

void ChainNode::AwaitUsable(Slot& slot, std::unique_lock<std::mutex>& lock) {
  // Bounded: the stores still running end within the engine's I/O deadline, and the last one
  // reloads the slot.
  slot.changed.wait(lock, [&] { return !slot.broken; });
}

void ChainNode::OnConfig(const ChainConfig& config) {
  Slot* slot = Find(config.chain);
  if (!slot) return;
  std::unique_lock lock(slot->mu);
  AwaitUsable(*slot, lock);
  if (config.version > slot->machine.config().version)
    LOG_INFO("node {}: chain {} version {} ({} members)", self_, config.chain, config.version,
             config.members.size());
  slot->machine.OnConfig(config);
  Process(*slot, lock);
}

void ChainNode::OnMessage(const Message& message) {
  Slot* slot = Find(message.chain);
  if (!slot || message.to != self_) return;
  std::unique_lock lock(slot->mu);
  AwaitUsable(*slot, lock);
  slot->machine.OnMessage(message);
  Process(*slot, lock);
}

void ChainNode::Tick() {
  for (auto& [chain, slot] : slots_) {
    std::unique_lock lock(slot->mu);
    AwaitUsable(*slot, lock);
    slot->machine.OnTick();
    Process(*slot, lock);
  }
}

Result<uint64_t> ChainNode::Write(ChunkKey key, std::optional<std::span<const std::byte>> data,
                                  Deadline deadline, ChainWriteOrigin origin) {
  if (key & kPendingBit)
    return InvalidArgument("chunk key " + std::to_string(key) + " uses the pending bit");
  const ChainId chain = chain::ChainOf(key, chain_count_);
  Slot* slot = Find(chain);
  if (!slot)
    return Status(
        StatusCode::kNotServing,
        "node " + std::to_string(self_) + " holds no replica of chain " + std::to_string(chain),
        true);
  Value value;
  if (data) {
    // The copy the machine keeps, so a caller that changes its buffer meanwhile gets one of its
    // versions, never a bad checksum. It is checksummed as it is copied when the CRC32C is to be
    // checked or will be forwarded (the chain has a successor; should it gain one later, the
    // forward computes the CRC32C itself).
    bool forwarded = false;
    {
      std::lock_guard lock(slot->mu);
      forwarded = slot->machine.config().members.size() > 1;
    }
    auto bytes = chain::NewValueBuffer(data->size());
    auto* to = reinterpret_cast<std::byte*>(bytes->data());
    if (origin.crc || forwarded) {
      value.crc = CopyFastCrc32c(to, data->data(), data->size());
    } else if (!data->empty()) {
      std::memcpy(to, data->data(), data->size());
    }
    if (origin.crc && *value.crc != *origin.crc)
      return Status(StatusCode::kChecksumMismatch,
                    "chunk write of key " + std::to_string(key) + ": data CRC32C " +
                        std::to_string(*value.crc) + " != " + std::to_string(*origin.crc) +
                        " sent with it (corrupted in transit)");
    value.data = std::move(bytes);
    value.staged_at = origin.staged_at;
    value.staged_id = origin.staged_id;
  } else {
    value.tombstone = true;
  }
  std::future<WriteOutcome> future;
  uint64_t request = 0;
  {
    std::unique_lock lock(slot->mu);
    AwaitUsable(*slot, lock);
    if (const uint64_t mine = slot->machine.config().version;
        origin.chain_version != 0 && origin.chain_version != mine)
      return Status(StatusCode::kNotServing,
                    "write of chunk " + std::to_string(key) + " routed by chain " +
                        std::to_string(chain) + " version " + std::to_string(origin.chain_version) +
                        ", node " + std::to_string(self_) + " has version " + std::to_string(mine),
                    true);
    request = slot->next_request++;
    auto promise = std::make_shared<std::promise<WriteOutcome>>();
    future = promise->get_future();
    slot->waiters[request] = Waiter{promise, key};
    slot->machine.OnClientWrite(request, key, std::move(value));
    Process(*slot, lock);
  }
  if (future.wait_until(deadline.when()) != std::future_status::ready) {
    std::lock_guard lock(slot->mu);
    slot->waiters.erase(request);
    return Status(StatusCode::kDeadlineExceeded,
                  "write of chunk " + std::to_string(key) + " on chain " + std::to_string(chain) +
                      " not committed in time",
                  true);
  }
  WriteOutcome outcome = future.get();
  if (outcome.code == StatusCode::kNotServing)
    return Status(
        StatusCode::kNotServing,
        "node " + std::to_string(self_) + " is not the head of chain " + std::to_string(chain),
        true);
  if (outcome.code != StatusCode::kOk)
    return Status(outcome.code, "write of chunk " + std::to_string(key) + " failed on node " +
                                    std::to_string(self_));
  return outcome.version;
}

Status ChainNode::CheckReadable(ChunkKey key) {
  const ChainId chain = chain::ChainOf(key, chain_count_);
  Slot* slot = Find(chain);
  if (!slot)
    return Status(
        StatusCode::kNotServing,
        "node " + std::to_string(self_) + " holds no replica of chain " + std::to_string(chain),
        true);
  {
    std::lock_guard lock(slot->mu);
    ASSIGN_OR_RETURN(auto committed, slot->machine.Read(key));
    if (committed.first == 0 || committed.second.tombstone)
      return NotFound("chunk " + std::to_string(key) + " not found");
  }
  return Status();
}

Status ChainNode::Read(ChunkKey key, uint64_t offset, uint64_t length, std::vector<std::byte>* out,
                       uint64_t* version) {
  RETURN_IF_ERROR(CheckReadable(key));
  // The engine keeps only committed versions under the key itself (pending ones live under
  // key | kPendingBit), so reading it without the chain lock still returns a committed version:
  // this one or, if a commit raced the read, a newer one.
  ChunkInfo info;
  RETURN_IF_ERROR(
      engine_->Read(key, offset, length, out, &info).WithContext("node " + std::to_string(self_)));
  if (info.version & kTombstoneBit) return NotFound("chunk " + std::to_string(key) + " not found");
  if (version) *version = info.version & kVersionMask;
  return Status();
}

Result<size_t> ChainNode::ReadInto(ChunkKey key, uint64_t offset, std::span<std::byte> out,
                                   uint64_t* version) {
  RETURN_IF_ERROR(CheckReadable(key));
  // Committed versions only, as in Read.
  ChunkInfo info;
  Result<size_t> n = engine_->ReadInto(key, offset, out, &info);
  if (!n.ok()) return n.status().WithContext("node " + std::to_string(self_));
  if (info.version & kTombstoneBit) return NotFound("chunk " + std::to_string(key) + " not found");
  if (version) *version = info.version & kVersionMask;
  return n;
}

Result<PlannedRead> ChainNode::PlanReadInto(ChunkKey key, uint64_t offset,
                                            std::span<std::byte> out) {
  RETURN_IF_ERROR(CheckReadable(key));
  Result<PlannedRead> plan = engine_->PlanReadInto(key, offset, out);
  if (!plan.ok()) return plan.status().WithContext("node " + std::to_string(self_));
  return plan;
}

Result<size_t> ChainNode::FinishReadInto(const PlannedRead& plan, int io_result) {
  Result<size_t> n = engine_->FinishReadInto(plan, io_result);
  if (!n.ok()) return n.status().WithContext("node " + std::to_string(self_));
  // Committed versions only, as in Read.
  if (plan.info.version & kTombstoneBit)
    return NotFound("chunk " + std::to_string(plan.info.id) + " not found");
  return n;
}

std::vector<ChunkKey> ChainNode::Keys() {
  std::vector<ChunkKey> keys;
  for (auto& [chain, slot] : slots_) {
    std::lock_guard lock(slot->mu);
    if (!slot->machine.serving()) continue;
    for (const auto& [key, st] : slot->machine.chunks())
      if (st.committed_version > 0 && !st.committed.tombstone) keys.push_back(key);
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

uint64_t ChainNode::ValueBytesInMemory() {
  uint64_t bytes = 0;
  for (auto& [chain, slot] : slots_) {
    std::lock_guard lock(slot->mu);
    for (const auto& [key, st] : slot->machine.chunks()) {
      if (st.committed.data) bytes += st.committed.data->size();
      for (const auto& [version, value] : st.pending)
        if (value.data) bytes += value.data->size();
    }
  }
  return bytes;
}

std::optional<ChainConfig> ChainNode::Config(ChainId chain) {
  Slot* slot = Find(chain);
  if (!slot) return std::nullopt;
  std::lock_guard lock(slot->mu);
  return slot->machine.config();
}

}  // namespace rt::iofs
