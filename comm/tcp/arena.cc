#include "comm/tcp/arena.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/tcp/reduce.h"

namespace rt::comm::tcp {
namespace {

std::string RankName(int r) { return "rank " + std::to_string(r); }

// The root field of a small-path step's header (all-reduce has no root; large steps carry 0).
constexpr uint32_t kSmallPath = 1;

size_t BlockBegin(size_t count, int n, int b) {
  return count / n * b + std::min<size_t>(b, count % n);
}

// Points counters[q] at rank q's counter of `step`: its arena's slot of the step, or its
// `reduced`. counters has room for kMaxCpuRanks.
void StepCounters(Mesh& mesh, bool reduced, uint64_t step, std::atomic<uint64_t>** counters) {
  for (int q = 0; q < mesh.size(); ++q) {
    const ArenaView& v = mesh.Arena(q);
    counters[q] = reduced ? v.reduced : &v.slot[step % 2]->step;
  }
}

// Waits until every peer's counter (of its arena's slot of `step`, or its `reduced`) reaches
// `step`.
Status WaitAll(Mesh& mesh, OpCtx& ctx, bool reduced, uint64_t step, const char* what) {
  std::atomic<uint64_t>* counters[kMaxCpuRanks];
  StepCounters(mesh, reduced, step, counters);
  return mesh.WaitUntil(ctx, counters, step, what);
}

// Checks that the header `q` posted in `slot` equals ours (`ours`, the encoding of `h`):
// ProtocolError naming both ranks otherwise.
Status CheckHeader(const OpCtx& ctx, const DataHeader& h, const std::byte* ours, const ArenaSlot& slot,
                   int q, int me) {
  if (std::memcmp(slot.header, ours, kDataHeaderSize) == 0) return Status();
  std::span<const std::byte> hb(slot.header, kDataHeaderSize);
  Result<DataHeader> got = DecodeDataHeader(hb, UINT64_MAX);
  if (!got.ok())
    return Status(StatusCode::kProtocolError,
                  ctx.What() + ": " + RankName(q) + " posted a bad header: " + got.status().ToString());
  return Status(StatusCode::kProtocolError,
                ctx.What() + ": ranks disagree: " + RankName(q) + " sent " + DescribeHeader(*got) +
                    ", " + RankName(me) + " expected " + DescribeHeader(h));
}

// Stage = Publish + Gather. Publish stages `bytes` of input for `step` (except bytes [skip_from, skip_to), which no peer reads;
// in the slot's line when it fits) and publishes it; then waits for every rank's input and
// checks that every rank runs the same op. Step s reuses the half and slot of step s − 2: every
// peer has finished reading them, since it announced step s − 1 (which we waited for) only
// after finishing step s − 2.
void Publish(Mesh& mesh, const DataHeader& h, uint64_t step, const void* src, size_t bytes,
             bool inline_ok, size_t skip_from = 0, size_t skip_to = 0) {
  const ArenaView& mine = mesh.Arena(mesh.rank());
  const int half = static_cast<int>(step % 2);
  const auto* in = static_cast<const std::byte*>(src);
  ArenaSlot* slot = mine.slot[half];
  if (inline_ok && bytes <= kArenaInlineBytes) {
    if (bytes) std::memcpy(slot->data, in, bytes);
  } else if (skip_to <= skip_from) {
    if (bytes) std::memcpy(mine.half[half], in, bytes);
  } else {
    if (skip_from) std::memcpy(mine.half[half], in, skip_from);
    if (bytes > skip_to) std::memcpy(mine.half[half] + skip_to, in + skip_to, bytes - skip_to);
  }
  auto enc = EncodeDataHeader(h);
  std::memcpy(slot->header, enc.data(), enc.size());
  slot->step.store(step, std::memory_order_release);
}

// Checks that every rank, all of which have posted `step`, runs the same op (header h). Our
// header is encoded again rather than read back from our slot, whose line a peer's read may
// have taken (one cross-core transfer per op).
Status CheckHeaders(Mesh& mesh, const OpCtx& ctx, const DataHeader& h, uint64_t step) {
  const int me = mesh.rank(), half = static_cast<int>(step % 2);
  const auto ours = EncodeDataHeader(h);
  for (int q = 0; q < mesh.size(); ++q)
    if (q != me) RETURN_IF_ERROR(CheckHeader(ctx, h, ours.data(), *mesh.Arena(q).slot[half], q, me));
  return Status();
}

// The second half of Stage: waits for every rank's input of `step` and checks that every rank
// runs the same op.
Status Gather(Mesh& mesh, OpCtx& ctx, const DataHeader& h, uint64_t step) {
  RETURN_IF_ERROR(WaitAll(mesh, ctx, false, step, "has not joined"));
  return CheckHeaders(mesh, ctx, h, step);
}

Status Stage(Mesh& mesh, OpCtx& ctx, const DataHeader& h, uint64_t step, const void* src,
             size_t bytes, bool inline_ok, size_t skip_from = 0, size_t skip_to = 0) {
  Publish(mesh, h, step, src, bytes, inline_ok, skip_from, skip_to);
  mesh.RingPeers();
  return Gather(mesh, ctx, h, step);
}

// The header of a small-path step of the op `op_header`.
DataHeader SmallHeader(const DataHeader& op_header) {
  DataHeader h = op_header;
  h.bytes = op_header.count * DTypeSize(op_header.dtype);
  h.root_or_tag = kSmallPath;  // ranks configured with different thresholds must not mix paths
  return h;
}

}  // namespace

bool ArenaSmallPath(Mesh& mesh, const DataHeader& op_header, size_t small_bytes) {
  const size_t bytes = op_header.count * DTypeSize(op_header.dtype);
  return bytes <= small_bytes && bytes <= mesh.arena_half_bytes();
}

uint64_t ArenaPostSmall(Mesh& mesh, const DataHeader& op_header, const void* send) {
  const uint64_t step = ++mesh.arena_step();
  const DataHeader h = SmallHeader(op_header);
  Publish(mesh, h, step, send, h.bytes, /*inline_ok=*/true);
  return step;
}

bool ArenaSmallPosted(Mesh& mesh, uint64_t step) {
  std::atomic<uint64_t>* counters[kMaxCpuRanks];
  StepCounters(mesh, false, step, counters);
  return mesh.PollUntil(counters, step);
}

Status ArenaFinishSmall(Mesh& mesh, OpCtx& ctx, const DataHeader& op_header, uint64_t step,
                        const void* send, void* recv) {
  RETURN_IF_ERROR(WaitAll(mesh, ctx, false, step, "has not joined"));
  return ArenaReduceSmall(mesh, ctx, op_header, step, send, recv);
}

Status ArenaReduceSmall(Mesh& mesh, OpCtx& ctx, const DataHeader& op_header, uint64_t step,
                        const void* send, void* recv) {
  const int n = mesh.size();
  const DataHeader h = SmallHeader(op_header);
  RETURN_IF_ERROR(CheckHeaders(mesh, ctx, h, step));
  const DType dt = h.dtype;
  const ReduceOp op = static_cast<ReduceOp>(h.reduce_op);
  const size_t count = h.count, total = h.bytes;
  auto* out = static_cast<std::byte*>(recv);
  if (total) {
    const int half = static_cast<int>(step % 2);
    auto data = [&](int q) -> const std::byte* {
      const ArenaView& v = mesh.Arena(q);
      return total <= kArenaInlineBytes ? v.slot[half]->data : v.half[half];
    };
    if (n == 2 && dt != DType::kBF16 && dt != DType::kF16) {  // what ReduceMany does, in one call
      // Our input from `send`, not from our slot: the peer's read may have taken its lines.
      const bool first = mesh.rank() == 0;
      ReduceTo(out, first ? send : data(0), first ? data(1) : send, count, dt, op);
    } else {
      const void* src_buf[kMaxCpuRanks];  // no allocation per op
      std::memcpy(out, data(0), total);
      for (int q = 1; q < n; ++q) src_buf[q - 1] = data(q);
      ReduceMany(out, std::span<const void* const>(src_buf, n - 1), count, dt, op);
    }
    FinishAverage(out, count, dt, op, n);
  }
  ctx.bytes_sent += total * (n - 1);
  ctx.bytes_received += total * (n - 1);
  return Status();
}

Status ArenaAllReduce(Mesh& mesh, OpCtx& ctx, const DataHeader& op_header, const void* send,
                      void* recv, size_t small_bytes) {
  const int n = mesh.size(), me = mesh.rank();
  const DType dt = op_header.dtype;
  const ReduceOp op = static_cast<ReduceOp>(op_header.reduce_op);
  const size_t es = DTypeSize(dt), count = op_header.count;
  const size_t half_elems = mesh.arena_half_bytes() / es;
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  const void* src_buf[kMaxCpuRanks];  // no allocation per op
  size_t nsrc = 0;
  auto srcs = [&] { return std::span<const void* const>(src_buf, nsrc); };

  if (ArenaSmallPath(mesh, op_header, small_bytes)) {
    const uint64_t step = ArenaPostSmall(mesh, op_header, send);
    mesh.RingPeers();
    return ArenaFinishSmall(mesh, ctx, op_header, step, send, recv);
  }

  if (half_elems == 0) return Internal(ctx.What() + ": the shared arena is smaller than one element");
  for (size_t at = 0; at < count || (count == 0 && at == 0); at += half_elems) {
    const size_t m = std::min(half_elems, count - at);
    const uint64_t step = ++mesh.arena_step();
    const int half = static_cast<int>(step % 2);
    DataHeader h = op_header;
    h.bytes = m * es;
    // Our own slice is never read by peers before it is reduced: it is not staged.
    const size_t b = BlockBegin(m, n, me), e = BlockBegin(m, n, me + 1);
    RETURN_IF_ERROR(Stage(mesh, ctx, h, step, in + at * es, m * es, /*inline_ok=*/false, b * es, e * es));
    // Reduce our slice into our staging half, reading it from our input and every peer's
    // staging, block by block (L1-sized), and write each finished block to our output too.
    std::byte* slice = mesh.Arena(me).half[half] + b * es;
    constexpr size_t kBlockBytes = 16u << 10;
    const size_t block = std::max<size_t>(1, kBlockBytes / es);
    for (size_t x = 0; x < e - b; x += block) {
      const size_t k = std::min(block, e - b - x);
      std::byte* dst = slice + x * es;
      std::memcpy(dst, in + (at + b + x) * es, k * es);
      nsrc = 0;
      for (int q = 0; q < n; ++q)
        if (q != me) src_buf[nsrc++] = mesh.Arena(q).half[half] + (b + x) * es;
      ReduceMany(dst, srcs(), k, dt, op);
      FinishAverage(dst, k, dt, op, n);
      std::memcpy(out + (at + b + x) * es, dst, k * es);
    }
    mesh.Arena(me).reduced->store(step, std::memory_order_release);
    mesh.RingPeers();
    RETURN_IF_ERROR(WaitAll(mesh, ctx, true, step, "has not reduced its slice"));
    // Copy every peer's reduced slice out.
    for (int k = 1; k < n; ++k) {
      const int q = (me + k) % n;  // start after our own: spreads readers over the segments
      const size_t qb = BlockBegin(m, n, q), qe = BlockBegin(m, n, q + 1);
      if (qe > qb) std::memcpy(out + (at + qb) * es, mesh.Arena(q).half[half] + qb * es, (qe - qb) * es);
    }
    ctx.bytes_received += ((e - b) * (n - 1) + (m - (e - b))) * es;
    ctx.bytes_sent += (m - (e - b)) * es + (e - b) * es * (n - 1);
    if (count == 0) break;
  }
  return Status();
}

}  // namespace rt::comm::tcp
