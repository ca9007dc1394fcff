// The CPU communicator: op queue and work handles, bootstrap through the Store and Boost.Asio,
// and the collective algorithms on top of Mesh::Exchange.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "base/log.h"
#include "base/net/frame_io.h"
#include "comm/communicator.h"
#include "comm/tcp/arena.h"
#include "comm/tcp/mesh.h"
#include "comm/tcp/reduce.h"

namespace rt::comm {
namespace tcp {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

std::string RankName(int r) { return "rank " + std::to_string(r); }

std::string HostId() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(f, boot);
  return std::string(host) + "/" + boot;
}

class CpuComm;

// One queued op; it is also the op's work handle (one allocation per op).
struct Op final : Work {
  Status Wait(Deadline deadline) override;
  bool Done() const override;

  std::shared_ptr<CpuComm> comm;  // kept alive while a handle exists
  OpKind kind;
  bool p2p = false;
  // p2p ops: the transfer (run is unused).
  int peer = -1;
  void* buffer = nullptr;
  size_t count = 0;
  DType dtype = DType::kU8;
  uint32_t tag = 0;
  std::function<Status(OpCtx&)> run;
  // All-reduce and barrier run without std::function (the latency path): `fast` is set and
  // these hold the arguments.
  Status (*fast)(CpuComm&, Op&, OpCtx&) = nullptr;
  const void* send = nullptr;
  void* recv = nullptr;
  ReduceOp rop = ReduceOp::kSum;
  size_t small_bytes = 0;
  // Set when the issuing thread already posted the input (CpuComm::TryPost): the arena step and
  // the op number it used.
  uint64_t posted_step = 0;
  uint32_t seq = 0;
  // Completion (guarded by the communicator's mutex).
  bool done = false;
  Status result;
};

class CpuComm;
Status RunFastAllReduce(CpuComm& c, Op& op, OpCtx& octx);

// A completed work handle (argument errors, size-1 shortcuts).
class DoneWork final : public Work {
 public:
  explicit DoneWork(Status s) : status_(std::move(s)) {}
  Status Wait(Deadline) override { return status_; }
  bool Done() const override { return true; }

 private:
  Status status_;
};

// The state shared by the communicator facade, its worker thread and work handles.
class CpuComm : public std::enable_shared_from_this<CpuComm> {
 public:
  CpuComm(CommOptions options, std::string scope)
      : opts_(std::move(options)), scope_(std::move(scope)),
        mesh_(opts_.rank, opts_.size, opts_.op_timeout) {}

  void Start() {
    worker_ = std::thread([self = shared_from_this()] { self->WorkerMain(); });
  }

  // Called by the facade's destructor.
  void Shutdown() {
    bool graceful;
    {
      std::unique_lock lock(mu_);
      graceful = ready_ && failed_.ok() && queue_.empty() && !running_;
      stopping_ = true;
      if (!graceful) FailLocked(Status(StatusCode::kCommAborted, "communicator destroyed"));
    }
    if (!graceful) mesh_.Abort();
    cv_.notify_all();
    worker_cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    if (graceful) mesh_.SendGoodbye();
    mesh_.CloseAll();
  }

  const CommOptions& options() const { return opts_; }
  const std::string& scope() const { return scope_; }

  WorkHandle Enqueue(OpKind kind, bool p2p, std::function<Status(OpCtx&)> run) {
    auto op = std::make_shared<Op>();
    op->kind = kind;
    op->p2p = p2p;
    op->run = std::move(run);
    op->comm = shared_from_this();
    return EnqueueOp(std::move(op));
  }

  // Queues a prepared collective op (op->comm already set: the facade's reference is copied,
  // cheaper than shared_from_this()).
  WorkHandle EnqueueOp(std::shared_ptr<Op> op) {
    {
      std::lock_guard lock(mu_);
      if (!failed_.ok()) {
        FailOpLocked(*op);
      } else {
        queue_.push_back(op);
      }
    }
    // The worker is not woken here: a caller that waits right away runs the op itself (no thread
    // handoff); the worker polls every kWorkerPollMs and runs ops nobody waits for.
    return op;
  }

  // Runs queued ops (claimed in order) until `op` is done or the deadline passes.
  Status WaitFor(Op* op, Deadline deadline) {
    std::unique_lock lock(mu_);
    while (!op->done) {
      if (CanClaimLocked()) {
        RunClaimedLocked(lock);
        continue;
      }
      if (cv_.wait_until(lock, deadline.when()) == std::cv_status::timeout && !op->done)
        return DeadlineExceeded(std::string(OpKindName(op->kind)) + " on " + RankName(opts_.rank) +
                                " not finished before the caller's deadline");
    }
    return op->result;
  }

  // What TryPost did with an all-reduce.
  enum class Issued {
    kNo,        // nothing: the op takes the ordinary queue
    kPosted,    // input posted, queue held: QueuePosted must follow
    kFinished,  // the whole op ran on the calling thread; its status is in *result
  };

  // The latency path of AllReduce (the peers usually post within a microsecond): when the
  // communicator is ready, healthy and idle (nothing queued or running), every rank is on this
  // host and the op takes the arena's small path, posts its input now on the calling thread
  // (ArenaPostSmall: writes our slot, never waits). A payload that fits the slot's line
  // (kArenaInlineBytes) then polls briefly for every peer's input (ArenaSmallPosted: a bounded
  // spin, no sleep; Abort() and other callers wait for the lock that long at most) and, when
  // all are there, reduces into `recv` at once: kFinished, with no op allocated or queued (a
  // failure fails the communicator as a queued op's does). Otherwise kPosted: the queue stays
  // held (running_) until QueuePosted queues the op, so that allocating and queueing it overlap
  // the peers' posting. kNo, having done nothing, when the op must take the ordinary queue.
  Issued TryPost(const void* send, void* recv, size_t count, DType dt, ReduceOp rop,
                 size_t small_bytes, uint64_t* step, uint32_t* seq, Status* result) {
    DataHeader h;
    h.kind = OpKind::kAllReduce;
    h.dtype = dt;
    h.reduce_op = static_cast<uint8_t>(rop);
    h.count = count;
    std::unique_lock lock(mu_);
    if (!ready_ || !failed_.ok() || running_ || !queue_.empty() || stopping_ || opts_.size == 1 ||
        !mesh_.all_shm() || !ArenaSmallPath(mesh_, h, small_bytes))
      return Issued::kNo;
    *seq = h.seq = NextSeq();
    *step = ArenaPostSmall(mesh_, h, send);
    const bool all_posted = count * DTypeSize(dt) <= kArenaInlineBytes && ArenaSmallPosted(mesh_, *step);
    mesh_.RingPeers();  // after the poll: our slot's line travels while we read the peers'
    if (!all_posted) {
      running_ = true;  // no other op may run before this one is queued
      return Issued::kPosted;
    }
    OpCtx ctx;
    ctx.SetCollective(h, opts_.rank);
    Status s = ArenaReduceSmall(mesh_, ctx, h, *step, send, recv);
    CountOp(OpKind::kAllReduce, ctx);
    if (!s.ok()) {
      if (s.code() != StatusCode::kCommAborted)
        mesh_.SendAbortNotice(RankName(opts_.rank) + ": " + s.ToString());
      FailLocked(s);
      lock.unlock();
      cv_.notify_all();
    }
    *result = std::move(s);
    return Issued::kFinished;
  }

