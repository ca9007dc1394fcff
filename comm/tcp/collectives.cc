// The collective algorithms of the CPU backend (comm/tcp/collectives.h).
#include "comm/tcp/collectives.h"

#include <algorithm>
#include <cstring>

#include "comm/tcp/arena.h"
#include "comm/tcp/cpu_comm.h"
#include "comm/tcp/reduce.h"

namespace rt::comm::tcp {
namespace {

// Element range [begin, end) of block b when `count` is cut into n nearly equal blocks.
inline size_t BlockBegin(size_t count, int n, int b) {
  return count / n * b + std::min<size_t>(b, count % n);
}

// Element `elems` of a buffer of `esize`-byte elements.
std::byte* At(void* p, size_t elems, size_t esize) {
  return static_cast<std::byte*>(p) + elems * esize;
}
const std::byte* At(const void* p, size_t elems, size_t esize) {
  return static_cast<const std::byte*>(p) + elems * esize;
}

// Ring reduce-scatter in place on `buf` over blocks given by `begin` (n+1 offsets): afterwards
// block r of rank r holds the reduction. Received data is reduced as it streams in.
Status RingReduceScatter(Ctx& cx, void* buf, const std::vector<size_t>& begin,
                         std::vector<std::byte>& tmp) {
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
    std::vector<Xfer> xs{cx.Send(next, At(buf, begin[sb], es), scount),
                         cx.Recv(prev, tmp.data(), rcount)};
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
      if (partner < r)
        ReduceTo(buf, tmp.data(), buf, count, dt, op);
      else
        ReduceInto(buf, tmp.data(), count, dt, op);
    }
  }
  if (r < 2 * rem) {
    std::vector<Xfer> xs;
    if (r % 2 == 0)
      xs.push_back(cx.Recv(r + 1, buf, count));
    else
      xs.push_back(cx.Send(r - 1, buf, count));
    RETURN_IF_ERROR(cx.Run(xs));
  }
  return Status();
}

// All-reduce: through the arenas when every rank is on this host, else recursive doubling for
// small messages and a ring reduce-scatter + all-gather for large ones.
Status AllReduceAlgo(Ctx& cx, const void* send, void* recv, size_t count, size_t small_bytes) {
  const size_t es = cx.esize();
  const int n = cx.size();
  if (n > 1 && cx.mesh.all_shm())
    return ArenaAllReduce(cx.mesh, cx.op, cx.h, send, recv, small_bytes);
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

Status RunFastAllReduce(CpuComm& c, Op& op, OpCtx& octx) {
  Ctx cx{c.mesh(), octx, {}};
  cx.h.kind = op.kind;
  cx.h.dtype = op.dtype;
  cx.h.reduce_op = static_cast<uint8_t>(op.rop);
  cx.h.seq = op.posted_step ? op.seq : c.NextSeq();
  cx.h.root_or_tag = 0;
  cx.h.count = op.count;
  octx.SetCollective(cx.h, c.rank());
  if (op.posted_step)
    return ArenaFinishSmall(c.mesh(), octx, cx.h, op.posted_step, op.send, op.recv);
  if (op.kind == OpKind::kBarrier) {
    uint8_t token = 1;
    if (cx.size() == 1) return Status();
    if (c.mesh().all_shm()) return ArenaAllReduce(c.mesh(), octx, cx.h, &token, &token, 1);
    return RecursiveDoublingAllReduce(cx, &token, 1);
  }
  return AllReduceAlgo(cx, op.send, op.recv, op.count, op.small_bytes);
}

Status ReduceScatterAlgo(Ctx& cx, const void* send, void* recv, size_t rc) {
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
  FinishAverage(recv, rc, cx.h.dtype, static_cast<ReduceOp>(cx.h.reduce_op), n);
  return Status();
}

Status AllGatherAlgo(Ctx& cx, const void* send, void* recv, size_t sc) {
  const int n = cx.size(), r = cx.rank();
  std::vector<size_t> begin(n + 1);
  for (int b = 0; b <= n; ++b) begin[b] = sc * b;
  std::byte* own = At(recv, begin[r], cx.esize());
  if (own != send && sc) std::memcpy(own, send, sc * cx.esize());
  return RingAllGather(cx, recv, begin);
}

Status AllGatherVAlgo(Ctx& cx, const void* send, void* recv, const std::vector<size_t>& begin) {
  const int r = cx.rank();
  std::byte* own = At(recv, begin[r], cx.esize());
  size_t mine = begin[r + 1] - begin[r];
  if (own != send && mine) std::memcpy(own, send, mine * cx.esize());
  return RingAllGather(cx, recv, begin);
}

Status BroadcastAlgo(Ctx& cx, const void* send, void* recv, size_t count, int root,
                     size_t small_bytes) {
  const int n = cx.size(), r = cx.rank();
  const size_t es = cx.esize();
  if (r == root && send != recv && count) std::memcpy(recv, send, count * es);
  if (n == 1) return Status();
  if (count * es <= small_bytes || count < static_cast<size_t>(n))
    return TreeBroadcast(cx, recv, count, root);
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
}

Status ReduceAlgo(Ctx& cx, const void* send, void* recv, size_t count, int root,
                  size_t small_bytes) {
  const int n = cx.size(), r = cx.rank();
  const size_t es = cx.esize();
  const ReduceOp op = static_cast<ReduceOp>(cx.h.reduce_op);
  if (count * es <= small_bytes || count < static_cast<size_t>(n)) {
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
    std::memcpy(At(recv, begin[r], es), work.data() + begin[r] * es,
                (begin[r + 1] - begin[r]) * es);
  } else {
    xs.push_back(cx.Send(root, work.data() + begin[r] * es, begin[r + 1] - begin[r]));
  }
  RETURN_IF_ERROR(cx.Run(xs));
  if (r == root) FinishAverage(recv, count, cx.h.dtype, op, n);
  return Status();
}

Status GatherAlgo(Ctx& cx, const void* send, void* recv, size_t sc, int root) {
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
}

Status ScatterAlgo(Ctx& cx, const void* send, void* recv, size_t rc, int root) {
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
}

Status AllToAllAlgo(Ctx& cx, const void* send, void* recv, size_t cpr) {
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
}

}  // namespace rt::comm::tcp
