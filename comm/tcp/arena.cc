#include "comm/tcp/arena.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/fault.h"
#include "comm/tcp/reduce.h"

namespace rt::comm::tcp {
namespace {

// The root field of a small-path step's header (all-reduce has no root; large steps carry 0).
constexpr uint32_t kSmallPath = 1;

size_t BlockBegin(size_t count, int n, int b) {
  return count / n * b + std::min<size_t>(b, count % n);
}

// The root field of a single-copy step's header.
constexpr uint32_t kSingleCopyPath = 2;

// Which counter of every rank's arena a wait watches.
enum class Counter {
  kPosted,    // the slot of the step: the rank has posted it
  kReduced,   // the rank's own slice of the step is reduced
  kReleased,  // single copy: the rank reads no peer's buffer of the step any more
};

// Points counters[q] at rank q's `which` counter of `step`. counters has room for kMaxCpuRanks.
void StepCounters(Mesh& mesh, Counter which, uint64_t step, std::atomic<uint64_t>** counters) {
  for (int q = 0; q < mesh.size(); ++q) {
    const ArenaView& v = mesh.Arena(q);
    counters[q] = which == Counter::kReduced    ? v.reduced
                  : which == Counter::kReleased ? v.released
                                                : &v.slot[step % 2]->step;
  }
}

// Waits until every peer's `which` counter reaches `step`.
Status WaitAll(Mesh& mesh, OpCtx& ctx, Counter which, uint64_t step, const char* what) {
  std::atomic<uint64_t>* counters[kMaxCpuRanks];
  StepCounters(mesh, which, step, counters);
  return mesh.WaitUntil(ctx, counters, step, what);
}

// Checks that the header `q` posted in `slot` equals ours (`ours`, the encoding of `h`):
// ProtocolError naming both ranks otherwise.
Status CheckHeader(const OpCtx& ctx, const DataHeader& h, const std::byte* ours,
                   const ArenaSlot& slot, int q, int me) {
  if (std::memcmp(slot.header, ours, kDataHeaderSize) == 0) return Status();
  std::span<const std::byte> hb(slot.header, kDataHeaderSize);
  Result<DataHeader> got = DecodeDataHeader(hb, UINT64_MAX);
  if (!got.ok())
    return Status(
        StatusCode::kProtocolError,
        ctx.What() + ": " + RankName(q) + " posted a bad header: " + got.status().ToString());
  return Status(StatusCode::kProtocolError, ctx.What() + ": ranks disagree: " + RankName(q) +
                                                " sent " + DescribeHeader(*got) + ", " +
                                                RankName(me) + " expected " + DescribeHeader(h));
}

// Stage = Publish + Gather. Publish stages `bytes` of input for `step` (except bytes [skip_from,
// skip_to), which no peer reads; in the slot's line when it fits) and publishes it; then waits for
// every rank's input and checks that every rank runs the same op. Step s reuses the half and slot
// of step s − 2: every peer has finished reading them, since it announced step s − 1 (which we
// waited for) only after finishing step s − 2.
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
    if (q != me)
      RETURN_IF_ERROR(CheckHeader(ctx, h, ours.data(), *mesh.Arena(q).slot[half], q, me));
  return Status();
}

// The second half of Stage: waits for every rank's input of `step` and checks that every rank
// runs the same op.
Status Gather(Mesh& mesh, OpCtx& ctx, const DataHeader& h, uint64_t step) {
  RETURN_IF_ERROR(WaitAll(mesh, ctx, Counter::kPosted, step, "has not joined"));
  return CheckHeaders(mesh, ctx, h, step);
}

Status Stage(Mesh& mesh, OpCtx& ctx, const DataHeader& h, uint64_t step, const void* src,
             size_t bytes, bool inline_ok, size_t skip_from = 0, size_t skip_to = 0) {
  Publish(mesh, h, step, src, bytes, inline_ok, skip_from, skip_to);
  mesh.RingPeers();
  return Gather(mesh, ctx, h, step);
}

// Counts the bytes of a large all-reduce step as the ring does (2(n−1)/n of the buffer each way):
// `slice` elements reduced here out of `total`, of `es` bytes each.
void CountRingBytes(OpCtx& ctx, size_t slice, size_t total, int n, size_t es) {
  ctx.bytes_received += (slice * (n - 1) + (total - slice)) * es;
  ctx.bytes_sent += (total - slice) * es + slice * es * (n - 1);
}

// Marks `step` abandoned by this rank (a peer that read our buffers in it then fails too) and
// returns `s`.
Status Abandon(Mesh& mesh, uint64_t step, Status s) {
  mesh.Arena(mesh.rank()).abandoned->store(step, std::memory_order_seq_cst);
  return s;
}

// The header of a small-path step of the op `op_header`.
DataHeader SmallHeader(const DataHeader& op_header) {
  DataHeader h = op_header;
  h.bytes = op_header.count * DTypeSize(op_header.dtype);
  h.root_or_tag = kSmallPath;  // ranks configured with different thresholds must not mix paths
  return h;
}

// A rank's single-copy progress word: the step above kProgressBits, blocks reduced below.
constexpr int kProgressBits = 24;
constexpr uint64_t kProgressMask = (uint64_t{1} << kProgressBits) - 1;

// Bytes of peer data a single-copy block reads into the scratch: (n − 1) peer blocks fit L2.
constexpr size_t kScratchBytes = 256u << 10;

// Elements per single-copy block for a group of n ranks.
size_t SingleCopyBlock(int n, size_t es) {
  return std::max<size_t>(1, kScratchBytes / static_cast<size_t>(n - 1) / es);
}

// The claim word of a two-rank single-copy step (ArenaView::claim): the step's low 24 bits,
// then the first and one past the last block not yet claimed, 20 bits each.
constexpr int kClaimBits = 20;
constexpr uint64_t kClaimMask = (uint64_t{1} << kClaimBits) - 1;
uint64_t ClaimWord(uint64_t step, uint64_t front, uint64_t back) {
  return (step & kProgressMask) << (2 * kClaimBits) | front << kClaimBits | back;
}

// Which blocks of a single-copy step each rank reduces, in order. With more than two ranks,
// rank r reduces the blocks of its slice (block r of n nearly equal slices). With two, the
// blocks of the whole buffer are claimed from both ends of rank 0's claim word — rank 0 from
// the front, rank 1 from the back — so the rank the host slows down (its CPU taken, its memory
// busier) reduces fewer and neither waits long for the other. Either way a rank's k-th claimed
// block depends on k alone: that is what its `progress` counts and what peers copy by.
class BlockPlan {
 public:
  // The plan of single-copy step `step`: an all-reduce of `count` elements of `es` bytes.
  BlockPlan(Mesh& mesh, uint64_t step, size_t count, size_t es)
      : mesh_(mesh),
        step_(step),
        count_(count),
        block_(SingleCopyBlock(mesh.size(), es)),
        n_(mesh.size()),
        blocks_((count + block_ - 1) / block_),
        dynamic_(n_ == 2 && blocks_ <= kClaimMask) {}