  // A completed, successful work handle for the ops TryPost finished: it owns nothing (a
  // process-wide object that is never destroyed), so handing it out and dropping it costs no
  // allocation and no reference count.
  static WorkHandle DoneOk() {
    static DoneWork* const done = new DoneWork(Status());
    return WorkHandle(WorkHandle(), done);
  }

  // Queues the op TryPost posted (posted_step and seq set) at the front and releases the queue.
  WorkHandle QueuePosted(std::shared_ptr<Op> op) {
    {
      std::lock_guard lock(mu_);
      running_ = false;
      if (!failed_.ok()) {  // Abort() or a failure came in between: the op fails with it
        FailOpLocked(*op);
      } else {
        queue_.push_front(op);
      }
    }
    cv_.notify_all();  // waiters could not claim while running_ was set
    return op;
  }

  WorkHandle EnqueueP2p(OpKind kind, void* buf, size_t count, DType dt, int peer, uint32_t tag) {
    auto op = std::make_shared<Op>();
    op->kind = kind;
    op->p2p = true;
    op->buffer = buf;
    op->count = count;
    op->dtype = dt;
    op->peer = peer;
    op->tag = tag;
    op->comm = shared_from_this();
    bool wake = false;
    {
      std::lock_guard lock(mu_);
      if (!failed_.ok()) {
        FailOpLocked(*op);
      } else {
        queue_.push_back(op);
        wake = kind == OpKind::kSend && EagerSendLocked(peer, count * DTypeSize(dt));
      }
    }
    // A caller that waits right away runs the op itself (no thread handoff), and the worker
    // polls every kWorkerPollMs for ops nobody waits for. A send that fits the peer's
    // shared-memory ring wakes the worker at once: senders often do not wait (a pipeline stage
    // sends its activations and computes on), and the receiver would otherwise wait up to a
    // poll period for the bytes. The ring has room for it unless the receiver left several
    // messages unread, so the worker claiming it ahead of a receive queued behind it does not
    // hold that receive up (the poll already let the worker claim unwaited sends, only later).
    if (wake) worker_cv_.notify_one();
    return op;
  }

  bool IsDone(const Op* op) {
    std::lock_guard lock(mu_);
    return op->done;
  }

  Status WaitReady(Deadline deadline) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, deadline.when(), [&] { return ready_ || bootstrap_done_; }))
      return DeadlineExceeded(RankName(opts_.rank) + ": bootstrap not finished before the deadline");
    return bootstrap_status_;
  }

  void Abort() {
    {
      std::lock_guard lock(mu_);
      FailLocked(Status(StatusCode::kCommAborted,
                        RankName(opts_.rank) + ": communicator aborted by Abort()"));
    }
    mesh_.Abort();
    cv_.notify_all();
    worker_cv_.notify_all();
  }

  Status status() const {
    std::lock_guard lock(mu_);
    return failed_;
  }

  CommStats stats() const {
    std::lock_guard lock(mu_);
    return stats_;
  }

  int rank() const { return opts_.rank; }
  int size() const { return opts_.size; }
  Mesh& mesh() { return mesh_; }
  // On the running thread only (or under mu_ while nothing runs: TryPost).
  uint32_t NextSeq() { return seq_++; }

 private:
  bool CanClaimLocked() const { return ready_ && !running_ && !queue_.empty(); }

  // True when a send of `bytes` to `peer` goes through a shared-memory ring with room for four
  // such messages (their headers included), so it completes without waiting for the receiver
  // unless the receiver leaves that many unread.
  bool EagerSendLocked(int peer, size_t bytes) {
    if (!ready_) return false;
    const Peer& p = mesh_.peers()[static_cast<size_t>(peer)];
    return p.shm && 4 * (bytes + kDataHeaderSize) <= mesh_.ring_bytes();
  }

  // Claims the front op (plus following p2p ops, as one group), runs it unlocked, completes it.
  void RunClaimedLocked(std::unique_lock<std::mutex>& lock) {
    if (!queue_.front()->p2p) {  // one collective: no vectors, no allocation
      std::shared_ptr<Op> op = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      Status s = failed_;
      lock.unlock();
      OpCtx ctx;
      ctx.kind = op->kind;
      if (s.ok()) {
        s = op->fast ? op->fast(*this, *op, ctx) : op->run(ctx);
        if (!s.ok() && s.code() != StatusCode::kCommAborted)
          mesh_.SendAbortNotice(RankName(opts_.rank) + ": " + s.ToString());
      }
      lock.lock();
      running_ = false;
      if (!s.ok()) FailLocked(s);
      op->done = true;
      op->result = std::move(s);
      CountOp(op->kind, ctx);
      cv_.notify_all();
      return;
    }
    std::vector<std::shared_ptr<Op>> group{queue_.front()};
    queue_.pop_front();
    if (group[0]->p2p)
      while (!queue_.empty() && queue_.front()->p2p) {
        group.push_back(queue_.front());
        queue_.pop_front();
      }
    running_ = true;
    Status failed = failed_;
    lock.unlock();
    std::vector<OpCtx> ctx(group.size());
    Status s = failed;
    if (s.ok()) {
      if (group.size() == 1 && !group[0]->p2p) {
        ctx[0].kind = group[0]->kind;
        s = group[0]->run(ctx[0]);
      } else {
        s = RunP2pGroup(group, ctx);
      }
      if (!s.ok() && s.code() != StatusCode::kCommAborted)
        mesh_.SendAbortNotice(RankName(opts_.rank) + ": " + s.ToString());
    }
    lock.lock();
    running_ = false;
    if (!s.ok()) FailLocked(s);
    for (size_t i = 0; i < group.size(); ++i) {
      group[i]->done = true;
      group[i]->result = s;
      CountOp(group[i]->kind, ctx[i]);
    }
    cv_.notify_all();
  }

  Status RunP2pGroup(std::vector<std::shared_ptr<Op>>& group, std::vector<OpCtx>& ctx);

  // Completes `op` with the communicator's failure (counted as an op that moved no bytes).
  // REQUIRES mu_.
  void FailOpLocked(Op& op) {
    op.done = true;
    op.result = failed_;
    CountOp(op.kind, OpCtx{});
  }

  void FailLocked(Status s) {
    if (failed_.ok()) failed_ = std::move(s);
    for (auto& op : queue_) FailOpLocked(*op);
    queue_.clear();
    if (!bootstrap_done_) {
      bootstrap_done_ = true;
      bootstrap_status_ = failed_;
    }
  }

  // Adds one op of `kind` and what its context counted to the stats. REQUIRES mu_.
  void CountOp(OpKind kind, const OpCtx& ctx) {
    auto& b = stats_.per_op[static_cast<size_t>(kind)];
    ++b.ops;
    b.bytes_sent += ctx.bytes_sent;
    b.bytes_received += ctx.bytes_received;
    stats_.single_copy_reduced_bytes += ctx.single_copy_reduced_bytes;
  }

  Status Bootstrap();

  void WorkerMain() {
    Status s = Bootstrap();
    if (!s.ok() && s.code() != StatusCode::kCommAborted)
      LOG_WARN("comm {} {}: bootstrap failed: {}", scope_, RankName(opts_.rank), s.ToString());
    {
      std::lock_guard lock(mu_);
      if (!bootstrap_done_) {
        bootstrap_done_ = true;
        bootstrap_status_ = s;
      }
      if (!s.ok()) FailLocked(s);
      else if (failed_.ok()) ready_ = true;
    }
    cv_.notify_all();
    std::unique_lock lock(mu_);
    while (true) {
      if (CanClaimLocked()) {
        RunClaimedLocked(lock);
        continue;
      }
      if (stopping_) break;
      worker_cv_.wait_for(lock, std::chrono::milliseconds(kWorkerPollMs));
    }
  }

  CommOptions opts_;
  std::string scope_;
  Mesh mesh_;
  std::thread worker_;
  uint32_t seq_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;         // waiters: an op completed, bootstrap finished, abort
  std::condition_variable worker_cv_;  // the worker: stop or abort (it also polls)
  static constexpr int kWorkerPollMs = 2;
  std::deque<std::shared_ptr<Op>> queue_;
  bool running_ = false;
  bool ready_ = false;
  bool stopping_ = false;
  bool bootstrap_done_ = false;
  Status bootstrap_status_;
  Status failed_;
  CommStats stats_;
};

