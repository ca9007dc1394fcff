// The replicated ObjectStore: routes each object to its chain (ChainOf), writes at the chain's
// head and reads from a serving replica — this node's own first, then the others — so a replica
// with a bad checksum, a dead node or a syncing member is skipped and the read served by another.
// How nodes are reached is the ChainRouter's business (RPC in ringfsd, direct calls in tests).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/status.h"
#include "iofs/chain/chain_types.h"
#include "iofs/object_store.h"

namespace rt::iofs {

// Reaches the chain nodes of a cluster. Thread-safe; calls may block until their deadline.
class ChainRouter {
 public:
  virtual ~ChainRouter() = default;
  // The node this router runs on (its replicas are read first), or 0 for none.
  virtual chain::NodeId self() const = 0;
  // Every node of the cluster.
  virtual std::vector<chain::NodeId> nodes() const = 0;
  virtual size_t chain_count() const = 0;
  // The newest config known for a chain.
  virtual chain::ChainConfig Config(chain::ChainId chain) = 0;
  // ChainNode::Write at `node`, routed by chain version `chain_version` (the config whose head
  // `node` is: ChainWriteOrigin::chain_version).
  virtual Result<uint64_t> WriteAt(chain::NodeId node, chain::ChunkKey key,
                                   std::optional<std::span<const std::byte>> data,
                                   uint64_t chain_version, Deadline deadline) = 0;
  // ChainNode::Read at `node`.
  virtual Status ReadAt(chain::NodeId node, chain::ChunkKey key, uint64_t offset, uint64_t length,
                        std::vector<std::byte>* out, Deadline deadline) = 0;
  // ChainNode::ReadInto at `node`; by default ReadAt into a vector and a copy.
  virtual Result<size_t> ReadAtInto(chain::NodeId node, chain::ChunkKey key, uint64_t offset,
                                    std::span<std::byte> out, Deadline deadline) {
    std::vector<std::byte> bytes;
    RETURN_IF_ERROR(ReadAt(node, key, offset, out.size(), &bytes, deadline));
    const size_t n = std::min(bytes.size(), out.size());
    std::copy_n(bytes.begin(), n, out.begin());
    return n;
  }
  // ChainNode::Keys at `node`.
  virtual Result<std::vector<chain::ChunkKey>> KeysAt(chain::NodeId node, Deadline deadline) = 0;
  // The chunk engine check at `node` (one line per problem).
  virtual Result<std::vector<std::string>> CheckAt(chain::NodeId node, Deadline deadline) = 0;
};

// Options of the replicated store.
struct ChainStoreOptions {
  uint32_t max_object_size = 4u << 20;  // bytes; the engines' chunk_size
  int64_t op_timeout_ms = 30000;        // one put/get/delete, retries included
  // One replica's turn at a read: a replica that does not answer in this time (cut off by a
  // partition, stopped) gives the read to the next one instead of holding it to op_timeout_ms.
  int64_t replica_try_ms = 5000;
  // One try of a write at the chain's head: a head that does not answer in this time is asked
  // again with the chain's newest config (the chain manager replaces a lost head), rather than
  // holding the write, and every file operation waiting on it, to op_timeout_ms. A write that
  // lands twice only adds a version.
  int64_t write_try_ms = 10000;
  // How long a read or write waits for a chain without a serving member (the chain manager stopped
  // it: its last serving member is down, and it waits for that member, which holds every
  // committed write). Then the operation fails with Unavailable rather than hold its caller — and
  // every file operation behind a namespace write — to op_timeout_ms: a member cut off by a
  // partition may be away for minutes, and the callers have better things to do (a resume takes
  // the memory snapshots; a save fails and the next one tries again). Operations share the
  // wait: once a chain has been seen stopped (in one config) for this long, later operations on
  // it fail at once.
  int64_t stopped_chain_ms = 3000;
  int parallel_puts = 8;  // objects of a batch written (or deleted) at once
};

// `router` is not owned and must outlive the store.
std::unique_ptr<ObjectStore> NewChainObjectStore(ChainRouter* router, ChainStoreOptions options);

}  // namespace rt::iofs
