#include "iofs/server.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/fault.h"
#include "base/log.h"
#include "base/net/auth.h"
#include "base/net/rpc.h"
#include "iofs/chain/chain_manager.h"
#include "iofs/chain/codec.h"
#include "iofs/chain/value_buffer.h"
#include "iofs/chain_node.h"
#include "iofs/chain_store.h"
#include "iofs/engine/block_crc.h"
#include "iofs/file_system.h"
#include "iofs/net/read_ring.h"
#include "iofs/net/shm.h"
#include "iofs/net/wire.h"

// GCC 12 false positives inside std::vector::resize inlined into ByteWriter::Put.
#pragma GCC diagnostic ignored "-Warray-bounds"
#ifndef __clang__  // a GCC-only warning group
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

namespace rt::iofs {
namespace {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using Payload = Result<std::vector<std::byte>>;

// Whole milliseconds from `from` to `to`, for log lines.
int64_t MsBetween(MonoTime from, MonoTime to) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count();
}

Status WriteFileAtomically(const std::string& path, std::span<const std::byte> data) {
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "create " + tmp);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      const int err = errno;
      close(fd);
      return ErrnoStatus(err, "write " + tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, "fsync " + tmp);
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus(errno, "rename " + tmp);
  return Status();
}

Result<std::vector<std::byte>> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

std::vector<std::byte> Empty() { return {}; }

class ServerImpl final : public Server, public ChainTransport, public ChainRouter {
 public:
  explicit ServerImpl(ServerOptions options)
      : options_(std::move(options)),
        client_pool_(static_cast<size_t>(options_.client_threads)),
        peer_pool_(static_cast<size_t>(options_.peer_threads)),
        role_strand_(asio::make_strand(client_pool_.get_executor())) {}

  ~ServerImpl() override { (void)Shutdown(Deadline::AfterMs(5000)); }

  Status Init();
  uint16_t port() const override { return rpc_ ? rpc_->port() : 0; }
  Status Shutdown(Deadline deadline) override;
  ServerStats Stats() override;
  void SetMembers(const std::vector<uint32_t>& eldest_first, uint64_t epoch) override;

  // ChainTransport.
  void Send(const chain::Message& message) override;
  void ReportSyncComplete(chain::NodeId node, chain::ChainId chain, uint64_t version) override;

  // ChainRouter.
  chain::NodeId self() const override { return options_.self; }
  std::vector<chain::NodeId> nodes() const override {
    std::vector<chain::NodeId> ids;
    for (const auto& n : options_.nodes) ids.push_back(n.id);
    return ids;
  }
  size_t chain_count() const override { return static_cast<size_t>(options_.chains); }
  chain::ChainConfig Config(chain::ChainId c) override {
    {
      std::lock_guard lock(manager_mu_);
      if (manager_) return manager_->config(c);
    }
    auto config = chain_->Config(c);
    return config ? *config : chain::ChainConfig{};
  }
  Result<uint64_t> WriteAt(chain::NodeId node, chain::ChunkKey key,
                           std::optional<std::span<const std::byte>> data, uint64_t chain_version,
                           Deadline deadline) override;
  Status ReadAt(chain::NodeId node, chain::ChunkKey key, uint64_t offset, uint64_t length,
                std::vector<std::byte>* out, Deadline deadline) override;
  // OK while this node may read and write the namespace's objects (on its own replicas too):
  // always for a fixed metadata node; with follow_views only while it holds the role, neither
  // frozen (isolated) nor resigning. Else FailedPrecondition (not retried).
  Status ActsForNamespace();
  Result<size_t> ReadAtInto(chain::NodeId node, chain::ChunkKey key, uint64_t offset,
                            std::span<std::byte> out, Deadline deadline) override {
    if (node != options_.self) return ChainRouter::ReadAtInto(node, key, offset, out, deadline);
    RETURN_IF_ERROR(ActsForNamespace());  // also for the local replica: see ReadAt
    return chain_->ReadInto(key, offset, out, nullptr);
  }
  Result<std::vector<chain::ChunkKey>> KeysAt(chain::NodeId node, Deadline deadline) override;
  Result<std::vector<std::string>> CheckAt(chain::NodeId node, Deadline deadline) override;

 private:
  const NodeEndpoint* Endpoint(uint32_t id) const {
    for (const auto& n : options_.nodes)
      if (n.id == id) return &n;
    return nullptr;
  }
  // True when file operations belong to this node (it may still be taking the role over).
  bool is_meta() const { return options_.self == meta_node_.load(); }
  // True when this node runs the chain manager (it holds the metadata role, taken over).
  bool has_manager() {
    std::lock_guard lock(manager_mu_);
    return manager_ != nullptr;
  }

  // Runs `fn` on `pool` and comes back to the I/O thread (co_spawn completes on the caller's
  // executor), so blocking work never runs on the I/O thread.
  template <typename Fn>
  awaitable<Payload> OnPool(asio::thread_pool& pool, Fn fn) {
    // (std::optional: co_spawn's result must be default-constructible, Result is not.)
    std::optional<Payload> result = co_await asio::co_spawn(
        pool.get_executor(), [&fn]() -> awaitable<std::optional<Payload>> { co_return fn(); },
        use_awaitable);
    co_return std::move(*result);
  }

  // Connections to a peer: bulk traffic (replica messages and chunk operations carrying more than
  // kSmallValue bytes) and control traffic (chain versions, sync reports, small
  // values such as the namespace) use separate connections, so a short-deadline ping or a small
  // commit never queues behind megabytes of chunk data (a frame that misses its deadline closes
  // its connection, failing every call on it).
  // Heartbeats have a lane of their own, connected anew after every ping that failed: a
  // connection stalled by a partition (TCP backing off its retransmissions) must not keep a
  // node looking silent after the network is back.
  enum class Lane { kData = 0, kControl = 1, kPing = 2 };
  static constexpr size_t kSmallValue = 64 << 10;
  static Lane LaneFor(size_t value_bytes) {
    return value_bytes > kSmallValue ? Lane::kData : Lane::kControl;
  }
  // Chunk data arriving from peers and TCP clients is read in batches of this many bytes (one
  // wake-up of the I/O thread per batch; RpcServerOptions::payload_read_batch).
  static constexpr uint32_t kPayloadReadBatch = 512 << 10;
  // Bytes of received chunk-data buffers kept for the next requests (RpcServerOptions::
  // spare_payload_bytes): the requests of 16 chunks of 4 MiB, what a client keeps in flight by
  // default.
  static constexpr size_t kSparePayloadBytes = size_t{16} * ((4 << 20) + (64 << 10));
  // A connected client to a peer (I/O thread only).
  awaitable<Result<std::shared_ptr<net::RpcClient>>> Peer(uint32_t id, Deadline deadline,
                                                          Lane lane = Lane::kData);
  // Closes `client` and forgets it as node `id`'s connection on `lane` (I/O thread only).
  void DropPeer(uint32_t id, Lane lane, const std::shared_ptr<net::RpcClient>& client);
  // Closes every connection to node `id` (from any thread): its running calls fail at once
  // (Aborted) and their callers retry elsewhere. For a node taken out of its chains: a write or
  // read waiting on a node cut off by a partition would otherwise hold its file operation, and
  // every one behind it, to the call's try deadline.
  void DropLinksTo(uint32_t id);
  // Calls `type` at node `id` from a worker thread (blocks it, never the I/O thread), on `lane`.
  // `bulk`, if not empty, follows `payload` in a frame without a payload CRC (the protocol
  // carries its own); it must stay valid until the call returns (it blocks until then).
  Result<Frame> CallBlocking(uint32_t id, uint16_t type, std::vector<std::byte> payload,
                             Deadline deadline, std::span<const std::byte> bulk = {},
                             Lane lane = Lane::kData);
  // The answers of CallEachUnlessStopping so far, by node.
  using Answers = std::map<uint32_t, Result<Frame>>;
  // Calls `type` at every node of `ids` at once on the control lane, from a worker thread, and
  // waits for every answer, or until `settled(answers so far)` says they decide the matter, or
  // the server stops (so a pool thread never waits on a call the stopped I/O thread will not
  // finish). A node without an answer by then is missing from the result.
  Answers CallEachUnlessStopping(const std::vector<uint32_t>& ids, uint16_t type,
                                 const std::vector<std::byte>& payload, Deadline deadline,
                                 const std::function<bool(const Answers&)>& settled);

  void RegisterHandlers();
  // Shared-memory clients (iofs/net/shm.h): accepts registrations on the Unix socket.
  void StartSharedMemory(uint16_t port);
  awaitable<void> ShmAcceptLoop();
  awaitable<void> ShmSession(asio::local::stream_protocol::socket socket);
  // kFsWriteShm (write = true) and kFsReadShm.
  Payload HandleShm(bool write, std::span<const std::byte> payload, const std::string& peer);
  struct SharedClient;
  // A kFsReadShm request planned for reading straight into the client's region.
  struct ShmRead {
    std::shared_ptr<SharedClient> client;  // keeps the region mapped while the kernel writes it
    std::span<std::byte> bytes;            // the request's slice of the region
    std::vector<ReadPiece> pieces;
  };
  // Plans a kFsReadShm without waiting for any lock; nullopt when it cannot (the request goes to
  // HandleShm, which also answers every error). REQUIRES fs_role_mu_ held shared.
  std::optional<ShmRead> PlanShmRead(std::span<const std::byte> payload, const std::string& peer);
  // Ends one piece whose planned read transferred `io_result`: its bytes are verified and what the
  // chunk does not hold is zeroed. False when the request must go to HandleShm instead.
  bool FinishShmPiece(const ShmRead& read, const ReadPiece& piece, const PlannedRead& plan,
                      int io_result);
  // kFsReadShm on the I/O thread itself (ReadPath::kIoThread): the chunks this node serves are
  // read on read_ring_ into the client's region, no thread involved; nullopt: use HandleShm.
  awaitable<std::optional<Payload>> ReadShmOnIoThread(std::span<const std::byte> payload,
                                                      const std::string& peer);
  // kFsReadShm on a pool thread with one pread per chunk (ReadPath::kPoolDirect); nullopt: use
  // HandleShm.
  std::optional<Payload> ReadShmDirect(std::span<const std::byte> payload, const std::string& peer);
  Payload HandleFs(uint16_t type, std::span<const std::byte> payload);
  Result<net::RpcBulkReply> HandleFsRead(std::span<const std::byte> payload);
  // The answer of a node that is not the metadata node to a file operation.
  Status NotServingFs() const;
  Result<FileSystem*> Fs();
  // Runs file operation `op` (on a pool thread) if this node holds the metadata role: waits for
  // a takeover that is running (up to 30 s) and holds fs_role_mu_ shared while `op` runs, so the
  // role is never handed over in the middle of it. NotServingFs if another node holds the role;
  // Unavailable while this node is frozen (isolated) or giving the role up.
  template <typename Op>
  auto ServeFs(Op op) -> decltype(op());
  // Waits until no takeover of the metadata role runs here; Unavailable after 30 s.
  Status AwaitTakeover();

  // Chain manager (metadata node only).
  void Broadcast(const std::vector<chain::ChainConfig>& configs);
  void SaveManager();  // REQUIRES manager_mu_
  // How a ping of this manager ended: answered, refused (the node follows another metadata
  // node: alive, but no answer for the majority), or failed (no answer at all).
  enum class PingResult { kAnswered, kRefused, kFailed };
  void OnPing(uint32_t id, PingResult result);
  // `role` is the role_gen_ the loop serves: it ends when the role changes hands.
  awaitable<void> HeartbeatLoop(uint64_t role);
  awaitable<void> TickLoop();
  // The orphan collector (metadata node): FileSystem::CollectOrphans on the client pool now and
  // every options_.collect_ms.
  awaitable<void> CollectLoop(uint64_t role);
  void CollectOnce();
  // Takes nodes outside `members` out of the chains (SetMembers on the metadata node).
  void FollowMembers(const std::set<uint32_t>& members);