Status Op::Wait(Deadline deadline) { return comm->WaitFor(this, deadline); }
bool Op::Done() const { return comm->IsDone(this); }

// ---------------------------------------------------------------------------------------------
// Bootstrap

// Get with short slices so that Abort() is noticed within ~100 ms.
Result<Bytes> GetAbortable(Store& store, const std::string& key, Deadline deadline, Mesh& mesh) {
  while (true) {
    if (mesh.aborted()) return Status(StatusCode::kCommAborted, "bootstrap aborted");
    Deadline slice = Deadline::AfterMs(100).Min(deadline);
    Result<Bytes> r = store.Get(key, slice);
    if (r.ok()) return r;
    if (r.status().code() != StatusCode::kDeadlineExceeded || deadline.Expired())
      return r.status().WithContext("bootstrap: store key " + key);
  }
}

struct PeerAddr {
  std::string host;
  uint16_t port = 0;
  std::string host_id;
  std::string shm_name;
};

Status CpuComm::Bootstrap() {
  const int n = opts_.size, me = opts_.rank;
  const Deadline deadline = Deadline::After(opts_.bootstrap_timeout);
  if (n == 1) return Status();
  auto store = ScopedStore(opts_.store, scope_);

  // 1. A nonce that names this communicator instance on every connection.
  uint64_t nonce = 0;
  if (me == 0) {
    std::random_device rd;
    nonce = (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(getpid()) ^
            static_cast<uint64_t>(MonoClock::now().time_since_epoch().count());
    auto v = store->CompareAndSet("nonce", std::nullopt, ToBytes(std::to_string(nonce)), deadline);
    if (!v.ok()) return v.status().WithContext("bootstrap: publishing the nonce");
    nonce = std::stoull(ToString(*v));
  } else {
    ASSIGN_OR_RETURN(Bytes v, GetAbortable(*store, "nonce", deadline, mesh_));
    nonce = std::stoull(ToString(v));
  }

  // 2. Listen, create our shared-memory segment, publish our address.
  asio::io_context io;
  boost::system::error_code ec;
  tcp::acceptor acceptor(io);
  tcp::endpoint ep(asio::ip::make_address(opts_.listen_address, ec), 0);
  if (ec) return InvalidArgument("bad listen address " + opts_.listen_address);
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status(StatusCode::kIoError, "bootstrap: cannot listen on " + opts_.listen_address + ": " + ec.message());
  const uint16_t port = acceptor.local_endpoint().port();
  const std::string host_id = HostId();
  const bool want_shm = opts_.transport != Transport::kTcp;
  std::string shm_name;
  if (want_shm) {
    char name[96];
    std::snprintf(name, sizeof(name), "/ringtrain-comm-%016llx-%d",
                  static_cast<unsigned long long>(nonce), me);
    shm_name = name;
    ASSIGN_OR_RETURN(auto seg, CreateShmSegment(shm_name, n, opts_.shm_ring_bytes,
                                                opts_.shm_arena_bytes));
    mesh_.set_own_segment(std::move(seg));
    mesh_.set_ring_bytes(opts_.shm_ring_bytes);
    mesh_.set_arena_bytes(opts_.shm_arena_bytes);
    mesh_.set_single_copy_bytes(opts_.shm_single_copy_bytes);
    mesh_.set_single_copy_oversubscribed(opts_.shm_single_copy_oversubscribed);
    mesh_.set_yield_window(opts_.shm_yield_window);
  }
  {
    std::ostringstream addr;
    addr << opts_.listen_address << "\n" << port << "\n" << host_id << "\n" << shm_name;
    RETURN_IF_ERROR(store->Set("addr/" + std::to_string(me), ToBytes(addr.str()), deadline)
                        .WithContext("bootstrap: publishing the address"));
  }
  std::vector<PeerAddr> addrs(n);
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    ASSIGN_OR_RETURN(Bytes v, GetAbortable(*store, "addr/" + std::to_string(r), deadline, mesh_));
    std::istringstream in(ToString(v));
    std::string port_s;
    std::getline(in, addrs[r].host);
    std::getline(in, port_s);
    std::getline(in, addrs[r].host_id);
    std::getline(in, addrs[r].shm_name);
    addrs[r].port = static_cast<uint16_t>(std::stoi(port_s));
  }
  auto& peers = mesh_.peers();
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    peers[r].same_host = addrs[r].host_id == host_id;
    peers[r].shm = want_shm && peers[r].same_host && !addrs[r].shm_name.empty();
  }

  // 3. Connections: rank j connects to every lower rank i (a control connection, plus a data
  // connection when the pair does not share memory); each connection opens with a hello.
  const int conns = opts_.tcp_connections_per_peer;
  mesh_.set_stripe_bytes(opts_.tcp_stripe_bytes);
  std::vector<std::optional<tcp::socket>> ctrl(n);
  std::vector<std::vector<std::optional<tcp::socket>>> data(n);
  for (auto& d : data) d.resize(conns);
  int expected_in = 0;
  for (int r = me + 1; r < n; ++r) expected_in += peers[r].shm ? 1 : 1 + conns;
  Status failure;
  int pending = expected_in;
  for (int r = 0; r < me; ++r) pending += peers[r].shm ? 1 : 1 + conns;
  auto fail = [&](Status s) {
    if (failure.ok()) failure = std::move(s);
  };
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < expected_in && failure.ok(); ++i) {
      auto [aec, sock] = co_await acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
      if (aec) {
        fail(Status(StatusCode::kIoError, "bootstrap: accept: " + aec.message()));
        co_return;
      }
      Result<Frame> f = co_await net::ReadFrame(sock, 1024, deadline, "a connecting peer");
      if (!f.ok() || f->header.type != kHello) {
        --i;  // not one of ours (a stray or stale connection): drop it
        continue;
      }
      Result<Hello> h = DecodeHello(f->payload);
      if (!h.ok() || h->nonce != nonce || h->rank <= static_cast<uint32_t>(me) ||
          h->rank >= static_cast<uint32_t>(n)) {
        --i;  // another generation or communicator: never mix
        continue;
      }
      if (h->purpose >= kData + conns) {
        fail(Status(StatusCode::kProtocolError, "bootstrap: " + RankName(h->rank) + " opened data connection " +
                                                    std::to_string(h->purpose - kData) + " of " + std::to_string(conns)));
        co_return;
      }
      auto& slot = h->purpose >= kData ? data[h->rank][h->purpose - kData] : ctrl[h->rank];
      if (slot) {
        fail(Status(StatusCode::kProtocolError, "bootstrap: two connections from " + RankName(h->rank)));
        co_return;
      }
      boost::system::error_code ignored;
      sock.set_option(tcp::no_delay(true), ignored);
      slot.emplace(std::move(sock));
      --pending;
    }
  }, asio::detached);
  for (int r = 0; r < me; ++r) {
    for (int p = 0; p <= conns; ++p) {
      const uint8_t purpose = p == 0 ? uint8_t{kControl} : static_cast<uint8_t>(kData + p - 1);
      if (purpose >= kData && peers[r].shm) continue;
      asio::co_spawn(io, [&, r, purpose]() -> asio::awaitable<void> {
        auto sock = co_await net::Connect(addrs[r].host, addrs[r].port, deadline);
        if (!sock.ok()) {
          fail(Status(StatusCode::kPeerFailed, "bootstrap: cannot reach " + RankName(r) + ": " +
                                                   sock.status().ToString()));
          co_return;
        }
        auto hello = EncodeHello(Hello{nonce, static_cast<uint32_t>(me), purpose});
        Status s = co_await net::WriteFrame(*sock, kHello, 0, 0, hello, deadline, RankName(r));
        if (!s.ok()) {
          fail(Status(StatusCode::kPeerFailed, "bootstrap: " + s.ToString()));
          co_return;
        }
        (purpose >= kData ? data[r][purpose - kData] : ctrl[r]).emplace(std::move(*sock));
        --pending;
      }, asio::detached);
    }
  }
  while (pending > 0 && failure.ok()) {
    if (mesh_.aborted()) {
      failure = Status(StatusCode::kCommAborted, "bootstrap aborted");
      break;
    }
    if (deadline.Expired()) {
      std::string missing;
      for (int r = 0; r < n; ++r)
        if (r != me && (!ctrl[r] || (!peers[r].shm && !std::all_of(data[r].begin(), data[r].end(),
                                                                    [](auto& s) { return s.has_value(); }))))
          missing += (missing.empty() ? "" : ", ") + RankName(r);
      failure = Status(StatusCode::kPeerFailed, "bootstrap: no connection from " + missing +
                                                    " before the deadline");
      break;
    }
    io.run_for(std::chrono::milliseconds(50));
  }
  if (!failure.ok()) return failure;
  acceptor.close(ec);
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    peers[r].ctrl_fd = ctrl[r]->release();
    if (!peers[r].shm) {
      for (auto& s : data[r]) peers[r].data_fds.push_back(s->release());
      peers[r].data_fd = peers[r].data_fds[0];
    }
    fcntl(peers[r].ctrl_fd, F_SETFL, fcntl(peers[r].ctrl_fd, F_GETFL) | O_NONBLOCK);
    for (int fd : peers[r].data_fds) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  // 4. Map the same-host peers' segments, then a ready barrier; after it every peer has mapped
  // our segment and its name can go (nothing is left behind if a process is killed later).
  for (int r = 0; r < n; ++r) {
    if (r == me || !peers[r].shm) continue;
    ASSIGN_OR_RETURN(peers[r].segment,
                     OpenShmSegment(addrs[r].shm_name, n, opts_.shm_ring_bytes,
                                    opts_.shm_arena_bytes));
  }
  Status ready = mesh_.ControlBarrier(kReady, deadline);
  if (!shm_name.empty()) shm_unlink(shm_name.c_str());
  return ready;
}

