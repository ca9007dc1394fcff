// The NCCL backend: a thin adapter from the Communicator interface to NCCL. Built only with
// RINGTRAIN_CUDA. Shares the Store bootstrap, deadlines and error naming with the CPU backend:
//  - bootstrap: rank 0 publishes ncclUniqueId under the communicator's store scope; every rank
//    calls ncclCommInitRankConfig non-blocking (config.blocking = 0) and polls
//    ncclCommGetAsyncError until it leaves ncclInProgress, within bootstrap_timeout (then
//    ncclCommAbort). Bootstrap runs on a background thread; ops issued before it finishes wait
//    for it inside the issuing call (bounded by bootstrap_timeout).
//  - ops: enqueued on the communicator's own CUDA stream; a CUDA event recorded after each op is
//    its completion. Work::Wait polls the event and ncclCommGetAsyncError; an op that has not
//    completed op_timeout after it was issued aborts the communicator (ncclCommAbort) and fails
//    with PeerFailed. Abort() calls ncclCommAbort from any thread, on this communicator and on
//    every communicator Split from it that is still alive (and theirs).
//  - a communicator of one rank calls no NCCL op and records no event: every collective is the
//    identity, so an op is at most a device copy (out of place) enqueued on the calling thread's
//    current stream (kernels/cuda/stream.h), and its Work is done at once. Waiting on it costs no
//    host synchronisation; later work on that stream sees the result. Send/Recv to itself still
//    go through NCCL. (This also keeps ncclAvg's one-rank path away: NCCL 2.28.3 left the last
//    element of a float average of 4097 elements unwritten, seen on an H100.)
//  - NCCL does not say which peer failed: errors name this rank, the op and NCCL's last error.
//  - byte accounting follows the ring volume formulas (NCCL does not report bytes).
//  - tags of Send/Recv are not carried by NCCL (ordering alone matches them).
#include <cuda_runtime.h>
#include <nccl.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "kernels/cuda/stream.h"