  // Rank 0 opens the claim word of a two-rank plan before it posts the step (rank 1 claims only
  // after it saw the post). No-op otherwise.
  void Open() {
    if (dynamic_ && mesh_.rank() == 0)
      mesh_.Arena(0).claim->store(ClaimWord(step_, 0, blocks_), std::memory_order_relaxed);
  }

  // Claims our next block; false when none is left. Error: a claim word of another step.
  Result<bool> Claim(size_t* lo, size_t* hi) {
    const int me = mesh_.rank();
    const size_t k = claimed_;
    if (!dynamic_) {
      const size_t b = BlockBegin(count_, n_, me), e = BlockBegin(count_, n_, me + 1);
      if (b + k * block_ >= e) return false;
      *lo = b + k * block_;
      *hi = std::min(e, *lo + block_);
      ++claimed_;
      return true;
    }
    std::atomic<uint64_t>& word = *mesh_.Arena(0).claim;
    uint64_t w = word.load(std::memory_order_relaxed);
    for (;;) {
      if (w >> (2 * kClaimBits) != (step_ & kProgressMask))
        return Status(StatusCode::kInternal, "single-copy claim word of another step");
      const uint64_t front = (w >> kClaimBits) & kClaimMask, back = w & kClaimMask;
      if (front >= back) return false;
      const uint64_t next =
          me == 0 ? ClaimWord(step_, front + 1, back) : ClaimWord(step_, front, back - 1);
      if (word.compare_exchange_weak(w, next, std::memory_order_relaxed)) {
        const size_t j = me == 0 ? front : back - 1;
        *lo = j * block_;
        *hi = std::min(count_, *lo + block_);
        ++claimed_;
        return true;
      }
    }
  }

