// The mesh's links and Exchange(): lifecycle, doorbells, and transfers over TCP sockets and
// shared-memory rings (comm/tcp/mesh.h).
#include "comm/tcp/mesh.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace rt::comm::tcp {
namespace {

// Busy polls of ExchangeParts before yielding: short, because with more ranks than cores
// spinning starves the peer we wait for.
constexpr int kRingSpinIterations = 64;

}  // namespace

std::string RankName(int rank) { return "rank " + std::to_string(rank); }

Mesh::Mesh(int rank, int size, std::chrono::milliseconds op_timeout)
    : rank_(rank), size_(size), op_timeout_(op_timeout), peers_(size) {
  oversubscribed_ = size > static_cast<int>(std::thread::hardware_concurrency());
  abort_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

Mesh::~Mesh() {
  CloseAll();
  if (abort_fd_ >= 0) close(abort_fd_);
}

void Mesh::CloseAll() {
  for (auto& p : peers_) {
    if (p.ctrl_fd >= 0) close(p.ctrl_fd);
    for (int fd : p.data_fds)
      if (fd >= 0) close(fd);
    p.data_fds.clear();
    p.ctrl_fd = p.data_fd = -1;
  }
}

void Mesh::Abort() {
  aborted_.store(true);
  uint64_t one = 1;
  if (abort_fd_ >= 0) (void)!write(abort_fd_, &one, sizeof(one));
  if (ShmSegment* own = abort_segment_.load(std::memory_order_acquire)) {
    auto* h = Header(own->base);
    h->doorbell.fetch_add(1);
    FutexWake(&h->doorbell);
  }
}

void Mesh::Ring(int to) {
  void* base = to == rank_ ? own_segment_->base : peers_[to].segment->base;
  auto* h = Header(base);
  // Our state change (ring head/tail, arena counter) must be visible before we look for a
  // sleeper; a sleeper announces itself before its last check (Dekker): either it sees our
  // change or we see it and bump the doorbell it waits on. No remote write when nobody sleeps.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h->sleeping.load(std::memory_order_seq_cst) == 0) return;
  h->doorbell.fetch_add(1, std::memory_order_seq_cst);
  FutexWake(&h->doorbell);
}

Status Mesh::PeerGone(int peer, const std::string& how) {
  return Status(StatusCode::kPeerFailed, RankName(peer) + " " + how);
}

Status Mesh::Exchange(OpCtx& ctx, std::span<Xfer> xfers) {
  // Striping: a large TCP transfer to a peer with several data connections travels as one part
  // per connection, each with its own header (bytes = the part's). Both sides cut the same way
  // from the header they send or expect; a disagreement shows in the first part's header.
  bool stripe = false;
  for (auto& x : xfers)
    stripe |= !peers_[x.peer].shm && peers_[x.peer].data_fds.size() > 1 && x.bytes >= stripe_bytes_;
  if (!stripe) return ExchangeParts(ctx, xfers);
  std::vector<Xfer> parts;
  std::vector<size_t> owner;
  for (size_t i = 0; i < xfers.size(); ++i) {
    Xfer& x = xfers[i];
    const size_t k = peers_[x.peer].shm ? 1 : peers_[x.peer].data_fds.size();
    if (k <= 1 || x.bytes < stripe_bytes_) {
      parts.push_back(x);
      owner.push_back(i);
      continue;
    }
    const size_t elem = DTypeSize(x.header.dtype), elems = x.bytes / elem;
    for (size_t c = 0; c < k; ++c) {
      const size_t from = elems / k * c * elem,
                   to = c + 1 == k ? x.bytes : elems / k * (c + 1) * elem;
      Xfer part;
      part.peer = x.peer;
      part.send = x.send;
      part.header = x.header;
      part.header.bytes = to - from;
      part.data = x.data + from;
      part.bytes = to - from;
      part.conn = static_cast<int>(c);
      if (x.on_data) {
        auto cb = x.on_data;
        part.on_data = [cb, from](size_t a, size_t b) { cb(from + a, from + b); };
      }
      parts.push_back(std::move(part));
      owner.push_back(i);
    }
  }
  Status s = ExchangeParts(ctx, parts);
  for (auto& x : xfers) x.done = 0;
  for (size_t j = 0; j < parts.size(); ++j) {
    Xfer& x = xfers[owner[j]];
    x.done += parts[j].done;
    x.hdone = kDataHeaderSize;
    x.header_checked = true;
  }
  return s;
}

Status Mesh::ExchangeParts(OpCtx& ctx, std::span<Xfer> xfers) {
  MonoTime silent_since = MonoClock::now(), idle_since = silent_since;
  int idle = 0;
  while (true) {
    if (aborted()) return Status(StatusCode::kCommAborted, ctx.What() + ": communicator aborted");
    bool all_done = true, progressed = false;
    // Per peer, connection and direction, only the first unfinished transfer may move (stream
    // order).
    uint64_t busy_send[8] = {}, busy_recv[8] = {};
    for (auto& x : xfers) {
      const bool finished = x.hdone == kDataHeaderSize && x.done == x.bytes && x.header_checked;
      if (finished) continue;
      all_done = false;
      uint64_t bit = uint64_t{1} << (x.peer & 63);
      uint64_t& busy = (x.send ? busy_send : busy_recv)[x.conn & 7];
      if (busy & bit) continue;
      busy |= bit;
      RETURN_IF_ERROR(Step(x, ctx, &progressed));
    }
    if (all_done) return Status();
    if (progressed) {
      silent_since = MonoClock::now();
      idle = 0;
      continue;
    }
    // Shared memory: a peer is usually microseconds away. Spin briefly, then yield the CPU
    // (with more ranks than cores the peer needs it), then sleep on the doorbell.
    bool any_shm = false;
    for (auto& x : xfers) any_shm |= peers_[x.peer].shm;
    if (any_shm) {
      if (idle == 0) idle_since = MonoClock::now();
      if (++idle < kRingSpinIterations) {
        CpuRelax();
        continue;
      }
      if (MonoClock::now() - idle_since < yield_window_) {
        Pause();
        continue;
      }
    }
    RETURN_IF_ERROR(Block(ctx, xfers, silent_since));
  }
}

Status Mesh::Step(Xfer& x, OpCtx& ctx, bool* progressed) {
  Peer& p = peers_[x.peer];
  if (p.shm) return StepShm(x, ctx, progressed);
  return StepTcp(x, ctx, progressed);
}

Status Mesh::AfterBytes(Xfer& x, OpCtx& ctx) {
  if (!x.send && x.hdone == kDataHeaderSize && !x.header_checked) {
    Result<DataHeader> got = DecodeDataHeader(x.hbuf, UINT64_MAX);
    if (!got.ok())
      return Status(StatusCode::kProtocolError,
                    ctx.What() + ": from " + RankName(x.peer) + ": " + got.status().ToString());
    if (!(*got == x.header))
      return Status(StatusCode::kProtocolError,
                    ctx.What() + ": ranks disagree: " + RankName(x.peer) + " sent " +
                        DescribeHeader(*got) + ", " + RankName(rank_) + " expected " +
                        DescribeHeader(x.header));
    x.header_checked = true;
  }
  if (x.send && x.hdone == kDataHeaderSize) x.header_checked = true;
  if (!x.send && x.header_checked && x.on_data && x.done > x.notified) {
    size_t elem = DTypeSize(x.header.dtype);
    size_t upto = x.done == x.bytes ? x.done : x.done / elem * elem;
    if (upto > x.notified) {
      x.on_data(x.notified, upto);
      x.notified = upto;
    }
  }
  (void)ctx;
  return Status();
}

Status Mesh::StepTcp(Xfer& x, OpCtx& ctx, bool* progressed) {
  Peer& p = peers_[x.peer];
  if (x.send && x.hdone == 0 && x.done == 0) x.hbuf = EncodeDataHeader(x.header);
  iovec iov[2];
  int n = 0;
  if (x.hdone < kDataHeaderSize) iov[n++] = {x.hbuf.data() + x.hdone, kDataHeaderSize - x.hdone};
  if (x.done < x.bytes) iov[n++] = {x.data + x.done, x.bytes - x.done};
  ssize_t r;
  if (x.send) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    r = sendmsg(p.data_fds[x.conn], &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  } else {
    r = readv(p.data_fds[x.conn], iov, n);
  }
  if (r <= 0 && !(r == 0 && x.send)) {
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return Status();
    // A peer that failed first sends an abort notice before closing: prefer its reason (it
    // names the rank that really died) over "connection reset".
    const int err = errno;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    Status notice = HandleControl(x.peer);
    if (!notice.ok() && notice.message().find(" failed: ") != std::string_view::npos) return notice;
    errno = err;
  }
  if (r < 0) {
    return PeerGone(x.peer, std::string("failed during ") + ctx.What() + " (" +
                                (x.send ? "send: " : "receive: ") + std::strerror(errno) + ")");
  }
  if (r == 0 && !x.send)
    return PeerGone(x.peer, "closed its connection during " + ctx.What() +
                                (p.goodbye ? " (it left the communicator)" : " (it died)"));
  size_t got = static_cast<size_t>(r);
  *progressed = got > 0;
  size_t h = std::min(got, kDataHeaderSize - x.hdone);
  x.hdone += h;
  x.done += got - h;
  if (x.send)
    ctx.bytes_sent += got - h;
  else
    ctx.bytes_received += got - h;
  return AfterBytes(x, ctx);
}

Status Mesh::StepShm(Xfer& x, OpCtx& ctx, bool* progressed) {
  const size_t cap = ring_bytes_;
  if (x.send) {
    // Our ring lives in the receiver's segment, slot = our rank.
    void* base = peers_[x.peer].segment->base;
    RingHeader* ring = RingAt(base, rank_, cap);
    std::byte* data = RingData(base, rank_, cap);
    if (x.hdone == 0 && x.done == 0) x.hbuf = EncodeDataHeader(x.header);
    uint64_t head = ring->head.load(std::memory_order_relaxed);
    uint64_t tail = ring->tail.load(std::memory_order_acquire);
    size_t free_bytes = cap - static_cast<size_t>(head - tail);
    size_t wrote = 0;
    auto put = [&](const std::byte* src, size_t n) {
      n = std::min(n, free_bytes - wrote);
      size_t off = static_cast<size_t>((head + wrote) % cap);
      size_t first = std::min(n, cap - off);
      std::memcpy(data + off, src, first);
      if (n > first) std::memcpy(data, src + first, n - first);
      wrote += n;
      return n;
    };
    if (x.hdone < kDataHeaderSize)
      x.hdone += put(x.hbuf.data() + x.hdone, kDataHeaderSize - x.hdone);
    if (x.hdone == kDataHeaderSize && x.done < x.bytes) {
      size_t n = put(x.data + x.done, x.bytes - x.done);
      x.done += n;
      ctx.bytes_sent += n;
    }
    if (wrote) {
      ring->head.store(head + wrote, std::memory_order_release);
      Ring(x.peer);
      *progressed = true;
    } else if (peers_[x.peer].ctrl_closed) {
      return PeerGone(x.peer, "is gone: its ring is full during " + ctx.What());
    }
    return AfterBytes(x, ctx);
  }
  // Receive: the ring from x.peer lives in our segment, slot = x.peer.
  void* base = own_segment_->base;
  RingHeader* ring = RingAt(base, x.peer, cap);
  const std::byte* data = RingData(base, x.peer, cap);
  uint64_t tail = ring->tail.load(std::memory_order_relaxed);
  uint64_t head = ring->head.load(std::memory_order_acquire);
  size_t avail = static_cast<size_t>(head - tail);
  size_t took = 0;
  auto get = [&](std::byte* dst, size_t n) {
    n = std::min(n, avail - took);
    size_t off = static_cast<size_t>((tail + took) % cap);
    size_t first = std::min(n, cap - off);
    std::memcpy(dst, data + off, first);
    if (n > first) std::memcpy(dst + first, data, n - first);
    took += n;
    return n;
  };
  if (x.hdone < kDataHeaderSize) {
    x.hdone += get(x.hbuf.data() + x.hdone, kDataHeaderSize - x.hdone);
    if (x.hdone == kDataHeaderSize) RETURN_IF_ERROR(AfterBytes(x, ctx));
  }
  if (x.header_checked && x.done < x.bytes) {
    size_t n = get(x.data + x.done, x.bytes - x.done);
    x.done += n;
    ctx.bytes_received += n;
  }
  if (took) {
    ring->tail.store(tail + took, std::memory_order_release);
    Ring(x.peer);
    *progressed = true;
  } else if (peers_[x.peer].ctrl_closed) {
    return PeerGone(
        x.peer,
        std::string(peers_[x.peer].goodbye ? "left the communicator" : "died (connection closed)") +
            " while " + RankName(rank_) + " waited for its data in " + ctx.What());
  }
  return AfterBytes(x, ctx);
}

Status Mesh::Block(OpCtx& ctx, std::span<Xfer> xfers, MonoTime silent_since) {
  auto silent = MonoClock::now() - silent_since;
  if (silent >= op_timeout_) {
    std::string who;
    for (auto& x : xfers) {
      if (x.hdone == kDataHeaderSize && x.done == x.bytes && x.header_checked) continue;
      who += (who.empty() ? "" : ", ") + RankName(x.peer) + (x.send ? " (send)" : " (receive)");
    }
    return Status(StatusCode::kPeerFailed, ctx.What() + ": no progress for " +
                                               std::to_string(op_timeout_.count()) +
                                               " ms waiting on " + who);
  }
  int left_ms =
      static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(op_timeout_ - silent).count()) +
      1;
  bool any_shm = false, any_tcp = false;
  for (auto& x : xfers) (peers_[x.peer].shm ? any_shm : any_tcp) = true;
  if (any_shm) {
    auto* h = Header(own_segment_->base);
    uint32_t seen = h->doorbell.load(std::memory_order_seq_cst);
    h->sleeping.fetch_add(1, std::memory_order_seq_cst);
    // Re-check after announcing sleep: a peer may have rung in between.
    bool ready = false;
    for (auto& x : xfers) {
      if (!peers_[x.peer].shm) continue;
      if (x.hdone == kDataHeaderSize && x.done == x.bytes && x.header_checked) continue;
      if (x.send) {
        RingHeader* ring = RingAt(peers_[x.peer].segment->base, rank_, ring_bytes_);
        ready |= ring->head.load() - ring->tail.load() < ring_bytes_;
      } else {
        RingHeader* ring = RingAt(own_segment_->base, x.peer, ring_bytes_);
        ready |= ring->head.load() != ring->tail.load();
      }
    }
    if (!ready && !aborted()) FutexWait(&h->doorbell, seen, std::min(left_ms, any_tcp ? 1 : 20));
    h->sleeping.fetch_sub(1, std::memory_order_seq_cst);
    RETURN_IF_ERROR(CheckArenaMismatch(ctx));
    return PollControl(0, xfers, any_tcp);
  }
  return PollControl(std::min(left_ms, 1000), xfers, true);
}

}  // namespace rt::comm::tcp
