// ChainNode: drives this node's replica state machines (iofs/chain/replica.h) against the local
// chunk engine. After every step it persists the chunks the machine changed — pending versions
// under the key with kPendingBit set, committed versions under the key itself, moved (not
// copied) from pending to committed when the versions match — and only then carries out the
// machine's outputs: messages to peers through a ChainTransport, replies to waiting writers, and
// sync reports to the chain manager. Steps run one at a time per chain, but their stores do not
// hold the chain's lock: stores of different keys overlap, a key's states are stored in step
// order, and an output waits only for the stores of its own key (sync reports: for every earlier
// store). The network is someone else's (ringfsd): this class is also driven in-process by tests.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "base/deadline.h"
#include "base/status.h"
#include "iofs/chain/chain_types.h"
#include "iofs/chunk_engine.h"

namespace rt::iofs {

// Engine chunk ids: a pending version of key K is stored as K | kPendingBit. Keys must keep that
// bit and the top bit of the id space below kPendingBit clear except for kNamespaceKey.
inline constexpr uint64_t kPendingBit = 1ull << 62;
// Engine versions: a tombstone (deleted chunk) is stored empty with this bit set.
inline constexpr uint64_t kTombstoneBit = 1ull << 63;

// How a ChainNode reaches the rest of the cluster. Implementations must not block and must not
// call back into the ChainNode from inside these calls.
class ChainTransport {
 public:
  virtual ~ChainTransport() = default;
  // Sends a message to message.to, best effort (the protocol retransmits what is lost).
  virtual void Send(const chain::Message& message) = 0;
  // Tells the chain manager that `node` finished syncing `chain` at `chain_version`.
  virtual void ReportSyncComplete(chain::NodeId node, chain::ChainId chain,
                                  uint64_t chain_version) = 0;
};

// Where a value written at a chain head (ChainNode::Write) comes from.
struct ChainWriteOrigin {
  std::optional<uint32_t> crc;  // the CRC32C its sender took of the data: the copy must match it
  chain::NodeId staged_at = 0;  // a node keeping the bytes staged: a forward to it leaves them out
  uint64_t staged_id = 0;       // which of that node's staged copies holds them
  // The chain version the writer routed the write by (0: unchecked). The head refuses a write
  // routed by another version than its own (NotServing, retryable): a metadata node that lost
  // its role, whose write was held up in a partition, cannot land it after a newer metadata
  // node has changed the chain (every takeover raises every chain's version).
  uint64_t chain_version = 0;
};

// Thread-safe: each chain has its own lock, so chains proceed in parallel.
class ChainNode {
 public:
  // Restores the machines of `home_chains` (chain ids < chain_count) from `engine` (not owned).
  // The node serves nothing until it receives configs.
  static Result<std::unique_ptr<ChainNode>> Open(chain::NodeId self, size_t chain_count,
                                                 const std::vector<chain::ChainId>& home_chains,
                                                 ChunkEngine* engine, ChainTransport* transport);
  ~ChainNode();

  // Installs a chain version (ignored for chains this node is not home to, or older versions).
  void OnConfig(const chain::ChainConfig& config);
  // Handles a message from a peer.
  void OnMessage(const chain::Message& message);
  // Retransmits pending versions and sync rounds; call every ~100 ms.
  void Tick();

  // Writes the whole value of `key` (nullopt deletes it) at this node, which must be the head of
  // the key's chain, and waits until it is committed. Returns the version. The value is copied
  // and checksummed in one pass (the checksum travels with it). Errors: NotServing (retryable:
  // not the head, or the chain changed), ChecksumMismatch (the data does not match origin.crc:
  // corrupted in transit; nothing is written), DeadlineExceeded, the engine's errors.
  Result<uint64_t> Write(chain::ChunkKey key, std::optional<std::span<const std::byte>> data,
                         Deadline deadline, ChainWriteOrigin origin = {});
  // Reads a committed chunk at this replica, checksums verified. `version` receives its version.
  // Errors: NotServing (not a serving member), NotFound, ChecksumMismatch.
  Status Read(chain::ChunkKey key, uint64_t offset, uint64_t length, std::vector<std::byte>* out,
              uint64_t* version);
  // Read straight into `out` (up to out.size() bytes at `offset`); returns the bytes read.
  Result<size_t> ReadInto(chain::ChunkKey key, uint64_t offset, std::span<std::byte> out,
                          uint64_t* version);
  // ReadInto as a read the caller submits itself (ChunkEngine::PlanReadInto, FinishReadInto):
  // errors of the plan as ReadInto, plus FailedPrecondition when it cannot land straight in `out`.
  Result<PlannedRead> PlanReadInto(chain::ChunkKey key, uint64_t offset, std::span<std::byte> out);
  Result<size_t> FinishReadInto(const PlannedRead& plan, int io_result);
  // Committed, not deleted keys of every home chain this node serves.
  std::vector<chain::ChunkKey> Keys();
  // Bytes of chunk values held in memory (pending versions, and committed ones not yet on disk);
  // committed values on disk are not kept. For tests and stats.
  uint64_t ValueBytesInMemory();
  // The config this node holds for a chain (nullopt if not home to it).
  std::optional<chain::ChainConfig> Config(chain::ChainId chain);
  chain::NodeId self() const { return self_; }
  size_t chain_count() const { return chain_count_; }

 private:
  struct Slot;
  ChainNode(chain::NodeId self, size_t chain_count, ChunkEngine* engine, ChainTransport* transport);
  // Stores chunk states in the engine (no lock held); `stored_committed` receives the (key,
  // version) of every committed value written.
  Status Store(const std::vector<std::pair<chain::ChunkKey, chain::ChunkState>>& states,
               std::vector<std::pair<chain::ChunkKey, uint64_t>>* stored_committed);
  // Finishes a step of the machine: stores the chunk states it changed with `lock` released,
  // then carries out its outputs, each once what it announces is durable.
  void Process(Slot& slot, std::unique_lock<std::mutex>& lock);  // REQUIRES lock on slot.mu
  void Emit(Slot& slot, chain::Output& out);                     // REQUIRES slot.mu
  // After a failed store: fails the waiting writers and reloads the machine from the disk.
  void Recover(Slot& slot);  // REQUIRES slot.mu
  // Waits until the slot is not being recovered.
  void AwaitUsable(Slot& slot, std::unique_lock<std::mutex>& lock);
  Status Reload(Slot& slot);  // REQUIRES slot.mu
  Slot* Find(chain::ChainId chain);
  // OK if this node serves a committed, not deleted version of `key` (NotServing, NotFound).
  Status CheckReadable(chain::ChunkKey key);

  const chain::NodeId self_;
  const size_t chain_count_;
  ChunkEngine* const engine_;
  ChainTransport* const transport_;
  std::map<chain::ChainId, std::unique_ptr<Slot>> slots_;  // fixed after Open
};

}  // namespace rt::iofs