  // The element range of rank q's claimed blocks [from, to) (to at most what q claimed: its
  // progress, or Reduced(q) once every rank has reduced).
  std::pair<size_t, size_t> Range(int q, size_t from, size_t to) const {
    if (!dynamic_) {
      const size_t b = BlockBegin(count_, n_, q), e = BlockBegin(count_, n_, q + 1);
      return {std::min(e, b + from * block_), std::min(e, b + to * block_)};
    }
    if (q == 0) return {std::min(count_, from * block_), std::min(count_, to * block_)};
    return {(blocks_ - to) * block_, std::min(count_, (blocks_ - from) * block_)};
  }

  // How many blocks rank q reduced; valid once every rank has set `reduced`.
  size_t Reduced(int q) const {
    if (!dynamic_) {
      const size_t len = BlockBegin(count_, n_, q + 1) - BlockBegin(count_, n_, q);
      return (len + block_ - 1) / block_;
    }
    const uint64_t front =
        (mesh_.Arena(0).claim->load(std::memory_order_relaxed) >> kClaimBits) & kClaimMask;
    return q == 0 ? front : blocks_ - front;
  }

  // Whether the blocks are claimed from both ends (two ranks).
  bool dynamic() const { return dynamic_; }
  // Elements per block.
  size_t block() const { return block_; }