  // The moving metadata role (options_.follow_views; SetMembers).
  // Gives up or takes over the role as the newest view says (on role_strand_).
  void ChangeRole();
  // Drops this node's chain manager and namespace once the file operations running here end
  // (no deadline of its own: each operation has one, and its object writes fail at once from the
  // start of the resignation, WriteAt).
  void Resign();
  // Becomes the metadata node of view `epoch` (see Server::SetMembers).
  void TakeOver(const std::set<uint32_t>& members, uint64_t epoch);
  // When a takeover for view `members` may act, given what the members answered its handover
  // about the other metadata nodes they answered (`answered`, by member, received by
  // `received`): FreezeBoundMs after the last answer a node outside the view got from any
  // member or this node, so an old manager cut off from the view has frozen (now when there
  // is none). FreezeBoundMs from now when some member did not answer, or the view is no
  // majority of the store nodes (the answers then bound nothing).
  MonoTime ActAfter(const std::set<uint32_t>& members,
                    const std::map<uint32_t, std::vector<wire::AnsweredAgo>>& answered,
                    bool all_answered, MonoTime received);
  // Answers a ping from metadata node `sender`: refused (FailedPrecondition) unless it is the
  // metadata node this node follows (follow_views), else noted in answered_meta_.
  Status AnswerPing(uint32_t sender);
  // The chain configs this node's own replicas hold (its home chains).
  std::vector<chain::ChainConfig> LocalConfigs() {
    std::vector<chain::ChainConfig> configs;
    for (size_t c = 0; c < layout_.size(); ++c)
      if (auto config = chain_->Config(static_cast<chain::ChainId>(c))) configs.push_back(*config);
    return configs;
  }
  // Answers a kMetaHandover: resigns if the role goes elsewhere, returns what this node knows.
  Payload HandOver(std::span<const std::byte> payload);
  // Keeps `state` (ChainManager::Save bytes) as the newest manager state known here if its
  // version sum is larger than the one kept; `persist` writes it to manager.state too.
  void RememberState(std::vector<std::byte> state, bool persist);
  // Ends a takeover (successful or not): file operations waiting for it go on.
  void EndTakeover();
  // A manager that was isolated from a majority of the store nodes and hears from one again
  // takes the role over anew (on role_strand_): another node may have held it meanwhile.
  void Retake();
  // Isolation (follow_views): a manager that has not heard from a majority of the store nodes
  // (itself included) for this long freezes: no file operations, no chain changes, until it
  // takes the role over again. A manager is sure to have frozen FreezeBoundMs after the last
  // answer it got from a majority (the pings' deadline and period on top); a takeover while a
  // store node is outside the view waits until then (ActAfter), so an old manager cut off with
  // a minority has stopped.
  int64_t IsolatedAfterMs() const { return 3 * options_.heartbeat_ms; }
  int64_t FreezeBoundMs() const { return IsolatedAfterMs() + 4 * options_.heartbeat_ms; }
  // How many store nodes answered this manager's pings in the last IsolatedAfterMs, itself
  // included (REQUIRES manager_mu_).
  size_t NodesHeard() const;
  // Marks this node's manager isolated (`heard`: NodesHeard) (REQUIRES manager_mu_).
  void Isolate(size_t heard);
  // Unavailable when this node's manager is isolated, or is now for not having heard from a
  // majority (follow_views) (REQUIRES manager_mu_).
  Status IsolationError();

  ServerOptions options_;
  // The node file operations go to: fixed without follow_views, else the one the newest view
  // names (SetMembers; 0 before the first view).
  std::atomic<uint32_t> meta_node_{0};
  asio::io_context io_;
  std::thread io_thread_;
  std::unique_ptr<ReadRing> read_ring_;  // I/O thread only (null: no fast shared-memory reads)
  std::atomic<uint64_t> reads_on_io_thread_{0};
  std::atomic<uint64_t> reads_direct_{0};
  asio::thread_pool client_pool_;
  asio::thread_pool peer_pool_;
  std::shared_ptr<net::RpcServer> rpc_;
  // The cluster secret (options_.secret_file): clients and peers prove it to rpc_, this node
  // proves it to its peers (Peer). Null: none (loopback only).
  std::shared_ptr<const net::ClusterSecret> secret_;
  // A client's shared region, usable only from its own TCP connection `peer`.
  struct SharedClient {
    std::unique_ptr<shm::Region> region;
    std::string peer;
  };
  std::unique_ptr<asio::local::stream_protocol::acceptor> shm_acceptor_;  // I/O thread only
  std::mutex shm_mu_;
  std::map<uint32_t, std::shared_ptr<SharedClient>> shm_;  // GUARDED_BY(shm_mu_)
  uint32_t next_shm_ = 1;                                  // GUARDED_BY(shm_mu_)
  std::unique_ptr<ChunkEngine> engine_;
  std::unique_ptr<ChainNode> chain_;
  std::vector<chain::ChainConfig> layout_;
  std::atomic<bool> stopping_{false};
  bool shut_down_ = false;

  std::map<std::pair<uint32_t, Lane>, std::shared_ptr<net::RpcClient>> peers_;  // I/O thread only
  // A connect to a peer in progress, which the other callers wanting that peer wait for.
  struct PendingConnect {
    explicit PendingConnect(asio::any_io_executor executor) : done(executor) {
      done.expires_at(asio::steady_timer::time_point::max());
    }
    asio::steady_timer done;  // cancelled when the connect has ended
    bool ended = false;
    Result<std::shared_ptr<net::RpcClient>> result = Unavailable("the connect has not ended");
  };
  std::map<std::pair<uint32_t, Lane>, std::shared_ptr<PendingConnect>> connecting_;  // I/O thread

  std::mutex manager_mu_;
  std::unique_ptr<chain::ChainManager> manager_;  // metadata node only
  std::map<uint32_t, int> missed_;                // GUARDED_BY(manager_mu_)
  std::map<uint32_t, bool> up_;                   // GUARDED_BY(manager_mu_)
  // The membership set by SetMembers; nullopt: none set, heartbeats alone decide.
  std::optional<std::set<uint32_t>> members_;  // GUARDED_BY(manager_mu_)
  // When each node last answered this manager's ping; whether the manager is isolated, and
  // whether its Retake is queued (follow_views).
  std::map<uint32_t, MonoTime> answered_;  // GUARDED_BY(manager_mu_)
  bool isolated_ = false;                  // GUARDED_BY(manager_mu_)
  bool retake_queued_ = false;             // GUARDED_BY(manager_mu_)
  bool resigning_ = false;  // GUARDED_BY(manager_mu_): Resign waits for the running operations
  std::map<uint32_t, bool> ping_in_flight_;  // I/O thread only
  // When this node's answers to each node acting as a metadata node (its pings, and the
  // handover of its takeover) may last keep that node acting: the time of a ping's answer, or
  // FreezeBoundMs plus a heartbeat after a handover's (the takeover may wait that long, then
  // counts the members as having just answered). A takeover waits for this, not for a fixed
  // bound, when every member answers it (ActAfter).
  std::mutex answered_meta_mu_;
  std::map<uint32_t, MonoTime> answered_meta_;  // GUARDED_BY(answered_meta_mu_)

  // Values this node sent to a remote chain head (WriteAt), kept while the write runs: the head's
  // forward back to this node names them (id, length and CRC32C) instead of carrying the bytes.
  struct StagedValue {
    chain::ChunkKey key = 0;
    std::shared_ptr<const std::string> data;
    uint32_t crc = 0;
  };
  std::mutex staged_mu_;
  std::map<uint64_t, StagedValue> staged_;  // by id; GUARDED_BY(staged_mu_)
  uint64_t next_staged_ = 1;                // GUARDED_BY(staged_mu_)
  std::atomic<uint64_t> staged_forwards_resent_{0};
  // Fills in the bytes of a staged forward from staged_ (NotFound if they are not held here).
  Status ResolveStaged(chain::Message& message, const chain::StagedValueRef& ref);

  std::mutex fs_mu_;
  std::unique_ptr<ObjectStore> store_;  // GUARDED_BY(fs_mu_) for creation
  std::unique_ptr<FileSystem> fs_;      // GUARDED_BY(fs_mu_); dropped when the role goes

  // The newest view (SetMembers) and the role's hand-over state.
  std::mutex view_mu_;
  bool have_view_ = false;           // GUARDED_BY(view_mu_)
  uint64_t view_epoch_ = 0;          // GUARDED_BY(view_mu_)
  std::set<uint32_t> view_members_;  // GUARDED_BY(view_mu_)
  uint64_t meta_epoch_ = 0;          // GUARDED_BY(view_mu_): the view that chose meta_node_
  uint64_t role_epoch_ = 0;          // GUARDED_BY(view_mu_): the view of this node's takeover
  asio::strand<asio::thread_pool::executor_type> role_strand_;  // runs ChangeRole
  std::shared_mutex fs_role_mu_;       // shared: a file operation runs; unique: the role changes
  std::atomic<uint64_t> role_gen_{0};  // bumped at every takeover and resignation
  std::atomic<uint64_t> takeovers_{0};
  std::mutex takeover_mu_;
  std::condition_variable takeover_cv_;
  bool taking_over_ = false;  // GUARDED_BY(takeover_mu_)
  // The newest chain manager state this node knows (its own, or one a manager's ping carried).
  std::mutex known_mu_;
  std::vector<std::byte> known_state_;  // GUARDED_BY(known_mu_)
  uint64_t known_sum_ = 0;              // GUARDED_BY(known_mu_): its version sum
  std::mutex state_file_mu_;            // held while manager.state is written
};

