// The daemon's side of the memory tier (docs/daemon.md "Memory tier"): the SnapshotPut/Get/List/
// Remove handlers (daemon/snapshot_wire.h) over this daemon's MemoryStore, on the daemon's RPC
// server (authenticated with the cluster secret like every other call there).
//
// - A put from a worker ("origin") is stored here and, before the reply, forwarded to the
//   successor in the ring (the next member by id; when it cannot be reached, the next live one
//   after it); a shared file (`latest`) goes to every member. The put succeeds only once another
//   member holds a copy (or this daemon is the only member). A put from a member ("replica") is
//   only stored. Fault point: daemon.snapshot.replica_put (a member receiving a copy).
// - A get or list from a worker ("any") is answered from this store and, for files it does not
//   hold, from the other members (asked in ring order, "local" scope); `latest` is the newest
//   any member holds, so every worker sees the same one; a remove goes everywhere.
//   So a single node loss leaves every file of a snapshot readable through any live daemon.
// - Lists, removes and `latest` ask every other member at once with a short deadline
//   (control_timeout), so a member that is cut off but still in the view costs one short wait,
//   not one per member. A call to a member that fails for want of an answer (deadline, broken
//   connection) closes that connection: the next call connects anew instead of queueing behind
//   a connection stalled by a partition.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "base/deadline.h"
#include "base/net/rpc.h"
#include "daemon/memory_store.h"

namespace rt::daemon {

// A member of the current view as the memory tier sees it.
struct SnapshotPeer {
  uint64_t id = 0;
  std::string address;  // "host:port" of its control port
};

// Settings of a SnapshotService.
struct SnapshotServiceOptions {
  uint64_t self = 0;  // this node's id
  // The current view's members (this node included); called on the service's executor.
  std::function<std::vector<SnapshotPeer>()> members;
  // The cluster secret for calls to the other members (null: none).
  std::shared_ptr<const net::ClusterSecret> secret;
  // Deadline of one call to another member that carries file data (a piece of a put or a get).
  std::chrono::milliseconds peer_timeout{10'000};
  // Deadline of one call without file data (a list, a remove, a `latest`).
  std::chrono::milliseconds control_timeout{2'000};
  // Deadline of connecting to another member (a dead one is refused until the view drops it).
  std::chrono::milliseconds connect_timeout{2'000};
  // A put whose next piece does not come within this long is dropped.
  std::chrono::milliseconds upload_timeout{120'000};
};

// The memory tier of one daemon. Lives on one executor (the daemon's io thread), where its
// handlers run; shared_ptr because its coroutines hold it.
class SnapshotService : public std::enable_shared_from_this<SnapshotService> {
 public:
  static std::shared_ptr<SnapshotService> Create(boost::asio::any_io_executor executor,
                                                 SnapshotServiceOptions options);
  // Registers the four handlers on `server` (before it starts).
  void Register(net::RpcServer& server);
  // {bytes, files, uploads}: what this daemon holds now. On the executor.
  nlohmann::json Report() const;
  // Closes the connections to the other members. On the executor.
  void Close();

 private:
  struct Upload {
    std::vector<uint8_t> data;
    MonoTime touched;
  };
  SnapshotService(boost::asio::any_io_executor executor, SnapshotServiceOptions options);

  using Payload = std::vector<std::byte>;
  boost::asio::awaitable<Result<Payload>> HandlePut(std::span<const std::byte> payload);
  boost::asio::awaitable<Result<Payload>> HandleGet(std::span<const std::byte> payload);
  boost::asio::awaitable<Result<Payload>> HandleList(std::span<const std::byte> payload);
  boost::asio::awaitable<Result<Payload>> HandleRemove(std::span<const std::byte> payload);

  // The `latest` of `job` that names the newest step among `mine` and the other members' (null
  // when none holds one).
  boost::asio::awaitable<Result<SnapshotBytes>> NewestLatest(uint64_t job, SnapshotBytes mine);
  // Copies a file a worker put here to the other members: a shared file (`latest`) to every
  // member, any other file to the first `copies` members in ring order that take it (the
  // successors; a member that cannot be reached is passed over: it died, and the view does not
  // know yet). Fewer takers than `copies` is logged. Errors: when no other member took a copy
  // (the first error, naming its member): the put then fails, since this daemon's memory alone
  // does not survive its loss. OK without other members.
  boost::asio::awaitable<Status> CopyToOthers(uint64_t job, const std::string& path,
                                              SnapshotBytes bytes, int copies);
  // Sends `bytes` as `path` of `job` to member `peer` ("replica" puts, piece by piece).
  boost::asio::awaitable<Status> Replicate(const SnapshotPeer& peer, uint64_t job,
                                           const std::string& path, SnapshotBytes bytes);
  // Calls `type` on member `peer` with `payload` within `timeout`; returns the response
  // payload. A call that got no answer (DeadlineExceeded, Unavailable) closes the connection.
  boost::asio::awaitable<Result<Payload>> CallPeer(const SnapshotPeer& peer, uint16_t type,
                                                   Payload payload,
                                                   std::chrono::milliseconds timeout);
  // CallPeer on every member of `peers` at once (control_timeout); the results in their order.
  boost::asio::awaitable<std::vector<Result<Payload>>> CallEach(
      const std::vector<SnapshotPeer>& peers, uint16_t type, Payload payload);
  // The other members in ring order, starting with this node's successor.
  std::vector<SnapshotPeer> Others() const;

  boost::asio::any_io_executor executor_;
  SnapshotServiceOptions options_;
  MemoryStore store_;
  std::map<std::string, Upload> uploads_;  // by "upload id/job/path"
  uint64_t upload_bytes_ = 0;
  std::map<std::string, std::shared_ptr<net::RpcClient>> peers_;  // by address
  uint64_t next_upload_ = 1;
};

}  // namespace rt::daemon
