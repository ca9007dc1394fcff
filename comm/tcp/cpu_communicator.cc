// The CPU backend's public face (NewCpuCommunicator): argument checks, then ops queued on the
// communicator's shared state (comm/tcp/cpu_comm.h) that run the algorithms of
// comm/tcp/collectives.h.
#include <algorithm>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/store.h"
#include "comm/tcp/collectives.h"
#include "comm/tcp/cpu_comm.h"

namespace rt::comm {
namespace tcp {
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
  std::string_view name() const override { return c_->options().name; }
  Status status() const override { return c_->status(); }
  CommStats stats() const override { return c_->stats(); }

  WorkHandle AllReduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op) override {
    if (auto e = CheckBuffers(count, send, recv); !e.ok()) return Done(e);
    const size_t small = c_->options().small_message_bytes;
    uint64_t step = 0;
    uint32_t seq = 0;
    Status result;
    const CpuComm::Issued issued =
        c_->TryPost(send, recv, count, dt, op, small, &step, &seq, &result);
    if (issued == CpuComm::Issued::kFinished)
      return result.ok() ? CpuComm::DoneOk() : Done(std::move(result));
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
    return issued == CpuComm::Issued::kPosted ? c_->QueuePosted(std::move(o))
                                              : c_->EnqueueOp(std::move(o));
  }

  WorkHandle ReduceScatter(const void* send, void* recv, size_t rc, DType dt,
                           ReduceOp op) override {
    if (auto e = CheckBuffers(rc, send, recv); !e.ok()) return Done(e);
    return Collective(OpKind::kReduceScatter, dt, op, rc, 0,
                      [=](Ctx& cx) { return ReduceScatterAlgo(cx, send, recv, rc); });
  }

  WorkHandle AllGather(const void* send, void* recv, size_t sc, DType dt) override {
    if (auto e = CheckBuffers(sc, send, recv); !e.ok()) return Done(e);
    return Collective(OpKind::kAllGather, dt, ReduceOp::kSum, sc, 0,
                      [=](Ctx& cx) { return AllGatherAlgo(cx, send, recv, sc); });
  }

  WorkHandle AllGatherV(const void* send, void* recv, std::span<const size_t> counts,
                        DType dt) override {
    if (counts.size() != static_cast<size_t>(size()))
      return Done(InvalidArgument("AllGatherV: counts has " + std::to_string(counts.size()) +
                                  " entries, the group has " + std::to_string(size())));
    std::vector<size_t> begin(counts.size() + 1, 0);
    for (size_t i = 0; i < counts.size(); ++i) begin[i + 1] = begin[i] + counts[i];
    if (auto e = CheckBuffers(begin.back(), send, recv); !e.ok()) return Done(e);
    return Collective(OpKind::kAllGather, dt, ReduceOp::kSum, begin.back(), 1,
                      [=](Ctx& cx) { return AllGatherVAlgo(cx, send, recv, begin); });
  }

  WorkHandle Broadcast(const void* send, void* recv, size_t count, DType dt, int root) override {
    if (auto e = CheckRoot(root); !e.ok()) return Done(e);
    if (auto e = CheckBuffers(count, rank() == root ? send : recv, recv); !e.ok()) return Done(e);
    size_t small = c_->options().small_message_bytes;
    return Collective(OpKind::kBroadcast, dt, ReduceOp::kSum, count, root,
                      [=](Ctx& cx) { return BroadcastAlgo(cx, send, recv, count, root, small); });
  }