Status ServerImpl::Init() {
  auto& o = options_;
  if (o.nodes.empty()) return InvalidArgument("ringfsd: the node list is empty");
  if (!Endpoint(o.self))
    return InvalidArgument("ringfsd: node id " + std::to_string(o.self) +
                           " is not in the node list");
  if (o.state_dir.empty()) return InvalidArgument("ringfsd: state folder is not set");
  ASSIGN_OR_RETURN(secret_, net::ClusterSecret::LoadWithTls(o.secret_file, o.tls));
  uint32_t smallest = o.nodes[0].id;
  std::vector<chain::NodeId> ids;
  for (const auto& n : o.nodes) {
    ids.push_back(n.id);
    smallest = std::min(smallest, n.id);
  }
  if (!o.follow_views) meta_node_ = smallest;
  ASSIGN_OR_RETURN(layout_, chain::BuildChains(ids, o.replication, o.chains));
  if (mkdir(o.state_dir.c_str(), 0755) != 0 && errno != EEXIST)
    return ErrnoStatus(errno, "create state folder " + o.state_dir);
  o.engine.dir = o.state_dir + "/engine";
  if (o.file_chunk_size == 0) o.file_chunk_size = o.engine.chunk_size;
  ASSIGN_OR_RETURN(engine_, ChunkEngine::Open(o.engine));
  std::vector<chain::ChainId> home;
  for (const auto& c : layout_)
    for (const auto& m : c.members)
      if (m.node == o.self) home.push_back(c.chain);
  ASSIGN_OR_RETURN(chain_, ChainNode::Open(o.self, layout_.size(), home, engine_.get(), this));
  const std::string manager_path = o.state_dir + "/manager.state";
  if (is_meta()) {
    manager_ = std::make_unique<chain::ChainManager>(layout_);
    if (auto saved = ReadWholeFile(manager_path); saved.ok()) {
      RETURN_IF_ERROR(manager_->Restore(*saved).WithContext(manager_path));
      // Continue above every version handed out before the restart.
    }
    std::lock_guard lock(manager_mu_);
    SaveManager();
  } else if (auto saved = ReadWholeFile(manager_path); saved.ok()) {
    // What this node knew when it stopped: a candidate should it take the role over.
    chain::ChainManager check(layout_);
    if (check.Restore(*saved).ok()) RememberState(std::move(*saved), false);
  }
  net::RpcServerOptions ro;
  ro.bind_address = o.listen_host;
  ro.port = Endpoint(o.self)->port;
  ro.max_payload = wire::kMaxPayload;
  ro.name = "ringfsd node " + std::to_string(o.self);
  ro.payload_read_batch = kPayloadReadBatch;
  ro.spare_payload_bytes = kSparePayloadBytes;
  ro.secret = secret_;
  rpc_ = net::RpcServer::Create(io_.get_executor(), ro);
  RegisterHandlers();
  ASSIGN_OR_RETURN(uint16_t port, rpc_->Start());
  for (auto& n : o.nodes)
    if (n.id == o.self) n.port = port;
  if (o.shared_memory) StartSharedMemory(port);
  if (o.shared_memory && o.read_path == ServerOptions::ReadPath::kIoThread) {
    auto ring = ReadRing::Create(io_, static_cast<unsigned>(std::max(64, 2 * o.client_threads)));
    if (ring.ok()) {
      read_ring_ = std::move(*ring);
    } else {
      LOG_WARN("ringfsd node {}: no read ring ({}); shared-memory reads run on the pool", o.self,
               ring.status().ToString());
    }
  }
  io_thread_ = std::thread([this] {
    auto guard = asio::make_work_guard(io_);
    io_.run();
  });
  if (manager_) {
    std::vector<chain::ChainConfig> configs;
    {
      std::lock_guard lock(manager_mu_);
      for (size_t c = 0; c < manager_->chain_count(); ++c) configs.push_back(manager_->config(c));
      up_[o.self] = true;
    }
    for (const auto& c : configs) chain_->OnConfig(c);
    asio::co_spawn(io_, HeartbeatLoop(role_gen_), asio::detached);
    asio::co_spawn(io_, CollectLoop(role_gen_), asio::detached);
  }
  asio::co_spawn(io_, TickLoop(), asio::detached);
  LOG_INFO(
      "effective config: node.id={} node.state={} node.listen={} auth.secret_file={} "
      "tls.cert_file={} cluster.replication={} "
      "cluster.chains={} "
      "cluster.file_chunk_size={} engine.chunk_size={} engine.small_chunk_size={} "
      "engine.slots_per_file={} "
      "engine.capacity_bytes={} engine.queue_depth={} engine.io_buffers={} timing.tick_ms={} "
      "timing.heartbeat_ms={} timing.down_after={} timing.collect_ms={}",
      o.self, o.state_dir, o.listen_host, o.secret_file.empty() ? "(none)" : o.secret_file,
      o.tls.cert_file.empty() ? "(none)" : o.tls.cert_file, o.replication, o.chains,
      o.file_chunk_size, o.engine.chunk_size, o.engine.small_chunk_size, o.engine.slots_per_file,
      o.engine.capacity_bytes, o.engine.queue_depth, o.engine.io_buffers, o.tick_ms, o.heartbeat_ms,
      o.down_after, o.collect_ms);
  LOG_INFO("ringfsd node {} serving on {}:{} ({} nodes, replication {}, {} chains, state {}){}",
           o.self, o.listen_host, port, o.nodes.size(), o.replication, o.chains, o.state_dir,
           o.follow_views ? ", metadata node: the eldest store node of each membership view"
           : is_meta()    ? ", metadata node"
                          : "");
  if (!secret_)
    LOG_WARN(
        "ringfsd node {}: NO CLUSTER SECRET ([auth] secret_file, --secret-file): clients and "
        "peers are not authenticated, so only loopback addresses are served",
        o.self);
  return Status();
}

void ServerImpl::StartSharedMemory(uint16_t port) {
  using local = asio::local::stream_protocol;
  auto acceptor = std::make_unique<local::acceptor>(io_);
  boost::system::error_code ec;
  acceptor->open(local(), ec);
  if (!ec) acceptor->bind(local::endpoint(shm::SocketName(port)), ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    LOG_WARN("ringfsd node {}: no shared-memory socket ({}); local clients use TCP", options_.self,
             ec.message());
    return;
  }
  shm_acceptor_ = std::move(acceptor);
  asio::co_spawn(io_, ShmAcceptLoop(), asio::detached);
}

awaitable<void> ServerImpl::ShmAcceptLoop() {
  while (!stopping_) {
    auto [ec, socket] = co_await shm_acceptor_->async_accept(asio::as_tuple(use_awaitable));
    if (ec) {
      if (ec == asio::error::operation_aborted || stopping_) break;
      continue;
    }
    asio::co_spawn(io_, ShmSession(std::move(socket)), asio::detached);
  }
}

awaitable<void> ServerImpl::ShmSession(asio::local::stream_protocol::socket socket) {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(io_);
  timer.expires_after(std::chrono::seconds(5));
  auto ready =
      co_await (socket.async_wait(asio::socket_base::wait_read, asio::as_tuple(use_awaitable)) ||
                timer.async_wait(asio::as_tuple(use_awaitable)));
  if (ready.index() == 1) co_return;  // no registration in time
  std::string peer;
  auto region = shm::ReceiveRegion(socket.native_handle(), &peer);
  uint32_t id = 0;
  if (region.ok()) {
    std::lock_guard lock(shm_mu_);
    id = next_shm_++;
    shm_[id] = std::make_shared<SharedClient>(SharedClient{std::move(*region), peer});
  }
  shm::SendReply(socket.native_handle(), region.status(), id);
  if (!region.ok()) {
    LOG_WARN("ringfsd node {}: shared region refused: {}", options_.self,
             region.status().ToString());
    co_return;
  }
  // The region lives while the client keeps the socket open: this wait lasts the client's
  // lifetime and ends when it closes the socket (or when the server stops).
  std::array<char, 64> sink;
  while (true) {
    auto [ec, n] =
        co_await socket.async_read_some(asio::buffer(sink), asio::as_tuple(use_awaitable));
    if (ec) break;
  }
  std::lock_guard lock(shm_mu_);
  shm_.erase(id);
}

Status ServerImpl::Shutdown(Deadline deadline) {
  if (shut_down_) return Status();
  shut_down_ = true;
  stopping_ = true;
  EndTakeover();  // file operations waiting for a takeover give up (the role stays with none)
  Status s;
  if (rpc_) s = rpc_->Shutdown(deadline);
  io_.stop();
  if (io_thread_.joinable()) io_thread_.join();
  read_ring_.reset();     // waits for reads the kernel still writes into shared regions
  shm_acceptor_.reset();  // frees the socket name for a server started after this one
  client_pool_.join();
  peer_pool_.join();
  fs_.reset();
  store_.reset();
  chain_.reset();
  engine_.reset();
  return s;
}

ServerStats ServerImpl::Stats() {
  ServerStats stats;
  if (chain_) stats.value_bytes_in_memory = chain_->ValueBytesInMemory();
  {
    std::lock_guard lock(staged_mu_);
    stats.staged_values = staged_.size();
  }
  stats.staged_forwards_resent = staged_forwards_resent_.load(std::memory_order_relaxed);
  stats.reads_on_io_thread = reads_on_io_thread_.load(std::memory_order_relaxed);
  stats.reads_direct = reads_direct_.load(std::memory_order_relaxed);
  if (engine_) {
    const EngineUsage usage = engine_->Usage();
    stats.chunks = usage.chunks;
    stats.data_bytes = usage.data_bytes;
    stats.file_bytes = usage.file_bytes;
    const EngineCounters counters = engine_->Counters();
    stats.read_bytes = counters.read_bytes;
    stats.written_bytes = counters.written_bytes;
    stats.read_errors = counters.read_errors;
    stats.write_errors = counters.write_errors;
    stats.sync_errors = counters.sync_errors;
  }
  stats.meta_node = meta_node_.load();
  stats.takeovers = takeovers_.load();
  std::lock_guard lock(manager_mu_);
  stats.metadata_node = manager_ != nullptr;
  if (manager_) {
    stats.chains = manager_->chain_count();
    for (size_t c = 0; c < manager_->chain_count(); ++c) {
      int serving = 0;
      for (const chain::Member& m : manager_->config(c).members)
        serving += m.state == chain::MemberState::kServing;
      if (serving == 0) ++stats.chains_stopped;
      if (serving < static_cast<int>(manager_->home(c).size())) ++stats.chains_degraded;
    }
  }
  return stats;
}

awaitable<Result<std::shared_ptr<net::RpcClient>>> ServerImpl::Peer(uint32_t id, Deadline deadline,
                                                                    Lane lane) {
  const std::pair<uint32_t, Lane> key{id, lane};
  auto it = peers_.find(key);
  if (it != peers_.end() && it->second->connected()) co_return it->second;
  const NodeEndpoint* e = Endpoint(id);
  if (!e) co_return InvalidArgument("unknown node " + std::to_string(id));
  const std::string name =
      "ringfsd node " + std::to_string(id) + " at " + e->host + ":" + std::to_string(e->port);
  // One connect per peer and lane at a time; the other callers wait for it. (Each connecting on
  // its own, the calls queued for a peer that came back opened hundreds of connections at once,
  // and the peer refused those past max_connections_per_peer.)
  if (auto pending = connecting_.find(key); pending != connecting_.end()) {
    using namespace asio::experimental::awaitable_operators;
    const std::shared_ptr<PendingConnect> connect = pending->second;
    asio::steady_timer limit(io_, deadline.when());
    co_await (connect->done.async_wait(asio::as_tuple(use_awaitable)) ||
              limit.async_wait(asio::as_tuple(use_awaitable)));
    if (!connect->ended)
      co_return DeadlineExceeded("connecting to " + name + ": another call's connect was still " +
                                 "under way at the deadline");
    co_return connect->result;
  }
  auto connect = std::make_shared<PendingConnect>(io_.get_executor());
  connecting_[key] = connect;
  net::RpcClientOptions co;
  co.max_payload = wire::kMaxPayload;
  co.peer_name = name;
  co.connect.max_backoff = std::chrono::milliseconds(100);
  co.secret = secret_;
  connect->result = co_await net::RpcClient::Connect(e->host, e->port, deadline, co);
  if (connect->result.ok()) peers_[key] = *connect->result;
  connect->ended = true;
  connect->done.cancel();
  connecting_.erase(key);
  co_return connect->result;
}

void ServerImpl::DropPeer(uint32_t id, Lane lane, const std::shared_ptr<net::RpcClient>& client) {
  auto it = peers_.find({id, lane});
  if (it != peers_.end() && it->second == client) peers_.erase(it);
  client->Close();
}

void ServerImpl::DropLinksTo(uint32_t id) {
  asio::post(io_, [this, id] {
    for (const Lane lane : {Lane::kData, Lane::kControl, Lane::kPing}) {
      auto it = peers_.find({id, lane});
      if (it == peers_.end()) continue;
      const std::shared_ptr<net::RpcClient> client = std::move(it->second);
      peers_.erase(it);
      client->Close();
    }
  });
}

Result<Frame> ServerImpl::CallBlocking(uint32_t id, uint16_t type, std::vector<std::byte> payload,
                                       Deadline deadline, std::span<const std::byte> bulk,
                                       Lane lane) {
  return net::BlockOn<Result<Frame>>(
      io_.get_executor(),
      [](ServerImpl* self, uint32_t id, uint16_t type, std::vector<std::byte> payload,
         Deadline deadline, std::span<const std::byte> bulk,
         Lane lane) -> awaitable<Result<Frame>> {
        // A dead node refuses connections: give up on it quickly, the caller retries elsewhere.
        auto client = co_await self->Peer(id, deadline.Min(Deadline::AfterMs(1000)), lane);
        if (!client.ok()) co_return client.status();
        const std::span<const std::byte> pieces[] = {payload, bulk};
        co_return co_await (*client)->Call(
            type, net::Pieces(pieces), bulk.empty() ? 0 : net::kFrameUncheckedPayload, deadline);
      }(this, id, type, std::move(payload), deadline, bulk, lane));
}