namespace rt::comm {
namespace {

std::string RankName(int r) { return "rank " + std::to_string(r); }

Status NcclStatus(ncclResult_t r, ncclComm_t comm, std::string_view what,
                  SourceLocation where = SourceLocation::current()) {
  std::string m = std::string(what) + ": " + ncclGetErrorString(r);
  if (comm) {
    const char* last = ncclGetLastError(comm);
    if (last && *last) m += std::string(" (") + last + ")";
  }
  StatusCode code = r == ncclRemoteError || r == ncclSystemError ? StatusCode::kPeerFailed
                                                                 : StatusCode::kNcclError;
  return ForeignError(code, m, where);
}

Status CudaStatus(cudaError_t e, std::string_view what,
                  SourceLocation where = SourceLocation::current()) {
  return ForeignError(StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e),
                      where);
}

ncclDataType_t NcclType(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kU8:
      return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

// Waits until a non-blocking NCCL call on `comm` leaves ncclInProgress.
Status WaitNccl(ncclComm_t comm, Deadline deadline, std::string_view what) {
  while (true) {
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &async);
    if (r != ncclSuccess) return NcclStatus(r, comm, what);
    if (async == ncclSuccess) return Status();
    if (async != ncclInProgress) return NcclStatus(async, comm, what);
    if (deadline.Expired())
      return DeadlineExceeded(std::string(what) + ": not finished before the deadline");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// The communicator's CUDA stream. Created blocking (not cudaStreamNonBlocking) on purpose: it
// then synchronises implicitly with the legacy default stream, on which kernels/ enqueues its ops
// unless a caller set another stream, so a collective reads what the kernels before it wrote and
// the kernels after it see its result — without the caller recording events.
Status CreateCommStream(cudaStream_t* stream) {
  const cudaError_t e = cudaStreamCreateWithFlags(stream, cudaStreamDefault);
  return e == cudaSuccess ? Status() : CudaStatus(e, "cudaStreamCreate");
}

// State shared by the communicator and its work handles.
struct State {
  CommOptions opts;
  std::string scope;
  int device = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
  Status failed;  // sticky
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool aborted_comm = false;
  CommStats stats;
  void* scratch = nullptr;                     // 4 bytes of device memory for Barrier
  bool aborted = false;                        // AbortWith ran
  std::vector<std::weak_ptr<State>> children;  // communicators Split from this one

  // "communicator world/tp (rank 1 of 2, generation 3)".
  std::string Describe() const {
    return "communicator " + opts.name + " (" + RankName(opts.rank) + " of " +
           std::to_string(opts.size) + ", generation " + std::to_string(opts.generation) + ")";
  }

  // Fails with CommAborted (`reason`) and ncclCommAbort, then does the same to every child.
  void AbortWith(std::string reason) {
    std::vector<std::shared_ptr<State>> alive;
    {
      std::lock_guard lock(mu);
      aborted = true;
      for (const std::weak_ptr<State>& w : children)
        if (std::shared_ptr<State> c = w.lock()) alive.push_back(std::move(c));
      children.clear();
    }
    Fail(Status(StatusCode::kCommAborted, std::move(reason)));
    for (const std::shared_ptr<State>& c : alive)
      c->AbortWith(c->Describe() + " aborted with its parent " + opts.name);
  }

  // Registers a communicator Split from this one (aborted at once when this one was).
  void AddChild(const std::shared_ptr<State>& child) {
    {
      std::lock_guard lock(mu);
      if (!aborted) {
        std::erase_if(children, [](const std::weak_ptr<State>& w) { return w.expired(); });
        children.push_back(child);
        return;
      }
    }
    child->AbortWith(child->Describe() + " aborted with its parent " + opts.name);
  }

  void Fail(Status s) {
    std::lock_guard lock(mu);
    if (failed.ok()) failed = std::move(s);
    if (comm && !aborted_comm) {
      ncclCommAbort(comm);  // safe from any thread for a non-blocking communicator
      aborted_comm = true;
    }
    cv.notify_all();
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<State> st, cudaEvent_t ev, std::string what)
      : st_(std::move(st)), ev_(ev), what_(std::move(what)), issued_(MonoClock::now()) {}
  ~NcclWork() override {
    if (ev_) cudaEventDestroy(ev_);
  }
  Status Wait(Deadline deadline) override {
    while (true) {
      {
        std::lock_guard lock(st_->mu);
        if (!st_->failed.ok()) return st_->failed;
      }
      cudaError_t q = cudaEventQuery(ev_);
      if (q == cudaSuccess) return Status();
      if (q != cudaErrorNotReady) {
        Status s = CudaStatus(q, what_);
        st_->Fail(s);
        return s;
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(st_->comm, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        Status s = NcclStatus(async, st_->comm, what_);
        st_->Fail(s);
        return s;
      }
      if (MonoClock::now() - issued_ > st_->opts.op_timeout) {
        Status s(StatusCode::kPeerFailed, what_ + ": no completion within " +
                                              std::to_string(st_->opts.op_timeout.count()) +
                                              " ms (a peer died or fell silent); NCCL aborted");
        st_->Fail(s);
        return s;
      }
      if (deadline.Expired())
        return DeadlineExceeded(what_ + " not finished before the caller's deadline");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  bool Done() const override { return cudaEventQuery(ev_) == cudaSuccess; }

 private:
  std::shared_ptr<State> st_;
  cudaEvent_t ev_;
  std::string what_;
  MonoTime issued_;
};

class DoneWork final : public Work {
 public:
  explicit DoneWork(Status s) : s_(std::move(s)) {}
  Status Wait(Deadline) override { return s_; }
  bool Done() const override { return true; }

 private:
  Status s_;
};

Result<Bytes> GetAbortable(Store& store, const std::string& key, Deadline deadline, State& st) {
  while (true) {
    {
      std::lock_guard lock(st.mu);
      if (!st.failed.ok()) return st.failed;
    }
    Result<Bytes> r = store.Get(key, Deadline::AfterMs(100).Min(deadline));
    if (r.ok()) return r;
    if (r.status().code() != StatusCode::kDeadlineExceeded || deadline.Expired())
      return r.status().WithContext("NCCL bootstrap: store key " + key);
  }
}

class NcclCommunicator final : public Communicator {
 public:
  // A fresh communicator: bootstraps through the store in the background.
  explicit NcclCommunicator(std::shared_ptr<State> st) : st_(std::move(st)) {
    thread_ = std::thread([st = st_] {
      Status s = Bootstrap(*st);
      std::lock_guard lock(st->mu);
      if (!s.ok() && st->failed.ok()) st->failed = s;
      st->ready = true;
      st->cv.notify_all();
    });
  }
  // From ncclCommSplit: `st->comm` is being initialised (non-blocking).
  NcclCommunicator(std::shared_ptr<State> st, bool /*split*/) : st_(std::move(st)) {
    thread_ = std::thread([st = st_] {
      Status s = cudaSetDevice(st->device) == cudaSuccess ? Status() : Internal("cudaSetDevice");
      if (s.ok())
        s = WaitNccl(st->comm, Deadline::After(st->opts.bootstrap_timeout), "ncclCommSplit");
      if (s.ok()) s = CreateCommStream(&st->stream);
      if (s.ok() && cudaMalloc(&st->scratch, 4) != cudaSuccess) s = Internal("cudaMalloc");
      std::lock_guard lock(st->mu);
      if (!s.ok() && st->failed.ok()) st->failed = s;
      st->ready = true;
      st->cv.notify_all();
    });
  }
  ~NcclCommunicator() override {
    if (thread_.joinable()) thread_.join();
    std::lock_guard lock(st_->mu);
    if (st_->comm) {
      if (!st_->aborted_comm && st_->failed.ok()) {
        if (st_->stream) cudaStreamSynchronize(st_->stream);
        ncclCommFinalize(st_->comm);
        WaitNccl(st_->comm, Deadline::After(st_->opts.op_timeout), "ncclCommFinalize").ok()
            ? void()
            : void();
        ncclCommDestroy(st_->comm);
      } else if (!st_->aborted_comm) {
        ncclCommAbort(st_->comm);
      }
    }
    if (st_->stream) cudaStreamDestroy(st_->stream);
    if (st_->scratch) cudaFree(st_->scratch);
  }

  static Status Bootstrap(State& st) {
    const Deadline deadline = Deadline::After(st.opts.bootstrap_timeout);
    if (cudaSetDevice(st.device) != cudaSuccess) return Internal("cudaSetDevice failed");
    auto store = ScopedStore(st.opts.store, st.scope);
    ncclUniqueId id;
    if (st.opts.rank == 0) {
      ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) return NcclStatus(r, nullptr, "ncclGetUniqueId");
      Bytes b(reinterpret_cast<std::byte*>(&id), reinterpret_cast<std::byte*>(&id) + sizeof(id));
      RETURN_IF_ERROR(store->Set("nccl_id", b, deadline));
    } else {
      ASSIGN_OR_RETURN(Bytes b, GetAbortable(*store, "nccl_id", deadline, st));
      if (b.size() != sizeof(id))
        return Status(StatusCode::kProtocolError, "bad ncclUniqueId in the store");
      std::memcpy(&id, b.data(), sizeof(id));
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&comm, st.opts.size, id, st.opts.rank, &config);
    if (r != ncclSuccess && r != ncclInProgress)
      return NcclStatus(r, comm, "ncclCommInitRankConfig");
    {
      std::lock_guard lock(st.mu);
      st.comm = comm;
    }
    Status s = WaitNccl(comm, deadline, "ncclCommInitRankConfig");
    if (!s.ok()) {
      st.Fail(s);
      return s;
    }
    RETURN_IF_ERROR(CreateCommStream(&st.stream));
    if (cudaMalloc(&st.scratch, 4) != cudaSuccess) return Internal("cudaMalloc failed");
    return Status();
  }

  int rank() const override { return st_->opts.rank; }
  int size() const override { return st_->opts.size; }
  int64_t generation() const override { return st_->opts.generation; }
  std::string_view backend() const override { return "nccl"; }

  Status WaitReady(Deadline d) override {
    std::unique_lock lock(st_->mu);
    if (!st_->cv.wait_until(lock, d.when(), [&] { return st_->ready; }))
      return DeadlineExceeded("NCCL bootstrap not finished before the deadline");
    return st_->failed;
  }

  void Abort() override { st_->AbortWith(st_->Describe() + " aborted by Abort()"); }
  std::string_view name() const override { return st_->opts.name; }
  Status status() const override {
    std::lock_guard lock(st_->mu);
    return st_->failed;
  }
  CommStats stats() const override {
    std::lock_guard lock(st_->mu);
    return st_->stats;
  }

  WorkHandle AllReduce(const void* s, void* r, size_t count, DType dt, ReduceOp op) override {
    if (size() == 1) return IssueAlone(OpKind::kAllReduce, r, s, count * DTypeSize(dt));
    const int n = size();
    uint64_t b = 2ull * (n - 1) * count * DTypeSize(dt) / n;
    return Issue(OpKind::kAllReduce, b, b, [&](ncclComm_t c, cudaStream_t st) {
      return ncclAllReduce(s, r, count, NcclType(dt), NcclOp(op), c, st);
    });
  }
  WorkHandle ReduceScatter(const void* s, void* r, size_t rc, DType dt, ReduceOp op) override {
    if (size() == 1) return IssueAlone(OpKind::kReduceScatter, r, s, rc * DTypeSize(dt));
    uint64_t b = uint64_t(size() - 1) * rc * DTypeSize(dt);
    return Issue(OpKind::kReduceScatter, b, b, [&](ncclComm_t c, cudaStream_t st) {
      return ncclReduceScatter(s, r, rc, NcclType(dt), NcclOp(op), c, st);
    });
  }
  WorkHandle AllGather(const void* s, void* r, size_t sc, DType dt) override {
    if (size() == 1) return IssueAlone(OpKind::kAllGather, r, s, sc * DTypeSize(dt));
    uint64_t b = uint64_t(size() - 1) * sc * DTypeSize(dt);
    return Issue(OpKind::kAllGather, b, b, [&](ncclComm_t c, cudaStream_t st) {
      return ncclAllGather(s, r, sc, NcclType(dt), c, st);
    });
  }
  WorkHandle AllGatherV(const void* s, void* r, std::span<const size_t> counts, DType dt) override {
    if (counts.size() != static_cast<size_t>(size()))
      return Done(InvalidArgument("AllGatherV: counts size"));
    if (size() == 1) return IssueAlone(OpKind::kAllGather, r, s, counts[0] * DTypeSize(dt));
    size_t total = 0;
    for (size_t c : counts) total += c;
    const size_t es = DTypeSize(dt);
    uint64_t mine = counts[rank()] * es;
    return Issue(OpKind::kAllGather, mine * (size() - 1), total * es - mine,
                 [&](ncclComm_t c, cudaStream_t st) {
                   ncclResult_t res = ncclGroupStart();
                   size_t off = 0;
                   for (int k = 0; k < size() && res == ncclSuccess; ++k) {
                     res = ncclBroadcast(k == rank() ? s : nullptr,
                                         static_cast<std::byte*>(r) + off * es, counts[k],
                                         NcclType(dt), k, c, st);
                     off += counts[k];
                   }
                   ncclResult_t end = ncclGroupEnd();
                   return res != ncclSuccess ? res : end;
                 });
  }
  WorkHandle Broadcast(const void* s, void* r, size_t count, DType dt, int root) override {
    if (size() == 1) return IssueAlone(OpKind::kBroadcast, r, s, count * DTypeSize(dt));
    uint64_t b = count * DTypeSize(dt);
    return Issue(OpKind::kBroadcast, rank() == root ? b : 0, rank() == root ? 0 : b,
                 [&](ncclComm_t c, cudaStream_t st) {
                   return ncclBroadcast(s, r, count, NcclType(dt), root, c, st);
                 });
  }
  WorkHandle Reduce(const void* s, void* r, size_t count, DType dt, ReduceOp op,
                    int root) override {
    if (size() == 1) return IssueAlone(OpKind::kReduce, r, s, count * DTypeSize(dt));
    uint64_t b = count * DTypeSize(dt);
    return Issue(OpKind::kReduce, b, b, [&](ncclComm_t c, cudaStream_t st) {
      return ncclReduce(s, r, count, NcclType(dt), NcclOp(op), root, c, st);
    });
  }
  WorkHandle Gather(const void* s, void* r, size_t sc, DType dt, int root) override {
    if (size() == 1) return IssueAlone(OpKind::kGather, r, s, sc * DTypeSize(dt));
    const size_t b = sc * DTypeSize(dt);
    const bool is_root = rank() == root;
    return Issue(OpKind::kGather, is_root ? 0 : b, is_root ? b * (size() - 1) : 0,
                 [&](ncclComm_t c, cudaStream_t st) {
                   ncclResult_t res = ncclGroupStart();
                   if (is_root) {
                     for (int k = 0; k < size() && res == ncclSuccess; ++k) {
                       auto* dst = static_cast<std::byte*>(r) + k * b;
                       if (k == root)
                         cudaMemcpyAsync(dst, s, b, cudaMemcpyDeviceToDevice, st);
                       else
                         res = ncclRecv(dst, sc, NcclType(dt), k, c, st);
                     }
                   } else {
                     res = ncclSend(s, sc, NcclType(dt), root, c, st);
                   }
                   ncclResult_t end = ncclGroupEnd();
                   return res != ncclSuccess ? res : end;
                 });
  }
  WorkHandle Scatter(const void* s, void* r, size_t rc, DType dt, int root) override {
    if (size() == 1) return IssueAlone(OpKind::kScatter, r, s, rc * DTypeSize(dt));
    const size_t b = rc * DTypeSize(dt);
    const bool is_root = rank() == root;
    return Issue(OpKind::kScatter, is_root ? b * (size() - 1) : 0, is_root ? 0 : b,
                 [&](ncclComm_t c, cudaStream_t st) {
                   ncclResult_t res = ncclGroupStart();
                   if (is_root) {
                     for (int k = 0; k < size() && res == ncclSuccess; ++k) {
                       auto* src = static_cast<const std::byte*>(s) + k * b;
                       if (k == root)
                         cudaMemcpyAsync(r, src, b, cudaMemcpyDeviceToDevice, st);
                       else
                         res = ncclSend(src, rc, NcclType(dt), k, c, st);
                     }
                   } else {
                     res = ncclRecv(r, rc, NcclType(dt), root, c, st);
                   }
                   ncclResult_t end = ncclGroupEnd();
                   return res != ncclSuccess ? res : end;
                 });
  }
  WorkHandle AllToAll(const void* s, void* r, size_t cpr, DType dt) override {
    if (size() == 1) return IssueAlone(OpKind::kAllToAll, r, s, cpr * DTypeSize(dt));
    const size_t b = cpr * DTypeSize(dt);
    return Issue(
        OpKind::kAllToAll, b * (size() - 1), b * (size() - 1), [&](ncclComm_t c, cudaStream_t st) {
          ncclResult_t res = ncclGroupStart();
          for (int k = 0; k < size() && res == ncclSuccess; ++k) {
            res = ncclSend(static_cast<const std::byte*>(s) + k * b, cpr, NcclType(dt), k, c, st);
            if (res == ncclSuccess)
              res = ncclRecv(static_cast<std::byte*>(r) + k * b, cpr, NcclType(dt), k, c, st);
          }
          ncclResult_t end = ncclGroupEnd();
          return res != ncclSuccess ? res : end;
        });
  }
  WorkHandle Send(const void* buf, size_t count, DType dt, int peer, uint32_t) override {
    return Issue(OpKind::kSend, count * DTypeSize(dt), 0, [&](ncclComm_t c, cudaStream_t st) {
      return ncclSend(buf, count, NcclType(dt), peer, c, st);
    });
  }
  WorkHandle Recv(void* buf, size_t count, DType dt, int peer, uint32_t) override {
    return Issue(OpKind::kRecv, 0, count * DTypeSize(dt), [&](ncclComm_t c, cudaStream_t st) {
      return ncclRecv(buf, count, NcclType(dt), peer, c, st);
    });
  }
  WorkHandle Barrier() override {
    if (size() == 1) return IssueAlone(OpKind::kBarrier, nullptr, nullptr, 0);
    return Issue(OpKind::kBarrier, 0, 0, [&](ncclComm_t c, cudaStream_t st) {
      return ncclAllReduce(st_->scratch, st_->scratch, 1, ncclInt32, ncclSum, c, st);
    });
  }

  Result<std::unique_ptr<Communicator>> Split(int color, int key, Deadline deadline,
                                              std::string_view name) override {
    RETURN_IF_ERROR(WaitReady(deadline));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t sub = nullptr;
    ncclResult_t r =
        ncclCommSplit(st_->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, &config);
    if (r != ncclSuccess && r != ncclInProgress) return NcclStatus(r, st_->comm, "ncclCommSplit");
    RETURN_IF_ERROR(WaitNccl(st_->comm, deadline, "ncclCommSplit"));
    if (color < 0 || sub == nullptr) return std::unique_ptr<Communicator>();
    int n = 0, me = 0;
    ncclCommCount(sub, &n);
    ncclCommUserRank(sub, &me);
    auto st = std::make_shared<State>();
    st->opts = st_->opts;
    st->opts.rank = me;
    st->opts.size = n;
    const std::string split = "split" + std::to_string(split_seq_++);
    st->opts.name += "/" + (name.empty() ? split : std::string(name));
    st->scope = st_->scope + "split/" + std::to_string(color) + "/";
    st->device = st_->device;
    st->comm = sub;
    st_->AddChild(st);
    return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(st), true));
  }

 private:
  static WorkHandle Done(Status s) { return std::make_shared<DoneWork>(std::move(s)); }

  // An op of a one-rank communicator: `bytes` copied from `src` to `dst` (nothing when they are
  // the same) on the calling thread's current stream; the Work is done at once, with the
  // communicator's error if it has failed (Abort() included) or bootstrap did.
  WorkHandle IssueAlone(OpKind kind, void* dst, const void* src, size_t bytes) {
    Status s = WaitReady(Deadline::After(st_->opts.bootstrap_timeout));
    {
      std::lock_guard lock(st_->mu);
      ++st_->stats.per_op[static_cast<size_t>(kind)].ops;
    }
    if (!s.ok()) return Done(s);
    if (dst != src && bytes > 0) {
      cudaSetDevice(st_->device);
      const cudaError_t e =
          cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, CurrentStream());
      if (e != cudaSuccess) {
        s = CudaStatus(
            e, std::string(OpKindName(kind)) + " on " + RankName(rank()) + " (nccl, one rank)");
        st_->Fail(s);
        return Done(s);
      }
    }
    return Done(Status());
  }

  template <typename Fn>
  WorkHandle Issue(OpKind kind, uint64_t sent, uint64_t received, Fn&& fn) {
    std::string what = std::string(OpKindName(kind)) + " on " + RankName(rank()) + " (nccl)";
    Status ready = WaitReady(Deadline::After(st_->opts.bootstrap_timeout));
    {
      std::lock_guard lock(st_->mu);
      auto& b = st_->stats.per_op[static_cast<size_t>(kind)];
      ++b.ops;
      if (ready.ok()) {
        b.bytes_sent += sent;
        b.bytes_received += received;
      }
    }
    if (!ready.ok()) return Done(ready);
    cudaSetDevice(st_->device);
    ncclResult_t r = fn(st_->comm, st_->stream);
    if (r != ncclSuccess && r != ncclInProgress) {
      Status s = NcclStatus(r, st_->comm, what);
      st_->Fail(s);
      return Done(s);
    }
    // A non-blocking communicator may still be enqueueing the op (ncclInProgress): the event
    // below must follow its kernels, and NCCL accepts no other call on the communicator before.
    if (r == ncclInProgress) {
      Status s = WaitNccl(st_->comm, Deadline::After(st_->opts.op_timeout), what);
      if (!s.ok()) {
        st_->Fail(s);
        return Done(s);
      }
    }
    cudaEvent_t ev = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(ev, st_->stream);
    if (e != cudaSuccess) {
      Status s = CudaStatus(e, what);
      st_->Fail(s);
      return Done(s);
    }
    return std::make_shared<NcclWork>(st_, ev, std::move(what));
  }

  std::shared_ptr<State> st_;
  std::thread thread_;
  int split_seq_ = 0;  // names unnamed Split results
};

}  // namespace

Result<std::unique_ptr<Communicator>> NewNcclCommunicator(CommOptions options, int device) {
  if (!options.store) return InvalidArgument("CommOptions.store is required");
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size)
    return InvalidArgument("bad rank " + std::to_string(options.rank) + " of size " +
                           std::to_string(options.size));
  auto st = std::make_shared<State>();
  if (device < 0) {
    if (cudaGetDevice(&device) != cudaSuccess)
      return Status(StatusCode::kCudaError, "no CUDA device");
  }
  st->device = device;
  st->scope = StoreScope(options.job, options.generation) + "comm/" + options.name + "/nccl/";
  st->opts = std::move(options);
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(st)));
}

bool NcclAvailable() { return true; }

}  // namespace rt::comm