  WorkHandle Reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                    int root) override {
    if (auto e = CheckRoot(root); !e.ok()) return Done(e);
    if (auto e = CheckBuffers(count, send, rank() == root ? recv : send); !e.ok()) return Done(e);
    size_t small = c_->options().small_message_bytes;
    return Collective(OpKind::kReduce, dt, op, count, root,
                      [=](Ctx& cx) { return ReduceAlgo(cx, send, recv, count, root, small); });
  }

  WorkHandle Gather(const void* send, void* recv, size_t sc, DType dt, int root) override {
    if (auto e = CheckRoot(root); !e.ok()) return Done(e);
    if (auto e = CheckBuffers(sc, send, rank() == root ? recv : send); !e.ok()) return Done(e);
    return Collective(OpKind::kGather, dt, ReduceOp::kSum, sc, root,
                      [=](Ctx& cx) { return GatherAlgo(cx, send, recv, sc, root); });
  }

  WorkHandle Scatter(const void* send, void* recv, size_t rc, DType dt, int root) override {
    if (auto e = CheckRoot(root); !e.ok()) return Done(e);
    if (auto e = CheckBuffers(rc, rank() == root ? send : recv, recv); !e.ok()) return Done(e);
    return Collective(OpKind::kScatter, dt, ReduceOp::kSum, rc, root,
                      [=](Ctx& cx) { return ScatterAlgo(cx, send, recv, rc, root); });
  }

  WorkHandle AllToAll(const void* send, void* recv, size_t cpr, DType dt) override {
    if (auto e = CheckBuffers(cpr, send, recv); !e.ok()) return Done(e);
    if (send == recv && cpr) return Done(InvalidArgument("AllToAll cannot run in place"));
    return Collective(OpKind::kAllToAll, dt, ReduceOp::kSum, cpr, 0,
                      [=](Ctx& cx) { return AllToAllAlgo(cx, send, recv, cpr); });
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

  Result<std::unique_ptr<Communicator>> Split(int color, int key, Deadline deadline,
                                              std::string_view name) override {
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
    const std::string split = "split" + std::to_string(split_seq_++);
    o.name += "/" + (name.empty() ? split : std::string(name));
    std::string scope = c_->scope() + split + "/color" + std::to_string(color) + "/";
    auto sub = std::make_shared<CpuComm>(std::move(o), std::move(scope));
    sub->Start();
    c_->AddChild(sub);
    return std::unique_ptr<Communicator>(new CpuCommunicator(std::move(sub)));
  }

 private:
  // A completed handle carrying `s` (argument errors).
  static WorkHandle Done(Status s) { return std::make_shared<DoneWork>(std::move(s)); }

  // InvalidArgument unless `root` is a rank of the group.
  Status CheckRoot(int root) const {
    if (root < 0 || root >= size())
      return InvalidArgument("root " + std::to_string(root) + " is not a rank of a group of " +
                             std::to_string(size()));
    return Status();
  }
  // InvalidArgument when a non-empty op has a null buffer.
  static Status CheckBuffers(size_t count, const void* a, const void* b) {
    if (count && (!a || !b)) return InvalidArgument("null buffer for a non-empty op");
    return Status();
  }

  // Queues collective `kind`: numbered and described by its header when it runs, then `algo`.
  WorkHandle Collective(OpKind kind, DType dt, ReduceOp op, size_t count, int root,
                        std::function<Status(Ctx&)> algo) {
    auto c = c_;
    return c_->Enqueue(kind, [c, kind, dt, op, count, root, algo = std::move(algo)](OpCtx& octx) {
      Ctx cx{c->mesh(), octx, {}};
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

  // Queues a send or receive after checking the peer and the buffer.
  WorkHandle P2p(OpKind kind, void* buf, size_t count, DType dt, int peer, uint32_t tag) {
    if (peer < 0 || peer >= size() || peer == rank())
      return Done(InvalidArgument("peer " + std::to_string(peer) +
                                  " is not another rank of a group of " + std::to_string(size())));
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
  if (options.tcp_connections_per_peer < 1 ||
      options.tcp_connections_per_peer > tcp::kMaxDataConnections)
    return InvalidArgument("tcp_connections_per_peer must be 1.." +
                           std::to_string(tcp::kMaxDataConnections));
  if (options.shm_arena_bytes != 0 && options.shm_arena_bytes < 4096)
    return InvalidArgument("shm_arena_bytes must be 0 (off) or at least 4096");
  std::string scope = StoreScope(options.job, options.generation) + "comm/" + options.name + "/";
  auto c = std::make_shared<tcp::CpuComm>(std::move(options), std::move(scope));
  c->Start();
  return std::unique_ptr<Communicator>(new tcp::CpuCommunicator(std::move(c)));
}

}  // namespace rt::comm