ServerImpl::Answers ServerImpl::CallEachUnlessStopping(
    const std::vector<uint32_t>& ids, uint16_t type, const std::vector<std::byte>& payload,
    Deadline deadline, const std::function<bool(const Answers&)>& settled) {
  // Shared with the calls, which may finish after this returns.
  struct Gathered {
    std::mutex mu;
    std::condition_variable arrived;
    Answers answers;  // GUARDED_BY(mu)
  };
  auto gathered = std::make_shared<Gathered>();
  for (const uint32_t id : ids)
    asio::co_spawn(
        io_,
        [](ServerImpl* self, uint32_t id, uint16_t type, std::vector<std::byte> payload,
           Deadline deadline, std::shared_ptr<Gathered> gathered) -> awaitable<void> {
          auto client =
              co_await self->Peer(id, deadline.Min(Deadline::AfterMs(1000)), Lane::kControl);
          const auto record = [&](Result<Frame> answer) {
            std::lock_guard lock(gathered->mu);
            gathered->answers.emplace(id, std::move(answer));
            gathered->arrived.notify_all();
          };
          // (Not one co_await inside ?: — GCC 12 destroys such a temporary twice.)
          if (!client.ok()) {
            record(client.status());
            co_return;
          }
          Result<Frame> answer = co_await (*client)->Call(type, payload, deadline);
          record(std::move(answer));
        }(this, id, type, payload, deadline, gathered),
        asio::detached);
  std::unique_lock lock(gathered->mu);
  while (gathered->answers.size() < ids.size() && !stopping_ && !settled(gathered->answers))
    gathered->arrived.wait_for(lock, std::chrono::milliseconds(50));
  return gathered->answers;
}

void ServerImpl::Send(const chain::Message& message) {
  if (stopping_) return;
  // A forward to the node that sent this head the write names the bytes that node staged
  // instead of carrying them; should it no longer hold them, the full message follows.
  const bool staged = message.kind == chain::Message::Kind::kForward && message.value.data &&
                      message.value.staged_at == message.to;
  auto msg = std::make_shared<const chain::Message>(message);
  asio::co_spawn(
      io_,
      [this, msg, staged]() -> awaitable<void> {
        const Deadline deadline = Deadline::AfterMs(10000);
        const uint32_t to = msg->to;
        if (staged) {
          auto client = co_await Peer(to, Deadline::AfterMs(500), Lane::kControl);
          if (!client.ok()) co_return;  // lost; the protocol retransmits
          auto reply = co_await (*client)->Call(wire::kChainMessage,
                                                chain::EncodeStagedMessage(*msg), deadline);
          if (reply.ok() || reply.status().code() != StatusCode::kNotFound) {
            if (!reply.ok())
              LOG_DEBUG("replica message to node {}: {}", to, reply.status().ToString());
            co_return;
          }
          staged_forwards_resent_.fetch_add(1, std::memory_order_relaxed);
        }
        // The value is not copied into the payload: it is gathered from the message's own buffer
        // (kept alive by `msg`) in a bulk frame, covered by the CRC32C in the message head. Small
        // messages (acknowledgements, sync ends, small values) go on the control connection so
        // they never wait behind chunk data.
        const std::vector<std::byte> head = chain::EncodeMessageHead(*msg);
        const std::shared_ptr<const std::string>& value = msg->value.data;
        auto client = co_await Peer(to, Deadline::AfterMs(500), LaneFor(value ? value->size() : 0));
        if (!client.ok()) co_return;
        std::span<const std::byte> data;
        if (value) data = std::as_bytes(std::span(value->data(), value->size()));
        const std::span<const std::byte> pieces[] = {head, data};
        auto reply = co_await (*client)->Call(wire::kChainMessage, net::Pieces(pieces),
                                              value ? net::kFrameUncheckedPayload : 0, deadline);
        if (!reply.ok()) LOG_DEBUG("replica message to node {}: {}", to, reply.status().ToString());
      },
      asio::detached);
}

Status ServerImpl::ResolveStaged(chain::Message& message, const chain::StagedValueRef& ref) {
  std::lock_guard lock(staged_mu_);
  auto it = staged_.find(ref.id);
  // Tests drop the copy here, as if its write had ended before the forward arrived.
  if (Status s = RT_FAULT_POINT("iofs.server.drop_staged"); !s.ok() && it != staged_.end()) {
    staged_.erase(it);
    it = staged_.end();
  }
  if (it != staged_.end() && it->second.key == message.key && it->second.crc == ref.crc &&
      it->second.data->size() == ref.size) {
    message.value.data = it->second.data;  // the very bytes this node sent: no copy, no transit
    message.value.crc = ref.crc;
    return Status();
  }
  return NotFound("value of chunk " + std::to_string(message.key) + " v" +
                  std::to_string(message.version) + " is not staged at node " +
                  std::to_string(options_.self));
}

void ServerImpl::ReportSyncComplete(chain::NodeId node, chain::ChainId chain, uint64_t version) {
  if (has_manager()) {
    asio::post(peer_pool_, [this, node, chain, version] {
      std::vector<chain::ChainConfig> changed;
      {
        std::lock_guard lock(manager_mu_);
        if (!manager_) return;  // the role went meanwhile: the member reports again
        changed = manager_->OnSyncComplete(node, chain, version);
        if (!changed.empty()) SaveManager();
      }
      Broadcast(changed);
    });
    return;
  }
  ByteWriter w;
  w.Put<uint32_t>(node);
  w.Put<uint32_t>(chain);
  w.Put<uint64_t>(version);
  auto payload = std::make_shared<std::vector<std::byte>>(w.Take());
  asio::co_spawn(
      io_,
      [this, payload]() -> awaitable<void> {
        auto client = co_await Peer(meta_node_.load(), Deadline::AfterMs(1000), Lane::kControl);
        if (!client.ok()) co_return;  // the syncing member reports again after its next round
        (void)co_await (*client)->Call(wire::kSyncComplete, *payload, Deadline::AfterMs(5000));
      },
      asio::detached);
}

void ServerImpl::Broadcast(const std::vector<chain::ChainConfig>& configs) {
  for (const auto& c : configs) {
    LOG_INFO("chain {} version {}: {} members", c.chain, c.version, c.members.size());
    auto payload = std::make_shared<std::vector<std::byte>>(chain::EncodeConfig(c));
    for (const auto& m : layout_[c.chain].members) {
      if (m.node == options_.self) {
        asio::post(peer_pool_, [this, c] { chain_->OnConfig(c); });
        continue;
      }
      const uint32_t to = m.node;
      asio::co_spawn(
          io_,
          [this, to, payload]() -> awaitable<void> {
            auto client = co_await Peer(to, Deadline::AfterMs(300), Lane::kControl);
            if (!client.ok()) co_return;  // re-broadcast every second
            (void)co_await (*client)->Call(wire::kChainConfig, *payload, Deadline::AfterMs(3000));
          },
          asio::detached);
    }
  }
}

void ServerImpl::SaveManager() {
  std::vector<std::byte> state = manager_->Save();
  {
    std::lock_guard file(state_file_mu_);
    Status s = WriteFileAtomically(options_.state_dir + "/manager.state", state);
    if (!s.ok()) LOG_ERROR("saving the chain manager state failed: {}", s.ToString());
  }
  RememberState(std::move(state), false);
}

void ServerImpl::RememberState(std::vector<std::byte> state, bool persist) {
  const uint64_t sum = chain::ChainManager::SavedVersionSum(state);
  {
    std::lock_guard lock(known_mu_);
    if (sum <= known_sum_) return;
    known_sum_ = sum;
    known_state_ = state;
  }
  if (!persist) return;
  std::lock_guard file(state_file_mu_);
  {
    std::lock_guard lock(known_mu_);
    if (known_sum_ != sum) return;  // a newer one came meanwhile: its own call writes it
  }
  Status s = WriteFileAtomically(options_.state_dir + "/manager.state", state);
  if (!s.ok()) LOG_WARN("keeping the chain manager state failed: {}", s.ToString());
}

void ServerImpl::OnPing(uint32_t id, PingResult result) {
  const bool ok = result == PingResult::kAnswered;
  std::vector<chain::ChainConfig> changed;
  {
    std::lock_guard lock(manager_mu_);
    if (!manager_) return;  // the role went while the ping ran
    if (options_.follow_views) {
      const MonoTime now = MonoClock::now();
      if (ok) answered_[id] = now;
      const size_t heard = NodesHeard();
      const bool majority = 2 * heard > options_.nodes.size();
      if (!isolated_ && !majority) {
        Isolate(heard);
      } else if (isolated_ && majority && !retake_queued_) {
        retake_queued_ = true;
        asio::post(role_strand_, [this] { Retake(); });
      }
      if (isolated_) return;
    }
    auto known = up_.find(id);
    const bool outside = members_.has_value() && !members_->contains(id);
    if (ok) {
      missed_[id] = 0;
      if ((known == up_.end() || !known->second) && !outside) {
        up_[id] = true;
        LOG_INFO("node {} is up", id);
        changed = manager_->OnNodeUp(id);
      }
    } else if (result == PingResult::kFailed && ++missed_[id] >= options_.down_after &&
               (known == up_.end() || known->second)) {
      up_[id] = false;
      LOG_WARN("node {} is down ({} missed heartbeats)", id, missed_[id]);
      DropLinksTo(id);
      changed = manager_->OnNodeDown(id);
    }
    if (!changed.empty()) SaveManager();
  }
  Broadcast(changed);
}

void ServerImpl::SetMembers(const std::vector<uint32_t>& eldest_first, uint64_t epoch) {
  const std::set<uint32_t> members(eldest_first.begin(), eldest_first.end());
  {
    std::lock_guard lock(view_mu_);
    if (have_view_ && epoch < view_epoch_) return;  // an older view
    // Views this node did not see (it was cut off or down meanwhile) may have given the role to
    // another node and back: if it is the metadata node again it takes the role over anew.
    const bool missed_views = have_view_ && epoch > view_epoch_ + 1;
    have_view_ = true;
    view_epoch_ = epoch;
    view_members_ = members;
    if (options_.follow_views) {
      uint32_t eldest = 0;  // the first store node of the view
      for (uint32_t id : eldest_first) {
        if (Endpoint(id)) {
          eldest = id;
          break;
        }
      }
      const bool again = missed_views && eldest == options_.self;
      if (eldest != 0 && (eldest != meta_node_.load() || again)) {
        meta_epoch_ = epoch;
        if (eldest == options_.self) {
          std::lock_guard taking(takeover_mu_);
          taking_over_ = true;
        }
        meta_node_ = eldest;
        LOG_INFO("ringfsd node {}: view {} makes node {} the metadata node", options_.self, epoch,
                 eldest);
        asio::post(role_strand_, [this] { ChangeRole(); });
      }
    }
  }
  FollowMembers(members);
}

void ServerImpl::FollowMembers(const std::set<uint32_t>& members) {
  std::vector<chain::ChainConfig> changed;
  {
    std::lock_guard lock(manager_mu_);
    if (!manager_ || isolated_) return;
    members_ = members;
    std::set<chain::ChainId> touched;
    for (const NodeEndpoint& n : options_.nodes) {
      if (n.id == options_.self || members.contains(n.id)) continue;
      auto known = up_.find(n.id);
      if (known != up_.end() && !known->second) continue;
      up_[n.id] = false;
      LOG_WARN("node {} is down (not in the membership view)", n.id);
      DropLinksTo(n.id);
      for (const chain::ChainConfig& c : manager_->OnNodeDown(n.id)) touched.insert(c.chain);
    }
    for (chain::ChainId c : touched) changed.push_back(manager_->config(c));
    if (!changed.empty()) SaveManager();
  }
  Broadcast(changed);
}