 private:
  Mesh& mesh_;
  const uint64_t step_;
  const size_t count_, block_;
  const int n_;
  const size_t blocks_;  // of the whole buffer
  const bool dynamic_;
  size_t claimed_ = 0;  // blocks we claimed so far
};

// What a rank posts in its slot's inline bytes for a single-copy step: where its buffers are,
// and whether it can read every peer's memory.
struct SingleCopyPost {
  uint64_t send = 0, recv = 0, can_read = 0;
};
static_assert(sizeof(SingleCopyPost) <= kArenaInlineBytes);

// The single-copy all-reduce of a whole op in step `step`, after every rank posted it
// (posts[q]): reduce the blocks BlockPlan gives us, reading every peer's input straight from
// its send buffer (through the scratch), publish `reduced`, read every block a peer reduced
// straight from its recv buffer, publish `released`, and wait for every rank's `released` — no
// rank returns while a peer may still read its buffers. A rank that fails after posting marks
// the step `abandoned` first, so a peer whose reads overlapped its return fails too instead of
// trusting what it read.
Status SingleCopy(Mesh& mesh, OpCtx& ctx, const DataHeader& h, uint64_t step, BlockPlan& plan,
                  const std::byte* in, std::byte* out, const SingleCopyPost* posts) {
  const int n = mesh.size(), me = mesh.rank();
  const DType dt = h.dtype;
  const ReduceOp op = static_cast<ReduceOp>(h.reduce_op);
  const size_t es = DTypeSize(dt), count = h.count;
  const ArenaView& mine = mesh.Arena(me);
  auto abandon = [&](Status s) { return Abandon(mesh, step, std::move(s)); };
  const size_t block = plan.block();
  // Room for the n − 1 peer blocks, and for our own input block when it must not be
  // overwritten before it is read (in place, and not the first operand).
  std::byte* scratch = mesh.Scratch(block * es * static_cast<size_t>(n));
  const bool copy_own = plan.dynamic() && me != 0 && in == out;
  // The operands of a block: with two ranks in rank order (either rank may reduce any block,
  // and both must get the same bits), otherwise ours first, then the peers in rank order.
  const void* operands[kMaxCpuRanks];  // no allocation per op
  // Peers' reduced blocks read so far (read while still hot in the peer's cache when its
  // progress shows them, the rest after every rank has reduced).
  size_t copied[kMaxCpuRanks] = {};
  auto copy_reduced = [&](int q, size_t upto_blocks) -> Status {
    if (upto_blocks <= copied[q]) return Status();
    const auto [from, to] = plan.Range(q, copied[q], upto_blocks);
    copied[q] = upto_blocks;
    if (to <= from) return Status();
    return mesh.ReadPeer(ctx, q, out + from * es, posts[q].recv + from * es, (to - from) * es);
  };
  size_t lo = 0, hi = 0;
  for (size_t j = 0;; ++j) {
    Result<bool> claimed = plan.Claim(&lo, &hi);
    if (!claimed.ok()) return abandon(claimed.status().WithContext(ctx.What()));
    if (!*claimed) break;
    // Tests slow one rank here to see the other take over its blocks.
    if (Status f = RT_FAULT_POINT("comm.single_copy.block"); !f.ok()) return abandon(f);
    const size_t k = hi - lo;
    ctx.single_copy_reduced_bytes += k * es;
    size_t nops = 0, nscratch = 0;
    if (!plan.dynamic()) operands[nops++] = in + lo * es;
    for (int q = 0; q < n; ++q) {
      if (q == me) {
        if (!plan.dynamic()) continue;
        const std::byte* own = in + lo * es;
        if (copy_own) {
          std::byte* dst = scratch + static_cast<size_t>(n - 1) * block * es;
          std::memcpy(dst, own, k * es);
          own = dst;
        }
        operands[nops++] = own;
        continue;
      }
      std::byte* dst = scratch + nscratch++ * block * es;
      Status s = mesh.ReadPeer(ctx, q, dst, posts[q].send + lo * es, k * es);
      if (!s.ok()) return abandon(s);
      operands[nops++] = dst;
    }
    std::byte* o = out + lo * es;
    if (dt == DType::kBF16 || dt == DType::kF16) {  // fp32 accumulation over every operand
      if (o != operands[0]) std::memcpy(o, operands[0], k * es);
      ReduceMany(o, std::span<const void* const>(operands + 1, nops - 1), k, dt, op);
    } else {  // the same sums in the same order, with the first one fused into the copy
      ReduceTo(o, operands[0], operands[1], k, dt, op);
      ReduceMany(o, std::span<const void* const>(operands + 2, nops - 2), k, dt, op);
    }
    FinishAverage(o, k, dt, op, n);
    if (j + 1 <= kProgressMask)
      mine.progress->store(step << kProgressBits | (j + 1), std::memory_order_release);
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      const uint64_t p = mesh.Arena(q).progress->load(std::memory_order_acquire);
      if (p >> kProgressBits != step || (p & kProgressMask) <= copied[q]) continue;
      Status s = copy_reduced(q, p & kProgressMask);
      if (!s.ok()) return abandon(s);
    }
  }
  mine.reduced->store(step, std::memory_order_release);
  mesh.RingPeers();
  Status s = WaitAll(mesh, ctx, Counter::kReduced, step, "has not reduced its slice");
  if (!s.ok()) return abandon(s);
  for (int k = 1; k < n; ++k) {
    const int q = (me + k) % n;  // start after our own: spreads readers over the ranks
    s = copy_reduced(q, plan.Reduced(q));
    if (!s.ok()) return abandon(s);
  }
  mine.released->store(step, std::memory_order_release);
  mesh.RingPeers();
  s = WaitAll(mesh, ctx, Counter::kReleased, step, "has not finished reading");
  if (!s.ok()) return abandon(s);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int q = 0; q < n; ++q)
    if (q != me && mesh.Arena(q).abandoned->load(std::memory_order_seq_cst) != 0)
      return abandon(
          Status(StatusCode::kPeerFailed,
                 ctx.What() + ": " + RankName(q) + " left the op while its buffers were read"));
  CountRingBytes(ctx, BlockBegin(count, n, me + 1) - BlockBegin(count, n, me), count, n, es);
  return Status();
}

