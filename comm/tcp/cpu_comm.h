// The state of one CPU communicator, shared by its facade (comm/tcp/cpu_communicator.cc), its
// worker thread and its work handles: the op queue, the ops as work handles, the worker that
// bootstraps the mesh and then runs the ops nobody waits for, failure and byte accounting.
// Internal to comm/tcp.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/deadline.h"
#include "base/status.h"
#include "comm/communicator.h"
#include "comm/tcp/mesh.h"

namespace rt::comm::tcp {

class CpuComm;

// One queued op; it is also the op's work handle (one allocation per op). The fields are set
// by the facade before the op is queued and read by whichever thread runs it; `done` and
// `result` are guarded by the communicator's mutex.
struct Op final : Work {
  // Runs queued ops on the calling thread until this one is done (CpuComm::WaitFor).
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

// A completed work handle (argument errors, size-1 shortcuts).
class DoneWork final : public Work {
 public:
  explicit DoneWork(Status s) : status_(std::move(s)) {}
  Status Wait(Deadline) override { return status_; }
  bool Done() const override { return true; }

 private:
  Status status_;
};

// The state shared by the communicator facade, its worker thread and work handles. Ops run one
// at a time, in queue order, on whichever thread claims them: a caller waiting on an op runs the
// queue itself up to that op (no thread handoff); the worker runs the ops nobody waits for (it
// polls every kWorkerPollMs). The first failed op fails the communicator: every queued and later
// op completes with that status. Thread-safe unless a method says otherwise.
class CpuComm : public std::enable_shared_from_this<CpuComm> {
 public:
  // `scope` is the communicator's key prefix in options.store (bootstrap).
  CpuComm(CommOptions options, std::string scope);

  // Starts the worker thread, which bootstraps the mesh, then runs ops. Call once, on an object
  // owned by a shared_ptr.
  void Start();

  // Stops the worker and closes every connection; called by the facade's destructor. When the
  // communicator is ready, healthy and idle its peers are told goodbye; otherwise it fails with
  // CommAborted first (queued ops complete with it) and the mesh is aborted.
  void Shutdown();

  const CommOptions& options() const { return opts_; }
  const std::string& scope() const { return scope_; }
  int rank() const { return opts_.rank; }
  int size() const { return opts_.size; }
  Mesh& mesh() { return mesh_; }
  // The next collective number. On the thread running ops only (or under mu_ while nothing
  // runs: TryPost).
  uint32_t NextSeq() { return seq_++; }

  // Queues a collective op that runs `run`. Returns its handle; on a failed communicator the op
  // is already complete with the failure.
  WorkHandle Enqueue(OpKind kind, std::function<Status(OpCtx&)> run);

  // Queues a prepared collective op (op->comm already set: the facade's reference is copied,
  // cheaper than shared_from_this()). As Enqueue otherwise.
  WorkHandle EnqueueOp(std::shared_ptr<Op> op);

  // Queues a send or receive of `count` elements of `buf` with `peer` (a transfer of the p2p
  // group it runs in). A send that fits the peer's shared-memory ring wakes the worker at once.
  WorkHandle EnqueueP2p(OpKind kind, void* buf, size_t count, DType dt, int peer, uint32_t tag);

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
                 size_t small_bytes, uint64_t* step, uint32_t* seq, Status* result);

  // A completed, successful work handle for the ops TryPost finished: it owns nothing (a
  // process-wide object that is never destroyed), so handing it out and dropping it costs no
  // allocation and no reference count.
  static WorkHandle DoneOk();

  // Queues the op TryPost posted (posted_step and seq set) at the front and releases the queue.
  WorkHandle QueuePosted(std::shared_ptr<Op> op);

  // Runs queued ops (claimed in order) until `op` is done or the deadline passes. Returns the
  // op's status; DeadlineExceeded naming the op when the deadline passes first (the op stays
  // queued).
  Status WaitFor(Op* op, Deadline deadline);

  // Whether `op` has completed.
  bool IsDone(const Op* op);

  // Waits until bootstrap has finished. Returns its status; DeadlineExceeded when it has not
  // finished before `deadline`.
  Status WaitReady(Deadline deadline);

  // Fails the communicator with CommAborted ("<description> aborted by Abort()") and wakes
  // every thread blocked in the mesh; then aborts every child still alive (AddChild).
  void Abort();

  // Registers `child`, a communicator Split from this one: Abort() aborts it too ("aborted with
  // its parent <name>"), at once when this one was aborted already. Keeps no child alive.
  void AddChild(const std::shared_ptr<CpuComm>& child);

  // "communicator world/tp (rank 1 of 2, generation 3)": how abort errors name it.
  std::string Describe() const;

  // The failure that failed the communicator (OK while healthy).
  Status status() const;

  // Ops and bytes counted so far.
  CommStats stats() const;

 private:
  static constexpr int kWorkerPollMs = 2;

  // Whether an op may be claimed now. REQUIRES mu_.
  bool CanClaimLocked() const { return ready_ && !running_ && !queue_.empty(); }

  // True when a send of `bytes` to `peer` goes through a shared-memory ring with room for four
  // such messages (their headers included), so it completes without waiting for the receiver
  // unless the receiver leaves that many unread. REQUIRES mu_.
  bool EagerSendLocked(int peer, size_t bytes);

  // Claims the front op (plus following p2p ops, as one group), runs it unlocked, completes it.
  // REQUIRES mu_ held through `lock` (released while the op runs).
  void RunClaimedLocked(std::unique_lock<std::mutex>& lock);

  // Runs consecutive p2p ops as one exchange; fills each op's byte counts in `ctx`.
  Status RunP2pGroup(std::vector<std::shared_ptr<Op>>& group, std::vector<OpCtx>& ctx);

  // Fails the communicator with `reason` (CommAborted), wakes its waiters and its mesh, then
  // aborts its children.
  void AbortWith(std::string reason);

  // An op's CommAborted status `s` once the communicator was aborted: `s` with the abort's own
  // message appended, so the op's error names the communicator. Other statuses unchanged.
  // REQUIRES mu_.
  Status NameAbortLocked(Status s) const;

  // Completes `op` with the communicator's failure (counted as an op that moved no bytes).
  // REQUIRES mu_.
  void FailOpLocked(Op& op);

  // Fails the communicator with `s` unless it has failed already, completes every queued op
  // with the failure and ends a pending bootstrap with it. REQUIRES mu_.
  void FailLocked(Status s);

  // Adds one op of `kind` and what its context counted to the stats. REQUIRES mu_.
  void CountOp(OpKind kind, const OpCtx& ctx);

  // The worker thread: bootstrap, then run unclaimed ops until Shutdown().
  void WorkerMain();

  CommOptions opts_;
  std::string scope_;
  Mesh mesh_;
  std::thread worker_;
  uint32_t seq_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;         // waiters: an op completed, bootstrap finished, abort
  std::condition_variable worker_cv_;  // the worker: stop or abort (it also polls)
  std::deque<std::shared_ptr<Op>> queue_;
  bool running_ = false;
  bool ready_ = false;
  bool stopping_ = false;
  bool bootstrap_done_ = false;
  Status bootstrap_status_;
  Status failed_;
  bool aborted_ = false;                          // Abort() ran (directly or by the parent)
  std::vector<std::weak_ptr<CpuComm>> children_;  // AddChild
  CommStats stats_;
};

}  // namespace rt::comm::tcp