awaitable<void> ServerImpl::HeartbeatLoop(uint64_t role) {
  asio::steady_timer timer(io_);
  for (uint64_t round = 0; !stopping_ && role_gen_.load() == role; ++round) {
    // Every ping carries the manager's state, so whichever node takes the role over next knows
    // the newest one (even if this node is gone by then).
    std::shared_ptr<const std::vector<std::byte>> ping;
    {
      std::lock_guard lock(manager_mu_);
      if (!manager_) break;
      ping = std::make_shared<const std::vector<std::byte>>(
          wire::EncodePing(wire::Ping{options_.self, manager_->Save()}));
    }
    for (const auto& n : options_.nodes) {
      if (n.id == options_.self || ping_in_flight_[n.id]) continue;
      ping_in_flight_[n.id] = true;
      const uint32_t id = n.id;
      asio::co_spawn(
          io_,
          [this, id, ping]() -> awaitable<void> {
            const Deadline deadline = Deadline::AfterMs(options_.heartbeat_ms * 2);
            PingResult result = PingResult::kFailed;
            auto client = co_await Peer(id, deadline, Lane::kPing);
            if (client.ok()) {
              const auto answer = co_await (*client)->Call(wire::kPing, *ping, deadline);
              if (answer.ok())
                result = PingResult::kAnswered;
              else if (answer.status().code() == StatusCode::kFailedPrecondition)
                result = PingResult::kRefused;
              else
                DropPeer(id, Lane::kPing, *client);
            }
            ping_in_flight_[id] = false;
            asio::post(peer_pool_, [this, id, result] { OnPing(id, result); });
          },
          asio::detached);
    }
    if (round % 5 == 4) {
      // Re-broadcast every chain version: repairs lost config messages and restarted nodes.
      std::vector<chain::ChainConfig> all;
      {
        std::lock_guard lock(manager_mu_);
        if (!manager_) break;
        for (size_t c = 0; c < manager_->chain_count(); ++c) all.push_back(manager_->config(c));
      }
      asio::post(peer_pool_, [this, all] {
        for (const auto& c : all)
          for (const auto& m : layout_[c.chain].members)
            if (m.node == options_.self) chain_->OnConfig(c);
      });
      for (const auto& c : all) {
        auto payload = std::make_shared<std::vector<std::byte>>(chain::EncodeConfig(c));
        for (const auto& m : layout_[c.chain].members) {
          if (m.node == options_.self) continue;
          const uint32_t to = m.node;
          asio::co_spawn(
              io_,
              [this, to, payload]() -> awaitable<void> {
                auto client = co_await Peer(to, Deadline::AfterMs(300), Lane::kControl);
                if (client.ok())
                  (void)co_await (*client)->Call(wire::kChainConfig, *payload,
                                                 Deadline::AfterMs(3000));
              },
              asio::detached);
        }
      }
    }
    timer.expires_after(std::chrono::milliseconds(options_.heartbeat_ms));
    auto [ec] = co_await timer.async_wait(asio::as_tuple(use_awaitable));
    (void)ec;
  }
}

awaitable<void> ServerImpl::TickLoop() {
  asio::steady_timer timer(io_);
  // Shared with the tick that may still run on the pool when the loop ends.
  auto busy = std::make_shared<std::atomic<bool>>(false);
  while (!stopping_) {
    if (!busy->exchange(true))
      asio::post(peer_pool_, [this, busy] {
        chain_->Tick();
        busy->store(false);
      });
    timer.expires_after(std::chrono::milliseconds(options_.tick_ms));
    auto [ec] = co_await timer.async_wait(asio::as_tuple(use_awaitable));
    (void)ec;
  }
}

awaitable<void> ServerImpl::CollectLoop(uint64_t role) {
  asio::steady_timer timer(io_);
  auto busy = std::make_shared<std::atomic<bool>>(false);
  // The first round once the other nodes had a heartbeat to learn the chains, then periodically.
  timer.expires_after(
      std::chrono::milliseconds(std::min(options_.collect_ms, 2 * options_.heartbeat_ms)));
  while (!stopping_) {
    auto [ec] = co_await timer.async_wait(asio::as_tuple(use_awaitable));
    (void)ec;
    if (stopping_ || role_gen_.load() != role) break;
    if (!busy->exchange(true))
      asio::post(client_pool_, [this, busy] {
        CollectOnce();
        busy->store(false);
      });
    timer.expires_after(std::chrono::milliseconds(options_.collect_ms));
  }
}

void ServerImpl::CollectOnce() {
  Result<uint64_t> reclaimed = ServeFs([&]() -> Result<uint64_t> {
    ASSIGN_OR_RETURN(FileSystem * fs, Fs());
    return fs->CollectOrphans();
  });
  if (!reclaimed.ok()) {
    LOG_WARN("orphan collector: {} (next round in {} ms)", reclaimed.status().ToString(),
             options_.collect_ms);
  } else if (*reclaimed > 0) {
    LOG_INFO("orphan collector: reclaimed {} chunks of writes that can no longer complete",
             *reclaimed);
  }
}

Result<uint64_t> ServerImpl::WriteAt(chain::NodeId node, chain::ChunkKey key,
                                     std::optional<std::span<const std::byte>> data,
                                     uint64_t chain_version, Deadline deadline) {
  RETURN_IF_ERROR(ActsForNamespace());
  if (node == options_.self) {
    ChainWriteOrigin origin;
    origin.chain_version = chain_version;
    return chain_->Write(key, data, deadline, origin);
  }
  // [key, flags, CRC32C of the data, this node, staged copy id] then the data, in a bulk frame.
  // The data is copied and checksummed in one pass and staged here while the write runs: if this
  // node is the head's successor, the head's forward names the staged copy instead of sending
  // the bytes back.
  ByteWriter w;
  w.Put<uint64_t>(key);
  w.Put<uint64_t>(chain_version);
  uint64_t staged = 0;
  std::shared_ptr<std::string> value;
  if (data) {
    value = chain::NewValueBuffer(data->size());
    const uint32_t crc =
        CopyFastCrc32c(reinterpret_cast<std::byte*>(value->data()), data->data(), data->size());
    {
      std::lock_guard lock(staged_mu_);
      staged = next_staged_++;
      staged_.emplace(staged, StagedValue{key, value, crc});
    }
    w.Put<uint8_t>(wire::kChunkWriteStaged);
    w.Put<uint32_t>(crc);
    w.Put<uint32_t>(options_.self);
    w.Put<uint64_t>(staged);
  } else {
    w.Put<uint8_t>(wire::kChunkWriteDelete);
    w.Put<uint32_t>(0);
  }
  std::span<const std::byte> bulk;
  if (value) bulk = std::as_bytes(std::span(value->data(), value->size()));
  Result<Frame> reply =
      CallBlocking(node, wire::kChunkWrite, w.Take(), deadline, bulk, LaneFor(bulk.size()));
  if (staged) {
    std::lock_guard lock(staged_mu_);
    staged_.erase(staged);
  }
  if (!reply.ok()) return reply.status();
  ByteReader r(reply->payload, "chunk write reply");
  return r.Get<uint64_t>();
}

Status ServerImpl::ActsForNamespace() {
  // Only the namespace reads and writes objects over the network (FileSystem over the chain
  // store): a frozen or departed manager stops at once instead of retrying to its deadline, so
  // the role can change hands (Resign waits for the running file operations).
  if (!options_.follow_views) return Status();
  std::lock_guard lock(manager_mu_);
  if (!manager_ || isolated_ || resigning_)
    return FailedPrecondition("ringfsd node " + std::to_string(options_.self) +
                              " no longer acts for the file namespace (its metadata role is "
                              "frozen or handed over)");
  return Status();
}

Status ServerImpl::ReadAt(chain::NodeId node, chain::ChunkKey key, uint64_t offset, uint64_t length,
                          std::vector<std::byte>* out, Deadline deadline) {
  // Also for this node's own replica: one that is not serving answers NotServing, which the
  // object store retries for its whole deadline (30 s) while the remote replicas refuse, and
  // that read held Resign (a store campaign's workers waited 33 s after a partition's heal).
  RETURN_IF_ERROR(ActsForNamespace());
  if (node == options_.self) return chain_->Read(key, offset, length, out, nullptr);
  ByteWriter w;
  w.Put<uint64_t>(key);
  w.Put<uint64_t>(offset);
  w.Put<uint64_t>(std::min(length, wire::kMaxReadPerRequest));
  ASSIGN_OR_RETURN(Frame reply, CallBlocking(node, wire::kChunkRead, w.Take(), deadline));
  *out = std::move(reply.payload);
  return Status();
}

Result<std::vector<chain::ChunkKey>> ServerImpl::KeysAt(chain::NodeId node, Deadline deadline) {
  if (node == options_.self) return chain_->Keys();
  ASSIGN_OR_RETURN(Frame reply, CallBlocking(node, wire::kChunkKeys, {}, deadline));
  ByteReader r(reply.payload, "chunk keys reply");
  ASSIGN_OR_RETURN(uint64_t n, r.Get<uint64_t>());
  if (n > r.remaining() / 8) return Corruption("chunk keys reply: bad count");
  std::vector<chain::ChunkKey> keys(n);
  for (auto& k : keys) {
    ASSIGN_OR_RETURN(k, r.Get<uint64_t>());
  }
  return keys;
}

Result<std::vector<std::string>> ServerImpl::CheckAt(chain::NodeId node, Deadline deadline) {
  if (node == options_.self) return engine_->Check();
  ASSIGN_OR_RETURN(Frame reply, CallBlocking(node, wire::kEngineCheck, {}, deadline));
  ByteReader r(reply.payload, "engine check reply");
  ASSIGN_OR_RETURN(uint32_t n, r.Get<uint32_t>());
  std::vector<std::string> problems;
  for (uint32_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(std::string p, r.GetString(4096));
    problems.push_back(std::move(p));
  }
  return problems;
}

Result<FileSystem*> ServerImpl::Fs() {
  std::lock_guard lock(fs_mu_);
  if (!fs_) {
    if (!store_) {
      ChainStoreOptions so;
      so.max_object_size = options_.engine.chunk_size;
      store_ = NewChainObjectStore(this, so);
    }
    ASSIGN_OR_RETURN(fs_, FileSystem::Open(store_.get(), options_.file_chunk_size));
  }
  return fs_.get();
}