// Runs the op as one single-copy step when it is large enough and single copy has not been
// turned off. Every rank posts where its buffers are and whether it can read every peer (and
// the group fits the CPUs); when all can, SingleCopy does the op (*done = true); otherwise every
// rank, having seen the same posts, turns single copy off for good and the op goes on through
// the staging steps.
Status TrySingleCopy(Mesh& mesh, OpCtx& ctx, const DataHeader& op_header, const void* send,
                     void* recv, bool* done) {
  *done = false;
  const size_t bytes = op_header.count * DTypeSize(op_header.dtype);
  if (mesh.single_copy_bytes() == 0 || bytes < mesh.single_copy_bytes()) return Status();
  const uint64_t step = ++mesh.arena_step();
  DataHeader h = op_header;
  h.bytes = bytes;
  h.root_or_tag = kSingleCopyPath;  // ranks configured with different thresholds must not mix paths
  SingleCopyPost post;
  post.send = reinterpret_cast<uint64_t>(send);
  post.recv = reinterpret_cast<uint64_t>(recv);
  // With more ranks than CPUs the extra synchronisation costs a round of the scheduler, more
  // than the copies saved: such a group stays on the staging steps.
  const bool fits = !mesh.oversubscribed() || mesh.single_copy_oversubscribed();
  post.can_read = fits && mesh.single_copy_possible() ? 1 : 0;
  BlockPlan plan(mesh, step, h.count, DTypeSize(h.dtype));
  plan.Open();
  Publish(mesh, h, step, &post, sizeof(post), /*inline_ok=*/true);
  mesh.RingPeers();
  Status s = Gather(mesh, ctx, h, step);
  if (!s.ok()) return Abandon(mesh, step, std::move(s));
  SingleCopyPost posts[kMaxCpuRanks];
  bool all_can_read = true;
  for (int q = 0; q < mesh.size(); ++q) {
    std::memcpy(&posts[q], mesh.Arena(q).slot[step % 2]->data, sizeof(SingleCopyPost));
    all_can_read = all_can_read && posts[q].can_read == 1;
  }
  if (!all_can_read) {
    mesh.disable_single_copy();
    return Status();
  }
  *done = true;
  return SingleCopy(mesh, ctx, h, step, plan, static_cast<const std::byte*>(send),
                    static_cast<std::byte*>(recv), posts);
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
  StepCounters(mesh, Counter::kPosted, step, counters);
  return mesh.PollUntil(counters, step);
}

Status ArenaFinishSmall(Mesh& mesh, OpCtx& ctx, const DataHeader& op_header, uint64_t step,
                        const void* send, void* recv) {
  RETURN_IF_ERROR(WaitAll(mesh, ctx, Counter::kPosted, step, "has not joined"));
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

  bool done = false;
  RETURN_IF_ERROR(TrySingleCopy(mesh, ctx, op_header, send, recv, &done));
  if (done) return Status();
  if (half_elems == 0)
    return Internal(ctx.What() + ": the shared arena is smaller than one element");
  for (size_t at = 0; at < count || (count == 0 && at == 0); at += half_elems) {
    const size_t m = std::min(half_elems, count - at);
    const uint64_t step = ++mesh.arena_step();
    const int half = static_cast<int>(step % 2);
    DataHeader h = op_header;
    h.bytes = m * es;
    // Our own slice is never read by peers before it is reduced: it is not staged.
    const size_t b = BlockBegin(m, n, me), e = BlockBegin(m, n, me + 1);
    RETURN_IF_ERROR(
        Stage(mesh, ctx, h, step, in + at * es, m * es, /*inline_ok=*/false, b * es, e * es));
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
    RETURN_IF_ERROR(WaitAll(mesh, ctx, Counter::kReduced, step, "has not reduced its slice"));
    // Copy every peer's reduced slice out.
    for (int k = 1; k < n; ++k) {
      const int q = (me + k) % n;  // start after our own: spreads readers over the segments
      const size_t qb = BlockBegin(m, n, q), qe = BlockBegin(m, n, q + 1);
      if (qe > qb)
        std::memcpy(out + (at + qb) * es, mesh.Arena(q).half[half] + qb * es, (qe - qb) * es);
    }
    CountRingBytes(ctx, e - b, m, n, es);
    if (count == 0) break;
  }
  return Status();
}

}  // namespace rt::comm::tcp