// ---------------------------------------------------------------------------------------------
// Algorithms (run on whichever thread claimed the op).

struct Ctx {
  CpuComm& c;
  OpCtx& op;
  DataHeader h;  // the op's header template (seq, kind, dtype, count, reduce op, root)
  int rank() const { return c.rank(); }
  int size() const { return c.size(); }
  size_t esize() const { return DTypeSize(h.dtype); }
  Xfer Send(int peer, const void* p, size_t elems) const {
    Xfer x;
    x.peer = peer;
    x.send = true;
    x.header = h;
    x.header.bytes = elems * esize();
    x.data = static_cast<std::byte*>(const_cast<void*>(p));
    x.bytes = x.header.bytes;
    return x;
  }
  Xfer Recv(int peer, void* p, size_t elems) const {
    Xfer x = Send(peer, p, elems);
    x.send = false;
    return x;
  }
  Status Run(std::vector<Xfer>& xs) { return c.mesh().Exchange(op, xs); }
};

// Element range [begin, end) of block b when `count` is cut into n nearly equal blocks.
inline size_t BlockBegin(size_t count, int n, int b) {
  return count / n * b + std::min<size_t>(b, count % n);
}

std::byte* At(void* p, size_t elems, size_t esize) { return static_cast<std::byte*>(p) + elems * esize; }
const std::byte* At(const void* p, size_t elems, size_t esize) {
  return static_cast<const std::byte*>(p) + elems * esize;
}

