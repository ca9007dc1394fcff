// The mesh's side of the arena collectives (comm/tcp/arena.h): the arenas' views, the
// single-copy probe and peer reads, doorbells for every peer, and the waits on the peers'
// step counters (comm/tcp/mesh.h).
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

#include "comm/tcp/mesh.h"

namespace rt::comm::tcp {

bool Mesh::all_shm() const {
  if (all_shm_ >= 0) return all_shm_ == 1;
  bool all = own_segment_ && arena_bytes_ != 0 && size_ >= 2;
  for (int r = 0; r < size_ && all; ++r)
    if (r != rank_ && !peers_[r].shm) all = false;
  all_shm_ = all ? 1 : 0;  // fixed once bootstrap has set the links (ops run only after it)
  return all;
}

void Mesh::BuildArenaViews() {
  views_.resize(size_);
  for (int r = 0; r < size_; ++r) {
    ShmSegment* seg = r == rank_ ? own_segment_.get() : peers_[r].segment.get();
    if (!seg) continue;  // not a same-host peer: no arena
    auto* h = Header(seg->base);
    ArenaView& v = views_[r];
    v.reduced = &h->reduced;
    v.released = &h->released;
    v.abandoned = &h->abandoned;
    v.progress = &h->progress;
    v.claim = &h->claim;
    v.pid = h->pid;
    std::byte* data = static_cast<std::byte*>(seg->base) + ArenaOffset(size_, ring_bytes_);
    for (int k = 0; k < 2; ++k) {
      v.slot[k] = &h->slot[k];
      v.half[k] = data + k * arena_half_bytes();
    }
  }
}

bool Mesh::single_copy_possible() {
  if (single_copy_ >= 0) return single_copy_ == 1;
  bool ok = all_shm();
  for (int q = 0; q < size_ && ok; ++q) {
    if (q == rank_) continue;
    const SegHeader* h = Header(peers_[q].segment->base);
    uint64_t seen = 0;
    iovec local{&seen, sizeof(seen)};
    iovec remote{reinterpret_cast<void*>(h->own_address + offsetof(SegHeader, nonce)),
                 sizeof(seen)};
    ok = process_vm_readv(h->pid, &local, 1, &remote, 1, 0) == sizeof(seen) && seen == h->nonce;
  }
  single_copy_ = ok ? 1 : 0;
  return ok;
}

Status Mesh::ReadPeer(const OpCtx& ctx, int q, void* dst, uint64_t src, size_t bytes) {
  auto* out = static_cast<std::byte*>(dst);
  while (bytes) {
    iovec local{out, bytes};
    iovec remote{reinterpret_cast<void*>(src), bytes};
    const ssize_t got = process_vm_readv(Arena(q).pid, &local, 1, &remote, 1, 0);
    if (got <= 0)
      return Status(StatusCode::kPeerFailed,
                    ctx.What() + ": reading " + RankName(q) +
                        "'s buffer failed: " + (got < 0 ? std::strerror(errno) : "nothing read"));
    out += got;
    src += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
  return Status();
}

void Mesh::RingPeers() {
  // As Ring() for every same-host peer, with one fence for all of them.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || !peers_[r].shm) continue;
    auto* h = Header(peers_[r].segment->base);
    if (h->sleeping.load(std::memory_order_seq_cst) == 0) continue;
    h->doorbell.fetch_add(1, std::memory_order_seq_cst);
    FutexWake(&h->doorbell);
  }
}

bool Mesh::PollUntil(std::atomic<uint64_t>* const* counters, uint64_t target) {
  const int turns = oversubscribed_ ? 1 : kSpinIterations;
  for (int i = 0; i < turns; ++i) {
    if (i) CpuRelax();
    bool ready = true;
    for (int q = 0; q < size_ && ready; ++q)
      ready = q == rank_ || counters[q]->load(std::memory_order_acquire) >= target;
    if (ready) return true;
    if (aborted()) return false;
  }
  return false;
}

Status Mesh::WaitUntil(OpCtx& ctx, std::atomic<uint64_t>* const* counters, uint64_t target,
                       const char* what) {
  auto pending = [&](int q) {
    return q != rank_ && counters[q]->load(std::memory_order_acquire) < target;
  };
  auto ready = [&] {
    for (int q = 0; q < size_; ++q)
      if (pending(q)) return false;
    return true;
  };
  auto behind = [&] {
    std::string who;
    for (int q = 0; q < size_; ++q)
      if (pending(q)) who += (who.empty() ? "" : ", ") + RankName(q);
    return who;
  };
  // 1. The peers are usually a few hundred nanoseconds behind: poll their counters with a CPU
  // pause between turns, checking Abort() on every turn; no clock, no system call. Skipped
  // when the group has more ranks than CPUs: a peer we wait for may need our CPU to post.
  if (PollUntil(counters, target)) return Status();
  // 2. Pause (or yield the CPU when the group has more ranks than CPUs) until the yield window
  // ends, then 3. sleep on our doorbell in slices. Both watch Abort() on every turn, and dead
  // peers (control sockets: EOF, abort notices) and op_timeout at least every millisecond.
  const MonoTime start = MonoClock::now();
  MonoTime checked = start;
  auto check_peers = [&]() -> Status {
    RETURN_IF_ERROR(PollControl(0, {}, false));
    for (int q = 0; q < size_; ++q)
      if (peers_[q].ctrl_closed && pending(q))
        return PeerGone(q, std::string(peers_[q].goodbye ? "left the communicator" : "died") +
                               " while " + RankName(rank_) + " waited for it (" + what + ") in " +
                               ctx.What());
    return Status();
  };
  auto* h = Header(own_segment_->base);
  for (int i = 0;; ++i) {
    if (aborted()) return Status(StatusCode::kCommAborted, ctx.What() + ": communicator aborted");
    if (ready()) return Status();
    if (!oversubscribed_ && (i & 15) != 0) {
      CpuRelax();  // (the clock is read every 16th turn only)
      continue;
    }
    const MonoTime now = MonoClock::now();
    const auto waited = now - start;
    if (waited >= op_timeout_)
      return Status(StatusCode::kPeerFailed,
                    ctx.What() + ": no progress for " + std::to_string(op_timeout_.count()) +
                        " ms waiting on " + behind() + " (" + what + ", shared memory)");
    if (waited < yield_window_) {
      if (now - checked >= std::chrono::milliseconds(1)) {
        checked = now;
        RETURN_IF_ERROR(check_peers());
      }
      Pause();
      continue;
    }
    // Sleep on our doorbell: peers ring it after every counter update.
    uint32_t seen = h->doorbell.load(std::memory_order_seq_cst);
    h->sleeping.fetch_add(1, std::memory_order_seq_cst);
    if (!ready() && !aborted()) {
      int left_ms =
          static_cast<int>(
              std::chrono::duration_cast<std::chrono::milliseconds>(op_timeout_ - waited).count()) +
          1;
      FutexWait(&h->doorbell, seen, std::min(left_ms, 20));
    }
    h->sleeping.fetch_sub(1, std::memory_order_seq_cst);
    // Every peer that posted is read first: a peer that posted a mismatched header and then
    // sent its abort notice is reported by the caller's header check (ProtocolError naming both
    // ranks), not as "rank q failed".
    if (ready()) return Status();
    RETURN_IF_ERROR(CheckRingMismatch(ctx));
    RETURN_IF_ERROR(check_peers());
  }
}

Status Mesh::CheckRingMismatch(const OpCtx& ctx) {
  if (!ctx.collective) return Status();
  for (int q = 0; q < size_; ++q) {
    if (q == rank_ || !peers_[q].shm) continue;
    RingHeader* ring = RingAt(own_segment_->base, q, ring_bytes_);
    uint64_t tail = ring->tail.load(std::memory_order_relaxed);
    uint64_t head = ring->head.load(std::memory_order_acquire);
    if (head - tail < kDataHeaderSize) continue;
    std::array<std::byte, kDataHeaderSize> hb;
    const std::byte* data = RingData(own_segment_->base, q, ring_bytes_);
    for (size_t i = 0; i < kDataHeaderSize; ++i) hb[i] = data[(tail + i) % ring_bytes_];
    Result<DataHeader> got = DecodeDataHeader(hb, UINT64_MAX);
    if (!got.ok() || got->kind == OpKind::kSend || got->seq != ctx.header.seq) continue;
    return Status(StatusCode::kProtocolError,
                  ctx.What() + ": ranks disagree: " + RankName(q) + " sent " +
                      DescribeHeader(*got) + " over its ring, " + RankName(rank_) + " expected " +
                      DescribeHeader(ctx.header) + " through the shared arena");
  }
  return Status();
}

Status Mesh::CheckArenaMismatch(const OpCtx& ctx) {
  if (!ctx.collective || !all_shm()) return Status();
  const uint64_t next = arena_step_ + 1;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    ArenaView v = Arena(q);
    if (v.slot[next % 2]->step.load(std::memory_order_acquire) < next) continue;
    Result<DataHeader> got = DecodeDataHeader(
        std::span<const std::byte>(v.slot[next % 2]->header, kDataHeaderSize), UINT64_MAX);
    if (!got.ok() || got->seq != ctx.header.seq) continue;
    return Status(StatusCode::kProtocolError,
                  ctx.What() + ": ranks disagree: " + RankName(q) + " posted " +
                      DescribeHeader(*got) + " in the shared arena, " + RankName(rank_) +
                      " expected " + DescribeHeader(ctx.header) + " over the rings");
  }
  return Status();
}

}  // namespace rt::comm::tcp