void ServerImpl::RegisterHandlers() {
  using net::RpcRequest;
  rpc_->Handle(wire::kPing, [this](RpcRequest req) -> awaitable<Payload> {
    CO_ASSIGN_OR_RETURN(wire::Ping ping, wire::DecodePing(req.payload));
    CO_RETURN_IF_ERROR(AnswerPing(ping.sender));
    // A manager's ping carries its state: kept (on the pool: it may write a file) when newer.
    if (!ping.manager_state.empty()) {
      const uint64_t sum = chain::ChainManager::SavedVersionSum(ping.manager_state);
      bool newer = false;
      {
        std::lock_guard lock(known_mu_);
        newer = sum > known_sum_;
      }
      if (newer)
        asio::post(peer_pool_,
                   [this, state = std::move(ping.manager_state)] { RememberState(state, true); });
    }
    co_return Empty();
  });
  rpc_->Handle(wire::kMetaHandover, [this](RpcRequest req) -> awaitable<Payload> {
    co_return co_await OnPool(peer_pool_, [&]() -> Payload { return HandOver(req.payload); });
  });
  rpc_->Handle(wire::kInfo, [this](RpcRequest) -> awaitable<Payload> {
    wire::ClusterInfo info;
    info.self = options_.self;
    info.meta_node = meta_node_.load();
    info.replication = static_cast<uint32_t>(options_.replication);
    info.chains = static_cast<uint32_t>(options_.chains);
    info.chunk_size = options_.file_chunk_size;
    for (const auto& n : options_.nodes) info.nodes.push_back({n.id, n.host, n.port});
    co_return wire::EncodeInfo(info);
  });
  rpc_->Handle(wire::kChainMessage, [this](RpcRequest req) -> awaitable<Payload> {
    // Decoded on the pool: checking and copying a value of megabytes would hold up the I/O thread.
    co_return co_await OnPool(peer_pool_, [&]() -> Payload {
      std::optional<chain::StagedValueRef> staged;
      auto message = chain::DecodeMessage(req.payload, &staged);
      if (!message.ok()) return message.status();
      if (staged) RETURN_IF_ERROR(ResolveStaged(*message, *staged));
      chain_->OnMessage(*message);
      return Empty();
    });
  });
  rpc_->Handle(wire::kChainConfig, [this](RpcRequest req) -> awaitable<Payload> {
    auto config = chain::DecodeConfig(req.payload);
    if (!config.ok()) co_return config.status();
    co_return co_await OnPool(peer_pool_, [&]() -> Payload {
      chain_->OnConfig(*config);
      return Empty();
    });
  });
  rpc_->Handle(wire::kSyncComplete, [this](RpcRequest req) -> awaitable<Payload> {
    if (!has_manager())
      co_return Status(StatusCode::kNotServing,
                       "node " + std::to_string(options_.self) + " is not the chain manager");
    ByteReader r(req.payload, "sync report");
    auto node = r.Get<uint32_t>();
    auto chain = r.Get<uint32_t>();
    auto version = r.Get<uint64_t>();
    if (!node.ok() || !chain.ok() || !version.ok()) co_return Corruption("sync report: truncated");
    ReportSyncComplete(*node, *chain, *version);
    co_return Empty();
  });
  rpc_->Handle(wire::kChunkWrite, [this](RpcRequest req) -> awaitable<Payload> {
    co_return co_await OnPool(client_pool_, [&]() -> Payload {
      ByteReader r(req.payload, "chunk write");
      ASSIGN_OR_RETURN(uint64_t key, r.Get<uint64_t>());
      ASSIGN_OR_RETURN(uint64_t chain_version, r.Get<uint64_t>());
      ASSIGN_OR_RETURN(uint8_t flags, r.Get<uint8_t>());
      ASSIGN_OR_RETURN(uint32_t crc, r.Get<uint32_t>());
      if (flags & ~(wire::kChunkWriteDelete | wire::kChunkWriteStaged))
        return Corruption("chunk write of key " + std::to_string(key) + ": unknown flags");
      ChainWriteOrigin origin;
      origin.chain_version = chain_version;
      if (flags & wire::kChunkWriteStaged) {
        ASSIGN_OR_RETURN(origin.staged_at, r.Get<uint32_t>());
        ASSIGN_OR_RETURN(origin.staged_id, r.Get<uint64_t>());
      }
      ASSIGN_OR_RETURN(auto data, r.GetBytes(r.remaining()));
      // The frame carries no payload CRC: the chain node checks the data against `crc` as it
      // copies it (the end-to-end check, in the same pass as the copy).
      std::optional<std::span<const std::byte>> value;
      if (!(flags & wire::kChunkWriteDelete)) {
        value = data;
        origin.crc = crc;
      }
      ASSIGN_OR_RETURN(uint64_t version,
                       chain_->Write(key, value, Deadline::AfterMs(30000), origin));
      ByteWriter w;
      w.Put<uint64_t>(version);
      return w.Take();
    });
  });
  rpc_->Handle(wire::kChunkRead, [this](RpcRequest req) -> awaitable<Payload> {
    co_return co_await OnPool(client_pool_, [&]() -> Payload {
      ByteReader r(req.payload, "chunk read");
      ASSIGN_OR_RETURN(uint64_t key, r.Get<uint64_t>());
      ASSIGN_OR_RETURN(uint64_t offset, r.Get<uint64_t>());
      ASSIGN_OR_RETURN(uint64_t length, r.Get<uint64_t>());
      std::vector<std::byte> out;
      RETURN_IF_ERROR(
          chain_->Read(key, offset, std::min(length, wire::kMaxReadPerRequest), &out, nullptr));
      return out;
    });
  });
  rpc_->Handle(wire::kChunkKeys, [this](RpcRequest) -> awaitable<Payload> {
    co_return co_await OnPool(client_pool_, [&]() -> Payload {
      std::vector<chain::ChunkKey> keys = chain_->Keys();
      ByteWriter w;
      w.Put<uint64_t>(keys.size());
      for (auto k : keys) w.Put<uint64_t>(k);
      return w.Take();
    });
  });
  rpc_->Handle(wire::kEngineCheck, [this](RpcRequest) -> awaitable<Payload> {
    co_return co_await OnPool(client_pool_, [&]() -> Payload {
      std::vector<std::string> problems = engine_->Check();
      ByteWriter w;
      w.Put<uint32_t>(static_cast<uint32_t>(std::min<size_t>(problems.size(), 10000)));
      for (size_t i = 0; i < problems.size() && i < 10000; ++i)
        w.PutString(problems[i].substr(0, 4096));
      return w.Take();
    });
  });
  for (uint16_t type : {wire::kFsWriteShm, wire::kFsReadShm}) {
    rpc_->Handle(type, [this, type](RpcRequest req) -> awaitable<Payload> {
      if (!is_meta()) co_return NotServingFs();
      if (type == wire::kFsReadShm && read_ring_)
        if (std::optional<Payload> read = co_await ReadShmOnIoThread(req.payload, req.peer))
          co_return std::move(*read);
      co_return co_await OnPool(client_pool_, [&]() -> Payload {
        return ServeFs([&]() -> Payload {
          if (type == wire::kFsReadShm &&
              options_.read_path == ServerOptions::ReadPath::kPoolDirect)
            if (std::optional<Payload> read = ReadShmDirect(req.payload, req.peer))
              return std::move(*read);
          return HandleShm(type == wire::kFsWriteShm, req.payload, req.peer);
        });
      });
    });
  }
  // Reads answer [u32 CRC32C of the data, data] in a frame without a payload CRC: the client
  // checks the data against the CRC end to end, one pass instead of two.
  rpc_->HandleBulk(wire::kFsRead, [this](RpcRequest req) -> awaitable<Result<net::RpcBulkReply>> {
    if (!is_meta()) co_return NotServingFs();
    std::optional<Result<net::RpcBulkReply>> reply = co_await asio::co_spawn(
        client_pool_.get_executor(),
        [&]() -> awaitable<std::optional<Result<net::RpcBulkReply>>> {
          co_return ServeFs([&] { return HandleFsRead(req.payload); });
        },
        use_awaitable);
    co_return std::move(*reply);
  });
  for (uint16_t type : {wire::kFsCreate, wire::kFsMkdir, wire::kFsWrite, wire::kFsStat,
                        wire::kFsList, wire::kFsRename, wire::kFsRemove, wire::kFsSeal,
                        wire::kFsFsck, wire::kFsPutFile, wire::kFsRemoveTrees}) {
    rpc_->Handle(type, [this, type](RpcRequest req) -> awaitable<Payload> {
      if (!is_meta()) co_return NotServingFs();
      co_return co_await OnPool(client_pool_, [&]() -> Payload {
        return ServeFs([&] { return HandleFs(type, req.payload); });
      });
    });
  }
}

Status ServerImpl::NotServingFs() const {
  const uint32_t meta = meta_node_.load();
  const NodeEndpoint* m = Endpoint(meta);
  if (!m)
    return Status(StatusCode::kNotServing,
                  "ringfsd node " + std::to_string(options_.self) +
                      " knows no metadata node yet (it waits for its first membership view)");
  return Status(StatusCode::kNotServing, "file operations are served by node " +
                                             std::to_string(meta) + " at " + m->host + ":" +
                                             std::to_string(m->port));
}

template <typename Op>
auto ServerImpl::ServeFs(Op op) -> decltype(op()) {
  if (!is_meta()) return NotServingFs();
  RETURN_IF_ERROR(AwaitTakeover());
  {
    // A role being given up takes no new operation: Resign waits for the running ones only, and
    // would wait on while new ones keep coming (a shared_mutex lets readers in ahead of a
    // waiting writer).
    std::lock_guard lock(manager_mu_);
    if (resigning_)
      return Unavailable("ringfsd node " + std::to_string(options_.self) +
                         " is giving its metadata role up; try again");
    RETURN_IF_ERROR(IsolationError());
  }
  std::shared_lock role(fs_role_mu_);
  if (!is_meta() || !has_manager()) return NotServingFs();
  {
    std::lock_guard lock(manager_mu_);
    RETURN_IF_ERROR(IsolationError());
  }
  return op();
}

size_t ServerImpl::NodesHeard() const {
  const MonoTime now = MonoClock::now();
  size_t heard = 1;  // itself
  for (const auto& [node, at] : answered_)
    heard += node != options_.self && now - at < std::chrono::milliseconds(IsolatedAfterMs());
  return heard;
}

void ServerImpl::Isolate(size_t heard) {
  isolated_ = true;
  LOG_WARN(
      "ringfsd node {}: isolated: {} of {} store nodes answered in the last {} ms; no file "
      "operations and no chain changes until it takes the metadata role over again",
      options_.self, heard, options_.nodes.size(), IsolatedAfterMs());
}

Status ServerImpl::IsolationError() {
  // The pings' answers are checked here too, not only as each ping ends (OnPing): a manager
  // cut off refuses file operations from IsolatedAfterMs after its last majority on.
  if (!isolated_ && manager_ && options_.follow_views)
    if (const size_t heard = NodesHeard(); 2 * heard <= options_.nodes.size()) Isolate(heard);
  if (!isolated_) return Status();
  return Unavailable("ringfsd node " + std::to_string(options_.self) +
                     " holds the metadata role but has not heard from a majority of the store "
                     "nodes for " +
                     std::to_string(IsolatedAfterMs()) + " ms");
}

void ServerImpl::Retake() {
  std::set<uint32_t> members;
  uint64_t epoch = 0;
  {
    std::lock_guard lock(view_mu_);
    if (!is_meta()) return;  // a view moved the role meanwhile: that path resigns
    members = view_members_;
    epoch = view_epoch_;
  }
  {
    std::lock_guard taking(takeover_mu_);
    taking_over_ = true;
  }
  LOG_INFO(
      "ringfsd node {}: a majority of the store nodes answers again: taking the metadata "
      "role over anew",
      options_.self);
  Resign();
  TakeOver(members, epoch);
}

Status ServerImpl::AwaitTakeover() {
  std::unique_lock lock(takeover_mu_);
  if (takeover_cv_.wait_for(lock, std::chrono::seconds(30), [&] { return !taking_over_; }))
    return Status();
  return Unavailable("ringfsd node " + std::to_string(options_.self) +
                     " is still taking the metadata role over after 30 s");
}

void ServerImpl::EndTakeover() {
  {
    std::lock_guard lock(takeover_mu_);
    taking_over_ = false;
  }
  takeover_cv_.notify_all();
}

void ServerImpl::ChangeRole() {
  std::set<uint32_t> members;
  uint64_t epoch = 0;
  bool current = false;
  {
    std::lock_guard lock(view_mu_);
    members = view_members_;
    epoch = view_epoch_;
    current = role_epoch_ >= meta_epoch_;
  }
  if (!is_meta()) {
    EndTakeover();
    Resign();
    return;
  }
  if (current && has_manager()) {
    EndTakeover();  // an earlier task of this strand took the role for this view already
    return;
  }
  // The role may come back to a node that still holds a manager of an older view: another node
  // may have held it since, so this node starts over from what the others know.
  Resign();
  TakeOver(members, epoch);
}

void ServerImpl::Resign() {
  {
    std::lock_guard lock(manager_mu_);
    resigning_ = manager_ != nullptr;  // the running operations' writes now fail at once
  }
  const MonoTime start = MonoClock::now();
  std::unique_lock role(fs_role_mu_);  // waits for the file operations running here
  const int64_t waited_ms = MsBetween(start, MonoClock::now());
  std::unique_ptr<chain::ChainManager> manager;
  {
    std::lock_guard lock(manager_mu_);
    if (!manager_) {
      if (waited_ms >= 100)
        LOG_INFO("ringfsd node {}: waited {} ms for the file operations running here to end",
                 options_.self, waited_ms);
      return;
    }
    manager = std::move(manager_);
    members_.reset();
    up_.clear();
    missed_.clear();
    answered_.clear();
    isolated_ = false;
    retake_queued_ = false;
    resigning_ = false;
  }
  ++role_gen_;  // ends the heartbeat and collector loops
  {
    std::lock_guard lock(fs_mu_);
    fs_.reset();
  }
  RememberState(manager->Save(), true);
  LOG_INFO(
      "ringfsd node {}: gave up the metadata role (node {} holds it now; waited {} ms for the "
      "file operations running here to end)",
      options_.self, meta_node_.load(), waited_ms);
}