// Ring reduce-scatter in place on `buf` over blocks given by `begin` (n+1 offsets): afterwards
// block r of rank r holds the reduction. Received data is reduced as it streams in.
Status RingReduceScatter(Ctx& cx, void* buf, const std::vector<size_t>& begin, std::vector<std::byte>& tmp) {
  const int n = cx.size(), r = cx.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const size_t es = cx.esize();
  const DType dt = cx.h.dtype;
  const ReduceOp op = static_cast<ReduceOp>(cx.h.reduce_op);
  for (int s = 0; s < n - 1; ++s) {
    int sb = ((r - s - 1) % n + n) % n, rb = ((r - s - 2) % n + n) % n;
    size_t scount = begin[sb + 1] - begin[sb], rcount = begin[rb + 1] - begin[rb];
    if (tmp.size() < rcount * es) tmp.resize(rcount * es);
    std::byte* dst = At(buf, begin[rb], es);
    std::vector<Xfer> xs{cx.Send(next, At(buf, begin[sb], es), scount), cx.Recv(prev, tmp.data(), rcount)};
    std::byte* t = tmp.data();
    xs[1].on_data = [=](size_t from, size_t to) {
      ReduceInto(dst + from, t + from, (to - from) / es, dt, op);
    };
    RETURN_IF_ERROR(cx.Run(xs));
  }
  return Status();
}

// Ring all-gather in place: block r of `buf` is ours; afterwards every block is filled.
Status RingAllGather(Ctx& cx, void* buf, const std::vector<size_t>& begin) {
  const int n = cx.size(), r = cx.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const size_t es = cx.esize();
  for (int s = 0; s < n - 1; ++s) {
    int sb = ((r - s) % n + n) % n, rb = ((r - s - 1) % n + n) % n;
    std::vector<Xfer> xs{cx.Send(next, At(buf, begin[sb], es), begin[sb + 1] - begin[sb]),
                         cx.Recv(prev, At(buf, begin[rb], es), begin[rb + 1] - begin[rb])};
    RETURN_IF_ERROR(cx.Run(xs));
  }
  return Status();
}

// Recursive doubling all-reduce in place (non-powers of two fold the extra ranks first).
Status RecursiveDoublingAllReduce(Ctx& cx, void* buf, size_t count) {
  const int n = cx.size(), r = cx.rank();
  const size_t es = cx.esize();
  const DType dt = cx.h.dtype;
  const ReduceOp op = static_cast<ReduceOp>(cx.h.reduce_op);
  // Scratch reused across ops on this thread (no page faults per op).
  thread_local std::vector<std::byte> tmp;
  if (tmp.size() < count * es) tmp.resize(count * es);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;
  int vr;  // rank in the power-of-two group, -1 when folded out
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      std::vector<Xfer> xs{cx.Send(r + 1, buf, count)};
      RETURN_IF_ERROR(cx.Run(xs));
      vr = -1;
    } else {
      std::vector<Xfer> xs{cx.Recv(r - 1, tmp.data(), count)};
      RETURN_IF_ERROR(cx.Run(xs));
      ReduceTo(buf, tmp.data(), buf, count, dt, op);  // lower rank's data first
      vr = r / 2;
    }
  } else {
    vr = r - rem;
  }
  if (vr >= 0) {
    auto real = [&](int v) { return v < rem ? v * 2 + 1 : v + rem; };
    for (int mask = 1; mask < p; mask <<= 1) {
      int partner = real(vr ^ mask);
      std::vector<Xfer> xs{cx.Send(partner, buf, count), cx.Recv(partner, tmp.data(), count)};
      RETURN_IF_ERROR(cx.Run(xs));
      if (partner < r) ReduceTo(buf, tmp.data(), buf, count, dt, op);
      else ReduceInto(buf, tmp.data(), count, dt, op);
    }
  }
  if (r < 2 * rem) {
    std::vector<Xfer> xs;
    if (r % 2 == 0) xs.push_back(cx.Recv(r + 1, buf, count));
    else xs.push_back(cx.Send(r - 1, buf, count));
    RETURN_IF_ERROR(cx.Run(xs));
  }
  return Status();
}

Status AllReduceAlgo(Ctx& cx, const void* send, void* recv, size_t count, size_t small_bytes) {
  const size_t es = cx.esize();
  const int n = cx.size();
  if (n > 1 && cx.c.mesh().all_shm()) return ArenaAllReduce(cx.c.mesh(), cx.op, cx.h, send, recv, small_bytes);
  if (send != recv && count) std::memcpy(recv, send, count * es);
  const ReduceOp op = static_cast<ReduceOp>(cx.h.reduce_op);
  if (n == 1) return Status();
  if (count * es <= small_bytes || count < static_cast<size_t>(n)) {
    RETURN_IF_ERROR(RecursiveDoublingAllReduce(cx, recv, count));
    FinishAverage(recv, count, cx.h.dtype, op, n);
    return Status();
  }
  std::vector<size_t> begin(n + 1);
  for (int b = 0; b <= n; ++b) begin[b] = BlockBegin(count, n, b);
  thread_local std::vector<std::byte> tmp;
  RETURN_IF_ERROR(RingReduceScatter(cx, recv, begin, tmp));
  const int r = cx.rank();
  FinishAverage(At(recv, begin[r], es), begin[r + 1] - begin[r], cx.h.dtype, op, n);
  return RingAllGather(cx, recv, begin);
}

