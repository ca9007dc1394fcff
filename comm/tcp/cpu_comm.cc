// The state of a CPU communicator: the op queue, work handles and the worker thread
// (comm/tcp/cpu_comm.h).
#include "comm/tcp/cpu_comm.h"

#include "base/log.h"
#include "comm/tcp/arena.h"
#include "comm/tcp/bootstrap.h"

namespace rt::comm::tcp {

Status Op::Wait(Deadline deadline) { return comm->WaitFor(this, deadline); }
bool Op::Done() const { return comm->IsDone(this); }

CpuComm::CpuComm(CommOptions options, std::string scope)
    : opts_(std::move(options)),
      scope_(std::move(scope)),
      mesh_(opts_.rank, opts_.size, opts_.op_timeout) {}

void CpuComm::Start() {
  worker_ = std::thread([self = shared_from_this()] { self->WorkerMain(); });
}

void CpuComm::Shutdown() {
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

WorkHandle CpuComm::Enqueue(OpKind kind, std::function<Status(OpCtx&)> run) {
  auto op = std::make_shared<Op>();
  op->kind = kind;
  op->run = std::move(run);
  op->comm = shared_from_this();
  return EnqueueOp(std::move(op));
}

WorkHandle CpuComm::EnqueueOp(std::shared_ptr<Op> op) {
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

WorkHandle CpuComm::EnqueueP2p(OpKind kind, void* buf, size_t count, DType dt, int peer,
                               uint32_t tag) {
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

CpuComm::Issued CpuComm::TryPost(const void* send, void* recv, size_t count, DType dt, ReduceOp rop,
                                 size_t small_bytes, uint64_t* step, uint32_t* seq,
                                 Status* result) {
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
  const bool all_posted =
      count * DTypeSize(dt) <= kArenaInlineBytes && ArenaSmallPosted(mesh_, *step);
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

WorkHandle CpuComm::DoneOk() {
  static DoneWork* const done = new DoneWork(Status());
  return WorkHandle(WorkHandle(), done);
}

WorkHandle CpuComm::QueuePosted(std::shared_ptr<Op> op) {
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

Status CpuComm::WaitFor(Op* op, Deadline deadline) {
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

bool CpuComm::IsDone(const Op* op) {
  std::lock_guard lock(mu_);
  return op->done;
}

Status CpuComm::WaitReady(Deadline deadline) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_until(lock, deadline.when(), [&] { return ready_ || bootstrap_done_; }))
    return DeadlineExceeded(RankName(opts_.rank) + ": bootstrap not finished before the deadline");
  return bootstrap_status_;
}

void CpuComm::Abort() { AbortWith(Describe() + " aborted by Abort()"); }

void CpuComm::AbortWith(std::string reason) {
  std::vector<std::shared_ptr<CpuComm>> children;
  {
    std::lock_guard lock(mu_);
    FailLocked(Status(StatusCode::kCommAborted, std::move(reason)));
    aborted_ = true;
    for (const std::weak_ptr<CpuComm>& w : children_)
      if (std::shared_ptr<CpuComm> c = w.lock()) children.push_back(std::move(c));
    children_.clear();
  }
  mesh_.Abort();
  cv_.notify_all();
  worker_cv_.notify_all();
  for (const std::shared_ptr<CpuComm>& c : children)
    c->AbortWith(c->Describe() + " aborted with its parent " + opts_.name);
}

void CpuComm::AddChild(const std::shared_ptr<CpuComm>& child) {
  {
    std::lock_guard lock(mu_);
    if (!aborted_) {
      std::erase_if(children_, [](const std::weak_ptr<CpuComm>& w) { return w.expired(); });
      children_.push_back(child);
      return;
    }
  }
  child->AbortWith(child->Describe() + " aborted with its parent " + opts_.name);
}

std::string CpuComm::Describe() const {
  return "communicator " + opts_.name + " (" + RankName(opts_.rank) + " of " +
         std::to_string(opts_.size) + ", generation " + std::to_string(opts_.generation) + ")";
}

Status CpuComm::NameAbortLocked(Status s) const {
  if (!aborted_ || s.code() != StatusCode::kCommAborted ||
      failed_.code() != StatusCode::kCommAborted || s.message() == failed_.message())
    return s;
  return Status(StatusCode::kCommAborted,
                std::string(s.message()) + " (" + std::string(failed_.message()) + ")");
}

Status CpuComm::status() const {
  std::lock_guard lock(mu_);
  return failed_;
}

CommStats CpuComm::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

bool CpuComm::EagerSendLocked(int peer, size_t bytes) {
  if (!ready_) return false;
  const Peer& p = mesh_.peers()[static_cast<size_t>(peer)];
  return p.shm && 4 * (bytes + kDataHeaderSize) <= mesh_.ring_bytes();
}

void CpuComm::RunClaimedLocked(std::unique_lock<std::mutex>& lock) {
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
    s = NameAbortLocked(std::move(s));
    if (!s.ok()) FailLocked(s);
    op->done = true;
    op->result = std::move(s);
    CountOp(op->kind, ctx);
    cv_.notify_all();
    return;
  }
  // A p2p op and the p2p ops queued right behind it: one group, one exchange.
  std::vector<std::shared_ptr<Op>> group{queue_.front()};
  queue_.pop_front();
  while (!queue_.empty() && queue_.front()->p2p) {
    group.push_back(queue_.front());
    queue_.pop_front();
  }
  running_ = true;
  Status s = failed_;
  lock.unlock();
  std::vector<OpCtx> ctx(group.size());
  if (s.ok()) {
    s = RunP2pGroup(group, ctx);
    if (!s.ok() && s.code() != StatusCode::kCommAborted)
      mesh_.SendAbortNotice(RankName(opts_.rank) + ": " + s.ToString());
  }
  lock.lock();
  running_ = false;
  s = NameAbortLocked(std::move(s));
  if (!s.ok()) FailLocked(s);
  for (size_t i = 0; i < group.size(); ++i) {
    group[i]->done = true;
    group[i]->result = s;
    CountOp(group[i]->kind, ctx[i]);
  }
  cv_.notify_all();
}

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

void CpuComm::FailOpLocked(Op& op) {
  op.done = true;
  op.result = failed_;
  CountOp(op.kind, OpCtx{});
}

void CpuComm::FailLocked(Status s) {
  if (failed_.ok()) failed_ = std::move(s);
  for (auto& op : queue_) FailOpLocked(*op);
  queue_.clear();
  if (!bootstrap_done_) {
    bootstrap_done_ = true;
    bootstrap_status_ = failed_;
  }
}

void CpuComm::CountOp(OpKind kind, const OpCtx& ctx) {
  auto& b = stats_.per_op[static_cast<size_t>(kind)];
  ++b.ops;
  b.bytes_sent += ctx.bytes_sent;
  b.bytes_received += ctx.bytes_received;
  stats_.single_copy_reduced_bytes += ctx.single_copy_reduced_bytes;
}

void CpuComm::WorkerMain() {
  Status s = BootstrapMesh(opts_, scope_, mesh_);
  if (!s.ok() && s.code() != StatusCode::kCommAborted)
    LOG_WARN("comm {} {}: bootstrap failed: {}", scope_, RankName(opts_.rank), s.ToString());
  {
    std::lock_guard lock(mu_);
    if (!bootstrap_done_) {
      bootstrap_done_ = true;
      bootstrap_status_ = s;
    }
    if (!s.ok())
      FailLocked(s);
    else if (failed_.ok())
      ready_ = true;
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

}  // namespace rt::comm::tcp