void ServerImpl::TakeOver(const std::set<uint32_t>& members, uint64_t epoch) {
  const MonoTime start = MonoClock::now();
  // What this node knows, then what every other member knows (each gives the role up first).
  std::vector<std::byte> best;
  uint64_t best_sum = 0;
  {
    std::lock_guard lock(known_mu_);
    best = known_state_;
    best_sum = known_sum_;
  }
  std::vector<chain::ChainConfig> seen = LocalConfigs();
  const std::vector<std::byte> request =
      wire::EncodeHandoverRequest(wire::HandoverRequest{epoch, options_.self});
  std::string silent;
  std::string newer;  // why a node of a newer view may hold the role: this one must not take it
  std::vector<uint32_t> others;
  for (const NodeEndpoint& n : options_.nodes)
    if (n.id != options_.self && members.contains(n.id)) others.push_back(n.id);
  // Every other member at once. A node that held the role answers once its running file
  // operations failed or ended (their writes fail at once while it resigns). One that does not
  // answer in time may be cut off: it is waited for as a node outside the view is (below). A
  // refusal (the node has a newer view) or a newer view here ends the wait: this view's
  // takeover will not happen.
  std::map<uint32_t, MonoTime> answered_at;  // when each answer was first seen (±50 ms)
  const auto superseded = [this, epoch, &answered_at](const Answers& answers) {
    bool refused = false;
    for (const auto& [id, answer] : answers) {
      answered_at.try_emplace(id, MonoClock::now());
      refused = refused || answer.status().code() == StatusCode::kFailedPrecondition;
    }
    if (refused) return true;
    std::lock_guard view(view_mu_);
    return view_epoch_ > epoch;
  };
  Answers answers = CallEachUnlessStopping(others, wire::kMetaHandover, request,
                                           Deadline::AfterMs(3'000), superseded);
  const MonoTime received = MonoClock::now();
  std::map<uint32_t, std::vector<wire::AnsweredAgo>> answered;  // by member
  if (stopping_) {
    EndTakeover();
    return;
  }
  {
    std::lock_guard view(view_mu_);
    if (view_epoch_ > epoch)
      newer = "view " + std::to_string(view_epoch_) + " came during the takeover";
  }
  for (const uint32_t id : others) {
    auto reply = answers.find(id);
    if (reply == answers.end()) {
      silent += " " + std::to_string(id) + " (no answer yet)";
      continue;
    }
    Result<wire::Handover> handover =
        reply->second.ok() ? wire::DecodeHandover(reply->second->payload) : reply->second.status();
    if (!handover.ok()) {
      if (handover.status().code() == StatusCode::kFailedPrecondition)
        newer =
            "node " + std::to_string(id) + " refused: " + std::string(handover.status().message());
      silent += " " + std::to_string(id) + " (" + handover.status().ToString() + ")";
      continue;
    }
    if (const uint64_t sum = chain::ChainManager::SavedVersionSum(handover->manager_state);
        sum > best_sum) {
      best_sum = sum;
      best = std::move(handover->manager_state);
    }
    seen.insert(seen.end(), handover->configs.begin(), handover->configs.end());
    answered[id] = std::move(handover->answered);
  }
  auto manager = std::make_unique<chain::ChainManager>(layout_);
  if (!best.empty())
    if (Status s = manager->Restore(best); !s.ok()) {
      LOG_WARN(
          "ringfsd node {}: the newest chain manager state does not load ({}); starting "
          "from the chain versions the replicas hold",
          options_.self, s.ToString());
      manager = std::make_unique<chain::ChainManager>(layout_);
    }
  // A view this node restored from disk may be older than the cluster's: every chain version a
  // manager of view E hands out is below (E + 1) << 32, so a higher one means a newer view.
  uint64_t highest = 0;
  for (size_t c = 0; c < manager->chain_count(); ++c)
    highest = std::max(highest, manager->config(c).version);
  for (const chain::ChainConfig& c : seen) highest = std::max(highest, c.version);
  if (newer.empty() && highest >= ((epoch + 1) << 32))
    newer = "chain version " + std::to_string(highest) + " comes from a manager of a newer view";
  if (!newer.empty()) {
    bool again = false;
    {
      std::lock_guard view(view_mu_);
      if (view_epoch_ > epoch && meta_node_.load() == options_.self) {
        // The newer view came meanwhile and gives the role to this node: try again with it.
        again = true;
        meta_epoch_ = view_epoch_;
        asio::post(role_strand_, [this] { ChangeRole(); });
      } else if (meta_node_.load() == options_.self && meta_epoch_ <= epoch) {
        meta_node_ = 0;
      }
    }
    if (!again) EndTakeover();
    LOG_WARN("ringfsd node {}: not taking the metadata role over for view {} ({}); {}",
             options_.self, epoch, newer,
             again ? "trying again with the newer view it has" : "waiting for a newer view");
    return;
  }
  std::set<chain::NodeId> down;
  for (const NodeEndpoint& n : options_.nodes)
    if (!members.contains(n.id)) down.insert(n.id);
  const MonoTime waited_from = MonoClock::now();
  int64_t waited_ms = 0;
  if (!down.empty() || !silent.empty()) {
    // A node outside the view, or one that did not answer, may be an old metadata node cut off
    // with a minority: it stops acting within FreezeBoundMs of losing the majority, so this node
    // acts only after that.
    const MonoTime act = ActAfter(members, answered, silent.empty(), received);
    while (MonoClock::now() < act && !stopping_)
      std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp<int64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(act - MonoClock::now()).count(), 1,
          20)));
    if (stopping_) {
      EndTakeover();
      return;
    }
    waited_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(MonoClock::now() - waited_from)
            .count();
  }
  // Above every version of a manager of an earlier view, whatever it did after this state.
  (void)manager->TakeOver(seen, std::max<uint64_t>(epoch, 1) << 32, down);
  // This node's own replicas rejoin the chains that left them out (it may be just back).
  (void)manager->OnNodeUp(options_.self);
  std::vector<chain::ChainConfig> configs;
  for (size_t c = 0; c < manager->chain_count(); ++c) configs.push_back(manager->config(c));
  // This node's replicas learn the new versions before any file operation runs here: the
  // shared-memory reads trust the local replica's own config, which after a restart is the
  // initial one (every home node serving).
  for (const chain::ChainConfig& c : configs) chain_->OnConfig(c);
  {
    std::lock_guard view(view_mu_);
    if (meta_node_.load() != options_.self || meta_epoch_ > epoch) {
      // A newer view chose another node, or this one again: the strand's next task redoes it.
      if (meta_node_.load() != options_.self) EndTakeover();
      return;
    }
    role_epoch_ = epoch;
    std::lock_guard lock(manager_mu_);
    manager_ = std::move(manager);
    members_ = members;
    up_.clear();
    missed_.clear();
    answered_.clear();
    for (uint32_t n : members) answered_[n] = MonoClock::now();  // they just answered
    isolated_ = false;
    retake_queued_ = false;
    up_[options_.self] = true;
    for (chain::NodeId n : down) up_[n] = false;
    SaveManager();
  }
  const uint64_t role = ++role_gen_;
  ++takeovers_;
  Broadcast(configs);
  asio::co_spawn(io_, HeartbeatLoop(role), asio::detached);
  asio::co_spawn(io_, CollectLoop(role), asio::detached);
  std::set<uint32_t> latest;
  {
    std::lock_guard view(view_mu_);
    latest = view_members_;
  }
  FollowMembers(latest);  // a view that came during the takeover
  EndTakeover();
  // The member whose handover answer came last: the one a slow takeover waited for.
  const auto last =
      std::max_element(answered_at.begin(), answered_at.end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; });
  LOG_INFO(
      "ringfsd node {}: took the metadata role over for view {} in {} ms (manager state of "
      "version sum {}, {} chain versions seen; last handover answer from node {} after {} ms; "
      "waited {} ms for an old metadata node to freeze{}{})",
      options_.self, epoch, MsBetween(start, MonoClock::now()), best_sum, seen.size(),
      last == answered_at.end() ? 0 : last->first,
      last == answered_at.end() ? 0 : MsBetween(start, last->second), waited_ms,
      silent.empty() ? "" : "; no answer from", silent);
}

Status ServerImpl::AnswerPing(uint32_t sender) {
  std::lock_guard lock(answered_meta_mu_);
  const uint32_t meta = meta_node_.load();
  if (options_.follow_views && meta != 0 && sender != meta)
    return FailedPrecondition("ringfsd node " + std::to_string(options_.self) +
                              " follows metadata node " + std::to_string(meta) +
                              ": it answers no ping of node " + std::to_string(sender));
  MonoTime& at = answered_meta_[sender];
  at = std::max(at, MonoClock::now());
  return Status();
}

MonoTime ServerImpl::ActAfter(const std::set<uint32_t>& members,
                              const std::map<uint32_t, std::vector<wire::AnsweredAgo>>& answered,
                              bool all_answered, MonoTime received) {
  const auto freeze = std::chrono::milliseconds(FreezeBoundMs());
  if (!all_answered || 2 * members.size() <= options_.nodes.size())
    return MonoClock::now() + freeze;
  // Every member answered, so each has given the role up and answers only this node from now
  // on: an old manager outside the view loses its majority with their last answers to it.
  std::optional<MonoTime> last;
  const auto note = [&](uint32_t node, MonoTime at) {
    if (members.contains(node)) return;
    if (!last || at > *last) last = at;
  };
  for (const auto& [member, list] : answered)
    for (const wire::AnsweredAgo& a : list)
      if (a.ms_ago < FreezeBoundMs())  // an older answer keeps no node acting
        note(a.node, received - std::chrono::milliseconds(a.ms_ago));
  {
    std::lock_guard lock(answered_meta_mu_);
    for (const auto& [node, at] : answered_meta_) note(node, at);
  }
  return last ? *last + freeze : MonoClock::now();
}

Payload ServerImpl::HandOver(std::span<const std::byte> payload) {
  const MonoTime start = MonoClock::now();
  ASSIGN_OR_RETURN(wire::HandoverRequest request, wire::DecodeHandoverRequest(payload));
  if (!options_.follow_views)
    return FailedPrecondition("ringfsd node " + std::to_string(options_.self) +
                              " has a fixed metadata node (it does not follow views)");
  {
    std::lock_guard lock(view_mu_);
    if (have_view_ && request.epoch < view_epoch_)
      return FailedPrecondition("metadata handover to node " + std::to_string(request.to) +
                                " for view " + std::to_string(request.epoch) +
                                ": this node has view " + std::to_string(view_epoch_));
    if (request.to != meta_node_.load() && request.epoch < meta_epoch_)
      return FailedPrecondition(
          "metadata handover to node " + std::to_string(request.to) + " for view " +
          std::to_string(request.epoch) + ": this node follows metadata node " +
          std::to_string(meta_node_.load()) + " of view " + std::to_string(meta_epoch_));
    if (request.to != meta_node_.load()) {
      meta_epoch_ = request.epoch;
      meta_node_ = request.to;
    }
  }
  // From here on this node answers the pings of request.to only (AnswerPing).
  if (request.to != options_.self) Resign();
  wire::Handover handover;
  {
    std::lock_guard lock(known_mu_);
    handover.manager_state = known_state_;
  }
  handover.configs = LocalConfigs();
  {
    std::lock_guard lock(answered_meta_mu_);
    const MonoTime now = MonoClock::now();
    for (const auto& [node, at] : answered_meta_)
      if (node != request.to)
        handover.answered.push_back(wire::AnsweredAgo{
            node, std::chrono::duration_cast<std::chrono::milliseconds>(now - at).count()});
    // The taking node counts this answer as fresh once its takeover ends, which may wait up to
    // FreezeBoundMs first (TakeOver).
    MonoTime& until = answered_meta_[request.to];
    until =
        std::max(until, now + std::chrono::milliseconds(FreezeBoundMs() + options_.heartbeat_ms));
  }
  if (const int64_t took_ms = MsBetween(start, MonoClock::now()); took_ms >= 100)
    LOG_INFO("ringfsd node {}: answered the metadata handover to node {} for view {} in {} ms",
             options_.self, request.to, request.epoch, took_ms);
  return wire::EncodeHandover(handover);
}