// All-reduce and barrier straight from the Op's fields (no std::function on the latency path).
Status RunFastAllReduce(CpuComm& c, Op& op, OpCtx& octx) {
  Ctx cx{c, octx, {}};
  cx.h.kind = op.kind;
  cx.h.dtype = op.dtype;
  cx.h.reduce_op = static_cast<uint8_t>(op.rop);
  cx.h.seq = op.posted_step ? op.seq : c.NextSeq();
  cx.h.root_or_tag = 0;
  cx.h.count = op.count;
  octx.SetCollective(cx.h, c.rank());
  if (op.posted_step) return ArenaFinishSmall(c.mesh(), octx, cx.h, op.posted_step, op.send, op.recv);
  if (op.kind == OpKind::kBarrier) {
    uint8_t token = 1;
    if (cx.size() == 1) return Status();
    if (c.mesh().all_shm()) return ArenaAllReduce(c.mesh(), octx, cx.h, &token, &token, 1);
    return RecursiveDoublingAllReduce(cx, &token, 1);
  }
  return AllReduceAlgo(cx, op.send, op.recv, op.count, op.small_bytes);
}

// Binomial-tree broadcast from `root` of `count` elements in `buf`.
Status TreeBroadcast(Ctx& cx, void* buf, size_t count, int root) {
  const int n = cx.size(), r = cx.rank();
  const int vr = (r - root + n) % n;
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      std::vector<Xfer> xs{cx.Recv((vr - mask + root) % n, buf, count)};
      RETURN_IF_ERROR(cx.Run(xs));
      break;
    }
    mask <<= 1;
  }
  mask >>= 1;
  std::vector<Xfer> xs;
  for (; mask > 0; mask >>= 1)
    if (vr + mask < n) xs.push_back(cx.Send((vr + mask + root) % n, buf, count));
  return cx.Run(xs);
}

// Binomial-tree reduce to `root`; `buf` holds our contribution and, on the root, the result.
Status TreeReduce(Ctx& cx, void* buf, size_t count, int root) {
  const int n = cx.size(), r = cx.rank();
  const int vr = (r - root + n) % n;
  const size_t es = cx.esize();
  std::vector<std::byte> tmp(count * es);
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr & mask) {
      std::vector<Xfer> xs{cx.Send((vr - mask + root) % n, buf, count)};
      return cx.Run(xs);
    }
    if (vr + mask < n) {
      std::vector<Xfer> xs{cx.Recv((vr + mask + root) % n, tmp.data(), count)};
      RETURN_IF_ERROR(cx.Run(xs));
      ReduceInto(buf, tmp.data(), count, cx.h.dtype, static_cast<ReduceOp>(cx.h.reduce_op));
    }
  }
  return Status();
}

}  // namespace

// Consecutive p2p ops run as one exchange.
Status CpuComm::RunP2pGroup(std::vector<std::shared_ptr<Op>>& group, std::vector<OpCtx>& ctx) {
  std::vector<Xfer> xs;
  OpCtx all;
  all.kind = OpKind::kSend;
  all.what = "send/recv group";
  auto& peers = mesh_.peers();
  for (auto& op : group) {
    Xfer x;
    x.peer = op->peer;
    x.send = op->kind == OpKind::kSend;
    x.header.kind = OpKind::kSend;
    x.header.dtype = op->dtype;
    x.header.seq = x.send ? peers[op->peer].p2p_send_seq++ : peers[op->peer].p2p_recv_seq++;
    x.header.root_or_tag = op->tag;
    x.header.count = op->count;
    x.header.bytes = op->count * DTypeSize(op->dtype);
    x.data = static_cast<std::byte*>(op->buffer);
    x.bytes = x.header.bytes;
    xs.push_back(std::move(x));
  }
  Status s = mesh_.Exchange(all, xs);
  for (size_t i = 0; i < group.size(); ++i) {
    ctx[i].kind = group[i]->kind;
    (xs[i].send ? ctx[i].bytes_sent : ctx[i].bytes_received) = xs[i].done;
  }
  return s;
}

namespace {

// The public face: argument checks, then ops queued on the shared state.
class CpuCommunicator final : public Communicator {
 public:
  explicit CpuCommunicator(std::shared_ptr<CpuComm> c) : c_(std::move(c)) {}
  ~CpuCommunicator() override { c_->Shutdown(); }

  int rank() const override { return c_->rank(); }
  int size() const override { return c_->size(); }
  int64_t generation() const override { return c_->options().generation; }
  std::string_view backend() const override { return "cpu"; }
  Status WaitReady(Deadline d) override { return c_->WaitReady(d); }
  void Abort() override { c_->Abort(); }
  Status status() const override { return c_->status(); }
  CommStats stats() const override { return c_->stats(); }

  WorkHandle AllReduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op) override {
    if (auto e = CheckBuffers(count, send, recv); !e.ok()) return Done(e);
    const size_t small = c_->options().small_message_bytes;
    uint64_t step = 0;
    uint32_t seq = 0;
    Status result;
    const CpuComm::Issued issued = c_->TryPost(send, recv, count, dt, op, small, &step, &seq, &result);
    if (issued == CpuComm::Issued::kFinished) return result.ok() ? CpuComm::DoneOk() : Done(std::move(result));
    auto o = std::make_shared<Op>();
    o->posted_step = step;
    o->seq = seq;
    o->kind = OpKind::kAllReduce;
    o->fast = RunFastAllReduce;
    o->send = send;
    o->recv = recv;
    o->count = count;
    o->dtype = dt;
    o->rop = op;
    o->small_bytes = small;
    o->comm = c_;
    return issued == CpuComm::Issued::kPosted ? c_->QueuePosted(std::move(o)) : c_->EnqueueOp(std::move(o));
  }

  WorkHandle ReduceScatter(const void* send, void* recv, size_t rc, DType dt, ReduceOp op) override {
    if (auto e = CheckBuffers(rc, send, recv); !e.ok()) return Done(e);
    return Collective(OpKind::kReduceScatter, dt, op, rc, 0, [=](Ctx& cx) -> Status {
      const int n = cx.size(), r = cx.rank();
      const size_t es = cx.esize();
      if (n == 1) {
        if (send != recv && rc) std::memcpy(recv, send, rc * es);
        return Status();
      }
      std::vector<std::byte> work(rc * n * es), tmp;
      if (rc) std::memcpy(work.data(), send, work.size());
      std::vector<size_t> begin(n + 1);
      for (int b = 0; b <= n; ++b) begin[b] = rc * b;
      RETURN_IF_ERROR(RingReduceScatter(cx, work.data(), begin, tmp));
      if (rc) std::memcpy(recv, work.data() + begin[r] * es, rc * es);
      FinishAverage(recv, rc, cx.h.dtype, op, n);
      return Status();
    });
  }