Payload ServerImpl::HandleShm(bool write, std::span<const std::byte> payload,
                              const std::string& peer) {
  ASSIGN_OR_RETURN(FileSystem * fs, Fs());
  ByteReader r(payload, "shared-memory file request");
  ASSIGN_OR_RETURN(std::string path, wire::GetPath(r));
  ASSIGN_OR_RETURN(uint64_t offset, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(uint32_t id, r.Get<uint32_t>());
  ASSIGN_OR_RETURN(uint64_t at, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(uint64_t length, r.Get<uint64_t>());
  if (length > wire::kMaxReadPerRequest)
    return InvalidArgument(std::to_string(length) + " bytes in one shared-memory request exceed " +
                           std::to_string(wire::kMaxReadPerRequest));
  std::shared_ptr<SharedClient> client;
  {
    std::lock_guard lock(shm_mu_);
    if (auto it = shm_.find(id); it != shm_.end()) client = it->second;
  }
  // A region serves only the connection that registered it.
  if (!client || client->peer != peer)
    return NotFound("no shared region " + std::to_string(id) + " registered for " + peer);
  ASSIGN_OR_RETURN(std::span<std::byte> bytes, client->region->Slice(at, length));
  if (write) {
    // The chain node copies the bytes before it checksums and stores them, so a client that
    // changes its buffer during the write gets one of its versions, never a bad checksum.
    RETURN_IF_ERROR(fs->Write(path, offset, bytes));
    return Empty();
  }
  // Straight from the chunk engine's I/O buffer into the client's region.
  ASSIGN_OR_RETURN(uint64_t n, fs->ReadInto(path, offset, bytes));
  ByteWriter w;
  w.Put<uint64_t>(n);
  return w.Take();
}

std::optional<ServerImpl::ShmRead> ServerImpl::PlanShmRead(std::span<const std::byte> payload,
                                                           const std::string& peer) {
  FileSystem* fs = nullptr;
  {
    std::unique_lock lock(fs_mu_, std::try_to_lock);
    if (!lock.owns_lock() || !fs_) return std::nullopt;
    fs = fs_.get();
  }
  ByteReader r(payload, "shared-memory file request");
  auto path = wire::GetPath(r);
  auto offset = r.Get<uint64_t>();
  auto id = r.Get<uint32_t>();
  auto at = r.Get<uint64_t>();
  auto length = r.Get<uint64_t>();
  if (!path.ok() || !offset.ok() || !id.ok() || !at.ok() || !length.ok() ||
      *length > wire::kMaxReadPerRequest)
    return std::nullopt;
  ShmRead read;
  {
    std::lock_guard lock(shm_mu_);
    if (auto it = shm_.find(*id); it != shm_.end()) read.client = it->second;
  }
  if (!read.client || read.client->peer != peer) return std::nullopt;
  Result<std::span<std::byte>> bytes = read.client->region->Slice(*at, *length);
  if (!bytes.ok()) return std::nullopt;
  read.bytes = *bytes;
  Result<std::vector<ReadPiece>> pieces = fs->TryPlanRead(*path, *offset, *length);
  if (!pieces.ok()) return std::nullopt;
  read.pieces = std::move(*pieces);
  return read;
}

bool ServerImpl::FinishShmPiece(const ShmRead& read, const ReadPiece& piece,
                                const PlannedRead& plan, int io_result) {
  Result<size_t> n = chain_->FinishReadInto(plan, io_result);  // always: it unpins the slot
  if (!n.ok() && n.status().code() != StatusCode::kNotFound)
    return false;  // another replica, or the error
  const std::span<std::byte> dst = read.bytes.subspan(piece.at, piece.length);
  std::fill(dst.begin() + static_cast<ptrdiff_t>(n.ok() ? *n : 0), dst.end(), std::byte{0});
  return true;
}

// What a planned request answers: the bytes read (the end of its last piece).
Payload ShmReadReply(const std::vector<ReadPiece>& pieces) {
  ByteWriter w;
  w.Put<uint64_t>(pieces.empty() ? 0 : pieces.back().at + pieces.back().length);
  return w.Take();
}

awaitable<std::optional<Payload>> ServerImpl::ReadShmOnIoThread(std::span<const std::byte> payload,
                                                                const std::string& peer) {
  // Held across the reads (they resume on this same thread): the role cannot go meanwhile.
  std::shared_lock role(fs_role_mu_, std::try_to_lock);
  if (!role.owns_lock() || !is_meta()) co_return std::nullopt;
  std::optional<ShmRead> read = PlanShmRead(payload, peer);
  if (!read) co_return std::nullopt;
  for (const ReadPiece& p : read->pieces) {
    const std::span<std::byte> dst = read->bytes.subspan(p.at, p.length);
    Result<PlannedRead> plan = chain_->PlanReadInto(p.key, p.offset, dst);
    if (!plan.ok()) {
      if (plan.status().code() != StatusCode::kNotFound &&
          plan.status().code() != StatusCode::kOutOfRange)
        co_return std::nullopt;
      std::fill(dst.begin(), dst.end(), std::byte{0});  // a hole
      continue;
    }
    int res = 0;
    if (plan->io_length > 0)
      res = co_await read_ring_->Read(plan->fd, plan->dest, plan->io_length, plan->file_offset);
    if (!FinishShmPiece(*read, p, *plan, res)) co_return std::nullopt;
  }
  reads_on_io_thread_.fetch_add(1, std::memory_order_relaxed);
  co_return ShmReadReply(read->pieces);
}

std::optional<Payload> ServerImpl::ReadShmDirect(std::span<const std::byte> payload,
                                                 const std::string& peer) {
  std::optional<ShmRead> read = PlanShmRead(payload, peer);
  if (!read) return std::nullopt;
  for (const ReadPiece& p : read->pieces) {
    const std::span<std::byte> dst = read->bytes.subspan(p.at, p.length);
    Result<PlannedRead> plan = chain_->PlanReadInto(p.key, p.offset, dst);
    if (!plan.ok()) {
      if (plan.status().code() != StatusCode::kNotFound &&
          plan.status().code() != StatusCode::kOutOfRange)
        return std::nullopt;
      std::fill(dst.begin(), dst.end(), std::byte{0});  // a hole
      continue;
    }
    int res = 0;
    if (plan->io_length > 0) {
      // O_DIRECT from the page-aligned region: the disk writes the client's memory directly.
      const ssize_t n =
          pread(plan->fd, plan->dest, plan->io_length, static_cast<off_t>(plan->file_offset));
      res = n < 0 ? -errno : static_cast<int>(n);
    }
    if (!FinishShmPiece(*read, p, *plan, res)) return std::nullopt;
  }
  reads_direct_.fetch_add(1, std::memory_order_relaxed);
  return ShmReadReply(read->pieces);
}

Result<net::RpcBulkReply> ServerImpl::HandleFsRead(std::span<const std::byte> payload) {
  ASSIGN_OR_RETURN(FileSystem * fs, Fs());
  ByteReader r(payload, "read request");
  ASSIGN_OR_RETURN(std::string path, wire::GetPath(r));
  ASSIGN_OR_RETURN(uint64_t offset, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(uint64_t length, r.Get<uint64_t>());
  net::RpcBulkReply reply;
  RETURN_IF_ERROR(fs->Read(path, offset, std::min(length, wire::kMaxReadPerRequest), &reply.body));
  ByteWriter w;
  w.Put<uint32_t>(FastCrc32c(reply.body.data(), reply.body.size()));
  reply.head = w.Take();
  return reply;
}

Payload ServerImpl::HandleFs(uint16_t type, std::span<const std::byte> payload) {
  ASSIGN_OR_RETURN(FileSystem * fs, Fs());
  ByteReader r(payload, "file request");
  ByteWriter w;
  if (type == wire::kFsFsck) {
    ASSIGN_OR_RETURN(uint8_t repair, r.Get<uint8_t>());
    ASSIGN_OR_RETURN(FsckReport report, fs->Fsck(repair != 0));
    return wire::EncodeFsck(report);
  }
  if (type == wire::kFsRemoveTrees) {
    ASSIGN_OR_RETURN(uint32_t n, r.Get<uint32_t>());
    if (n > wire::kMaxRemovePaths || n > r.remaining() / 4)
      return InvalidArgument("remove of " + std::to_string(n) + " paths: more than " +
                             std::to_string(wire::kMaxRemovePaths) + " or than the request holds");
    std::vector<std::string> paths(n);
    for (std::string& p : paths) {
      ASSIGN_OR_RETURN(p, wire::GetPath(r));
    }
    ASSIGN_OR_RETURN(uint64_t removed, fs->RemoveTrees(paths));
    w.Put<uint64_t>(removed);
    return w.Take();
  }
  ASSIGN_OR_RETURN(std::string path, wire::GetPath(r));
  switch (type) {
    case wire::kFsCreate: {
      ASSIGN_OR_RETURN(FileStat st, fs->Create(path));
      wire::PutStat(w, st);
      return w.Take();
    }
    case wire::kFsMkdir:
      RETURN_IF_ERROR(fs->Mkdir(path));
      return Empty();
    case wire::kFsWrite: {
      ASSIGN_OR_RETURN(uint64_t offset, r.Get<uint64_t>());
      ASSIGN_OR_RETURN(uint32_t crc, r.Get<uint32_t>());
      ASSIGN_OR_RETURN(auto data, r.GetBytes(r.remaining()));
      // The frame carries no payload CRC: this is the end-to-end check of the client's bytes.
      if (const uint32_t got = FastCrc32c(data.data(), data.size()); got != crc)
        return Status(StatusCode::kChecksumMismatch,
                      "write of " + std::to_string(data.size()) + " bytes at " +
                          std::to_string(offset) + " of " + path + ": data CRC32C " +
                          std::to_string(got) + " != " + std::to_string(crc) +
                          " sent by the client (corrupted in transit)");
      RETURN_IF_ERROR(fs->Write(path, offset, data));
      return Empty();
    }
    case wire::kFsPutFile: {
      ASSIGN_OR_RETURN(uint32_t crc, r.Get<uint32_t>());
      ASSIGN_OR_RETURN(auto data, r.GetBytes(r.remaining()));
      if (const uint32_t got = FastCrc32c(data.data(), data.size()); got != crc)
        return Status(StatusCode::kChecksumMismatch,
                      "put of " + std::to_string(data.size()) + " bytes as " + path +
                          ": data CRC32C " + std::to_string(got) + " != " + std::to_string(crc) +
                          " sent by the client (corrupted in transit)");
      ASSIGN_OR_RETURN(FileStat st, fs->PutFile(path, data));
      wire::PutStat(w, st);
      return w.Take();
    }
    case wire::kFsStat: {
      ASSIGN_OR_RETURN(FileStat st, fs->Stat(path));
      wire::PutStat(w, st);
      return w.Take();
    }
    case wire::kFsList: {
      ASSIGN_OR_RETURN(std::vector<FileStat> list, fs->List(path));
      w.Put<uint32_t>(static_cast<uint32_t>(list.size()));
      for (const FileStat& st : list) wire::PutStat(w, st);
      return w.Take();
    }
    case wire::kFsRename: {
      ASSIGN_OR_RETURN(std::string to, wire::GetPath(r));
      RETURN_IF_ERROR(fs->Rename(path, to));
      return Empty();
    }
    case wire::kFsRemove:
      RETURN_IF_ERROR(fs->Remove(path));
      return Empty();
    case wire::kFsSeal:
      RETURN_IF_ERROR(fs->Seal(path));
      return Empty();
    default:
      return Unimplemented("file request type " + std::to_string(type));
  }
}

}  // namespace

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  auto server = std::make_unique<ServerImpl>(std::move(options));
  RETURN_IF_ERROR(server->Init());
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace rt::iofs