  WorkHandle AllGather(const void* send, void* recv, size_t sc, DType dt) override {
    if (auto e = CheckBuffers(sc, send, recv); !e.ok()) return Done(e);
    return Collective(OpKind::kAllGather, dt, ReduceOp::kSum, sc, 0, [=](Ctx& cx) {
      const int n = cx.size(), r = cx.rank();
      std::vector<size_t> begin(n + 1);
      for (int b = 0; b <= n; ++b) begin[b] = sc * b;
      std::byte* own = At(recv, begin[r], cx.esize());
      if (own != send && sc) std::memcpy(own, send, sc * cx.esize());
      return RingAllGather(cx, recv, begin);
    });
  }

  WorkHandle AllGatherV(const void* send, void* recv, std::span<const size_t> counts, DType dt) override {
    if (counts.size() != static_cast<size_t>(size()))
      return Done(InvalidArgument("AllGatherV: counts has " + std::to_string(counts.size()) +
                                  " entries, the group has " + std::to_string(size())));
    std::vector<size_t> begin(counts.size() + 1, 0);
    for (size_t i = 0; i < counts.size(); ++i) begin[i + 1] = begin[i] + counts[i];
    if (auto e = CheckBuffers(begin.back(), send, recv); !e.ok()) return Done(e);
    return Collective(OpKind::kAllGather, dt, ReduceOp::kSum, begin.back(), 1, [=](Ctx& cx) {
      const int r = cx.rank();
      std::byte* own = At(recv, begin[r], cx.esize());
      size_t mine = begin[r + 1] - begin[r];
      if (own != send && mine) std::memcpy(own, send, mine * cx.esize());
      return RingAllGather(cx, recv, begin);
    });
  }

  WorkHandle Broadcast(const void* send, void* recv, size_t count, DType dt, int root) override {
    if (auto e = CheckRoot(root); !e.ok()) return Done(e);
    if (auto e = CheckBuffers(count, rank() == root ? send : recv, recv); !e.ok()) return Done(e);
    size_t small = c_->options().small_message_bytes;
    return Collective(OpKind::kBroadcast, dt, ReduceOp::kSum, count, root, [=](Ctx& cx) -> Status {
      const int n = cx.size(), r = cx.rank();
      const size_t es = cx.esize();
      if (r == root && send != recv && count) std::memcpy(recv, send, count * es);
      if (n == 1) return Status();
      if (count * es <= small || count < static_cast<size_t>(n)) return TreeBroadcast(cx, recv, count, root);
      // Scatter from the root, then a ring all-gather (van de Geijn).
      std::vector<size_t> begin(n + 1);
      for (int b = 0; b <= n; ++b) begin[b] = BlockBegin(count, n, b);
      std::vector<Xfer> xs;
      if (r == root) {
        for (int p = 0; p < n; ++p)
          if (p != root) xs.push_back(cx.Send(p, At(recv, begin[p], es), begin[p + 1] - begin[p]));
      } else {
        xs.push_back(cx.Recv(root, At(recv, begin[r], es), begin[r + 1] - begin[r]));
      }
      RETURN_IF_ERROR(cx.Run(xs));
      return RingAllGather(cx, recv, begin);
    });
  }

  WorkHandle Reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op, int root) override {
    if (auto e = CheckRoot(root); !e.ok()) return Done(e);
    if (auto e = CheckBuffers(count, send, rank() == root ? recv : send); !e.ok()) return Done(e);
    size_t small = c_->options().small_message_bytes;
    return Collective(OpKind::kReduce, dt, op, count, root, [=](Ctx& cx) -> Status {
      const int n = cx.size(), r = cx.rank();
      const size_t es = cx.esize();
      if (count * es <= small || count < static_cast<size_t>(n)) {
        std::vector<std::byte> work(count * es);
        if (count) std::memcpy(work.data(), send, count * es);
        RETURN_IF_ERROR(TreeReduce(cx, work.data(), count, root));
        if (r == root) {
          FinishAverage(work.data(), count, cx.h.dtype, op, n);
          if (count) std::memcpy(recv, work.data(), count * es);
        }
        return Status();
      }
      // Ring reduce-scatter, then every rank sends its reduced block to the root.
      std::vector<size_t> begin(n + 1);
      for (int b = 0; b <= n; ++b) begin[b] = BlockBegin(count, n, b);
      std::vector<std::byte> work(count * es), tmp;
      std::memcpy(work.data(), send, count * es);
      RETURN_IF_ERROR(RingReduceScatter(cx, work.data(), begin, tmp));
      std::vector<Xfer> xs;
      if (r == root) {
        for (int p = 0; p < n; ++p)
          if (p != root) xs.push_back(cx.Recv(p, At(recv, begin[p], es), begin[p + 1] - begin[p]));
        std::memcpy(At(recv, begin[r], es), work.data() + begin[r] * es, (begin[r + 1] - begin[r]) * es);
      } else {
        xs.push_back(cx.Send(root, work.data() + begin[r] * es, begin[r + 1] - begin[r]));
      }
      RETURN_IF_ERROR(cx.Run(xs));
      if (r == root) FinishAverage(recv, count, cx.h.dtype, op, n);
      return Status();
    });
  }

  WorkHandle Gather(const void* send, void* recv, size_t sc, DType dt, int root) override {
    if (auto e = CheckRoot(root); !e.ok()) return Done(e);
    if (auto e = CheckBuffers(sc, send, rank() == root ? recv : send); !e.ok()) return Done(e);
    return Collective(OpKind::kGather, dt, ReduceOp::kSum, sc, root, [=](Ctx& cx) {
      const int n = cx.size(), r = cx.rank();
      const size_t es = cx.esize();
      std::vector<Xfer> xs;
      if (r == root) {
        std::byte* own = At(recv, sc * r, es);
        if (own != send && sc) std::memcpy(own, send, sc * es);
        for (int p = 0; p < n; ++p)
          if (p != root) xs.push_back(cx.Recv(p, At(recv, sc * p, es), sc));
      } else {
        xs.push_back(cx.Send(root, send, sc));
      }
      return cx.Run(xs);
    });
  }

  WorkHandle Scatter(const void* send, void* recv, size_t rc, DType dt, int root) override {
    if (auto e = CheckRoot(root); !e.ok()) return Done(e);
    if (auto e = CheckBuffers(rc, rank() == root ? send : recv, recv); !e.ok()) return Done(e);
    return Collective(OpKind::kScatter, dt, ReduceOp::kSum, rc, root, [=](Ctx& cx) {
      const int n = cx.size(), r = cx.rank();
      const size_t es = cx.esize();
      std::vector<Xfer> xs;
      if (r == root) {
        const std::byte* own = At(send, rc * r, es);
        if (own != recv && rc) std::memmove(recv, own, rc * es);
        for (int p = 0; p < n; ++p)
          if (p != root) xs.push_back(cx.Send(p, At(send, rc * p, es), rc));
      } else {
        xs.push_back(cx.Recv(root, recv, rc));
      }
      return cx.Run(xs);
    });
  }

  WorkHandle AllToAll(const void* send, void* recv, size_t cpr, DType dt) override {
    if (auto e = CheckBuffers(cpr, send, recv); !e.ok()) return Done(e);
    if (send == recv && cpr) return Done(InvalidArgument("AllToAll cannot run in place"));
    return Collective(OpKind::kAllToAll, dt, ReduceOp::kSum, cpr, 0, [=](Ctx& cx) -> Status {
      const int n = cx.size(), r = cx.rank();
      const size_t es = cx.esize();
      if (cpr) std::memcpy(At(recv, cpr * r, es), At(send, cpr * r, es), cpr * es);
      for (int s = 1; s < n; ++s) {
        int to = (r + s) % n, from = (r - s + n) % n;
        std::vector<Xfer> xs{cx.Send(to, At(send, cpr * to, es), cpr),
                             cx.Recv(from, At(recv, cpr * from, es), cpr)};
        RETURN_IF_ERROR(cx.Run(xs));
      }
      return Status();
    });
  }

  WorkHandle Send(const void* buf, size_t count, DType dt, int peer, uint32_t tag) override {
    return P2p(OpKind::kSend, const_cast<void*>(buf), count, dt, peer, tag);
  }
  WorkHandle Recv(void* buf, size_t count, DType dt, int peer, uint32_t tag) override {
    return P2p(OpKind::kRecv, buf, count, dt, peer, tag);
  }

  WorkHandle Barrier() override {
    auto o = std::make_shared<Op>();
    o->kind = OpKind::kBarrier;
    o->fast = RunFastAllReduce;  // a one-byte max all-reduce
    o->count = 1;
    o->dtype = DType::kU8;
    o->rop = ReduceOp::kMax;
    o->comm = c_;
    return c_->EnqueueOp(std::move(o));
  }

  Result<std::unique_ptr<Communicator>> Split(int color, int key, Deadline deadline) override {
    const int n = size();
    std::vector<int32_t> mine{color, key}, all(2 * n);
    auto w = AllGather(mine.data(), all.data(), 2, DType::kI32);
    RETURN_IF_ERROR(w->Wait(deadline).WithContext("Split: exchanging colors"));
    if (color < 0) return std::unique_ptr<Communicator>();
    std::vector<std::pair<int, int>> members;  // (key, old rank)
    for (int r = 0; r < n; ++r)
      if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
    std::sort(members.begin(), members.end());
    int new_rank = 0;
    for (size_t i = 0; i < members.size(); ++i)
      if (members[i].second == rank()) new_rank = static_cast<int>(i);
    CommOptions o = c_->options();
    o.rank = new_rank;
    o.size = static_cast<int>(members.size());
    std::string scope = c_->scope() + "split" + std::to_string(split_seq_++) + "/color" +
                        std::to_string(color) + "/";
    auto sub = std::make_shared<CpuComm>(std::move(o), std::move(scope));
    sub->Start();
    return std::unique_ptr<Communicator>(new CpuCommunicator(std::move(sub)));
  }

 private:
  static WorkHandle Done(Status s) { return std::make_shared<DoneWork>(std::move(s)); }

  Status CheckRoot(int root) const {
    if (root < 0 || root >= size())
      return InvalidArgument("root " + std::to_string(root) + " is not a rank of a group of " +
                             std::to_string(size()));
    return Status();
  }
  static Status CheckBuffers(size_t count, const void* a, const void* b) {
    if (count && (!a || !b)) return InvalidArgument("null buffer for a non-empty op");
    return Status();
  }

  WorkHandle Collective(OpKind kind, DType dt, ReduceOp op, size_t count, int root,
                        std::function<Status(Ctx&)> algo) {
    auto c = c_;
    return c_->Enqueue(kind, false, [c, kind, dt, op, count, root, algo = std::move(algo)](OpCtx& octx) {
      Ctx cx{*c, octx, {}};
      cx.h.kind = kind;
      cx.h.dtype = dt;
      cx.h.reduce_op = static_cast<uint8_t>(op);
      cx.h.seq = c->NextSeq();
      cx.h.root_or_tag = static_cast<uint32_t>(root);
      cx.h.count = count;
      octx.SetCollective(cx.h, c->rank());
      return algo(cx);
    });
  }

  WorkHandle P2p(OpKind kind, void* buf, size_t count, DType dt, int peer, uint32_t tag) {
    if (peer < 0 || peer >= size() || peer == rank())
      return Done(InvalidArgument("peer " + std::to_string(peer) + " is not another rank of a group of " +
                                  std::to_string(size())));
    if (auto e = CheckBuffers(count, buf, buf); !e.ok()) return Done(e);
    // The worker groups consecutive p2p ops; the Op carries the transfer.
    return c_->EnqueueP2p(kind, buf, count, dt, peer, tag);
  }

  std::shared_ptr<CpuComm> c_;
  int split_seq_ = 0;
};

}  // namespace
}  // namespace tcp

Result<std::unique_ptr<Communicator>> NewCpuCommunicator(CommOptions options) {
  if (!options.store) return InvalidArgument("CommOptions.store is required");
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size)
    return InvalidArgument("bad rank " + std::to_string(options.rank) + " of size " +
                           std::to_string(options.size));
  if (options.size > tcp::kMaxCpuRanks)
    return InvalidArgument("the CPU backend supports at most " + std::to_string(tcp::kMaxCpuRanks) +
                           " ranks");
  if (options.shm_ring_bytes < 4096) return InvalidArgument("shm_ring_bytes must be at least 4096");
  if (options.tcp_connections_per_peer < 1 || options.tcp_connections_per_peer > tcp::kMaxDataConnections)
    return InvalidArgument("tcp_connections_per_peer must be 1.." + std::to_string(tcp::kMaxDataConnections));
  if (options.shm_arena_bytes != 0 && options.shm_arena_bytes < 4096)
    return InvalidArgument("shm_arena_bytes must be 0 (off) or at least 4096");
  std::string scope = StoreScope(options.job, options.generation) + "comm/" + options.name + "/";
  auto c = std::make_shared<tcp::CpuComm>(std::move(options), std::move(scope));
  c->Start();
  return std::unique_ptr<Communicator>(new tcp::CpuCommunicator(std::move(c)));
}

}  // namespace rt::comm
