#include "comm/tcp/mesh.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

#include "base/frame.h"

namespace rt::comm::tcp {
namespace {

constexpr uint32_t kShmMagic = 0x53435452;  // "RTCS"
constexpr size_t kSegHeader = 512;
constexpr size_t kRingHeader = 128;

struct SegHeader {
  uint32_t magic;
  uint32_t nranks;
  uint64_t ring_bytes;
  uint64_t arena_bytes;
  // The owner's process id, the address of this header in the owner's mapping, and a random
  // nonce there: a peer that reads the nonce at that address in that process with
  // process_vm_readv knows it can read the owner's memory (single-copy all-reduce).
  int32_t pid;
  uint64_t own_address;
  uint64_t nonce;
  alignas(64) std::atomic<uint32_t> doorbell;
  std::atomic<uint32_t> sleeping;
  // Arena step counters, written only by the segment's owner (docs/formats/comm_wire.md).
  alignas(64) std::atomic<uint64_t> reduced;
  ArenaSlot slot[2];
  alignas(64) std::atomic<uint64_t> released;
  std::atomic<uint64_t> abandoned;
  alignas(64) std::atomic<uint64_t> progress;
  // Two-rank single-copy steps: where the ranks' blocks meet; written by both ranks (CAS).
  alignas(64) std::atomic<uint64_t> claim;
};
static_assert(sizeof(SegHeader) <= kSegHeader);

struct RingHeader {
  alignas(64) std::atomic<uint64_t> head;  // bytes ever written (producer)
  alignas(64) std::atomic<uint64_t> tail;  // bytes ever read (consumer)
};
static_assert(sizeof(RingHeader) <= kRingHeader);

size_t ArenaOffset(int nranks, size_t ring_bytes) {
  size_t end = kSegHeader + static_cast<size_t>(nranks) * (kRingHeader + ring_bytes);
  return (end + 4095) / 4096 * 4096;
}
size_t SegmentBytes(int nranks, size_t ring_bytes, size_t arena_bytes) {
  return ArenaOffset(nranks, ring_bytes) + arena_bytes;
}
SegHeader* Header(void* base) { return static_cast<SegHeader*>(base); }
RingHeader* RingAt(void* base, int slot, size_t ring_bytes) {
  return reinterpret_cast<RingHeader*>(static_cast<char*>(base) + kSegHeader +
                                       static_cast<size_t>(slot) * (kRingHeader + ring_bytes));
}
std::byte* RingData(void* base, int slot, size_t ring_bytes) {
  return reinterpret_cast<std::byte*>(RingAt(base, slot, ring_bytes)) + kRingHeader;
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms) {
  timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}
void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Busy polls of ExchangeParts before yielding: short, because with more ranks than cores
// spinning starves the peer we wait for.
constexpr int kRingSpinIterations = 64;

inline void CpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

std::string RankName(int r) { return "rank " + std::to_string(r); }

}  // namespace

ShmSegment::~ShmSegment() {
  if (base) munmap(base, bytes);
}

Result<std::unique_ptr<ShmSegment>> CreateShmSegment(const std::string& name, int nranks,
                                                     size_t ring_bytes, size_t arena_bytes) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return ErrnoStatus(errno, "shm_open " + name);
  auto seg = std::make_unique<ShmSegment>();
  seg->name = name;
  seg->bytes = SegmentBytes(nranks, ring_bytes, arena_bytes);
  if (ftruncate(fd, static_cast<off_t>(seg->bytes)) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(name.c_str());
    return ErrnoStatus(e, "ftruncate " + name);
  }
  void* p = mmap(nullptr, seg->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    return ErrnoStatus(e, "mmap " + name);
  }
  seg->base = p;
  auto* h = new (p) SegHeader{};
  h->nranks = static_cast<uint32_t>(nranks);
  h->ring_bytes = ring_bytes;
  h->arena_bytes = arena_bytes;
  h->pid = static_cast<int32_t>(getpid());
  h->own_address = reinterpret_cast<uint64_t>(p);
  std::random_device entropy;
  h->nonce = (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
  for (int s = 0; s < nranks; ++s) new (RingAt(p, s, ring_bytes)) RingHeader{};
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kShmMagic;
  return seg;
}

Result<std::unique_ptr<ShmSegment>> OpenShmSegment(const std::string& name, int nranks,
                                                   size_t ring_bytes, size_t arena_bytes) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return ErrnoStatus(errno, "shm_open " + name);
  auto seg = std::make_unique<ShmSegment>();
  seg->name = name;
  seg->bytes = SegmentBytes(nranks, ring_bytes, arena_bytes);
  struct stat st{};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != seg->bytes) {
    close(fd);
    return Status(StatusCode::kProtocolError, "shared-memory segment " + name + " has the wrong size");
  }
  void* p = mmap(nullptr, seg->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) return ErrnoStatus(e, "mmap " + name);
  seg->base = p;
  auto* h = Header(p);
  if (h->magic != kShmMagic || h->nranks != static_cast<uint32_t>(nranks) ||
      h->ring_bytes != ring_bytes || h->arena_bytes != arena_bytes)
    return Status(StatusCode::kProtocolError, "shared-memory segment " + name + " has a bad header");
  return seg;
}

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
  if (own_segment_) {
    auto* h = Header(own_segment_->base);
    h->doorbell.fetch_add(1);
    FutexWake(&h->doorbell);
  }
}

std::atomic<uint32_t>* Mesh::Doorbell(int r) {
  void* base = r == rank_ ? own_segment_->base : peers_[r].segment->base;
  return &Header(base)->doorbell;
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
      const size_t from = elems / k * c * elem, to = c + 1 == k ? x.bytes : elems / k * (c + 1) * elem;
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
      return Status(StatusCode::kProtocolError, ctx.What() + ": from " + RankName(x.peer) + ": " +
                                                    got.status().ToString());
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
  if (x.send) ctx.bytes_sent += got - h; else ctx.bytes_received += got - h;
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
    if (x.hdone < kDataHeaderSize) x.hdone += put(x.hbuf.data() + x.hdone, kDataHeaderSize - x.hdone);
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
    return PeerGone(x.peer, std::string(peers_[x.peer].goodbye ? "left the communicator"
                                                                : "died (connection closed)") +
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
    return Status(StatusCode::kPeerFailed,
                  ctx.What() + ": no progress for " +
                      std::to_string(op_timeout_.count()) + " ms waiting on " + who);
  }
  int left_ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(op_timeout_ - silent).count()) + 1;
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

Status Mesh::PollControl(int timeout_ms, std::span<Xfer> xfers, bool include_data) {
  std::vector<pollfd> fds;
  std::vector<int> who;  // peer of each control entry, -1 for data/abort entries
  fds.push_back({abort_fd_, POLLIN, 0});
  who.push_back(-1);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || peers_[r].ctrl_fd < 0 || peers_[r].ctrl_closed) continue;
    fds.push_back({peers_[r].ctrl_fd, POLLIN, 0});
    who.push_back(r);
  }
  if (include_data) {
    for (auto& x : xfers) {
      if (peers_[x.peer].shm || peers_[x.peer].data_fd < 0) continue;
      if (x.hdone == kDataHeaderSize && x.done == x.bytes && x.header_checked) continue;
      fds.push_back({peers_[x.peer].data_fds[x.conn], static_cast<short>(x.send ? POLLOUT : POLLIN), 0});
      who.push_back(-1);
    }
  }
  int n = poll(fds.data(), fds.size(), timeout_ms);
  if (n < 0 && errno != EINTR) return ErrnoStatus(errno, "poll");
  if (aborted()) return Status(StatusCode::kCommAborted, "communicator aborted");
  for (size_t i = 0; i < fds.size(); ++i) {
    if (who[i] < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    RETURN_IF_ERROR(HandleControl(who[i]));
  }
  return Status();
}

Status Mesh::HandleControl(int r) {
  Peer& p = peers_[r];
  char buf[4096];
  while (true) {
    ssize_t got = recv(p.ctrl_fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (got > 0) {
      p.ctrl_in.append(buf, static_cast<size_t>(got));
      continue;
    }
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (got < 0 && errno == EINTR) continue;
    p.ctrl_closed = true;  // EOF or error
    break;
  }
  while (!p.ctrl_in.empty()) {
    size_t used = 0;
    auto bytes = std::span<const std::byte>(reinterpret_cast<const std::byte*>(p.ctrl_in.data()),
                                            p.ctrl_in.size());
    Result<Frame> f = DecodeFrame(bytes, 1 << 20, &used);
    if (!f.ok()) {
      if (f.status().code() == StatusCode::kOutOfRange) break;  // incomplete
      return Status(StatusCode::kProtocolError,
                    RankName(r) + " sent a bad control frame: " + f.status().ToString());
    }
    p.ctrl_in.erase(0, used);
    if (f->header.type == kGoodbye) {
      p.goodbye = true;
    } else if (f->header.type == kAbortNotice) {
      std::string reason(reinterpret_cast<const char*>(f->payload.data()), f->payload.size());
      return Status(StatusCode::kPeerFailed, RankName(r) + " failed: " + reason);
    }
  }
  if (p.ctrl_closed && !p.goodbye)
    return PeerGone(r, "died (its connection closed without a goodbye)");
  return Status();
}

namespace {
void WriteFrameNoWait(int fd, uint16_t type, std::span<const std::byte> payload) {
  if (fd < 0) return;
  auto wire = EncodeFrame(type, 0, 0, payload);
  (void)!send(fd, wire.data(), wire.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}
}  // namespace

void Mesh::SendGoodbye() {
  for (int r = 0; r < size_; ++r)
    if (r != rank_) WriteFrameNoWait(peers_[r].ctrl_fd, kGoodbye, {});
}

void Mesh::SendAbortNotice(const std::string& reason) {
  auto payload = std::span<const std::byte>(reinterpret_cast<const std::byte*>(reason.data()),
                                            reason.size());
  for (int r = 0; r < size_; ++r)
    if (r != rank_) WriteFrameNoWait(peers_[r].ctrl_fd, kAbortNotice, payload);
}

Status Mesh::ControlBarrier(uint16_t type, Deadline deadline) {
  std::vector<bool> seen(size_, false);
  seen[rank_] = true;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    auto wire = EncodeFrame(type, 0, 0, {});
    if (send(peers_[r].ctrl_fd, wire.data(), wire.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(wire.size()))
      return PeerGone(r, std::string("unreachable during bootstrap: ") + std::strerror(errno));
  }
  while (true) {
    bool all = true;
    for (int r = 0; r < size_; ++r) all &= static_cast<bool>(seen[r]);
    if (all) return Status();
    if (aborted()) return Status(StatusCode::kCommAborted, "bootstrap aborted");
    if (deadline.Expired()) {
      std::string missing;
      for (int r = 0; r < size_; ++r)
        if (!seen[r]) missing += (missing.empty() ? "" : ", ") + RankName(r);
      return Status(StatusCode::kPeerFailed, "bootstrap: no ready message from " + missing);
    }
    std::vector<pollfd> fds{{abort_fd_, POLLIN, 0}};
    std::vector<int> who{-1};
    for (int r = 0; r < size_; ++r)
      if (!seen[r]) {
        fds.push_back({peers_[r].ctrl_fd, POLLIN, 0});
        who.push_back(r);
      }
    int timeout = static_cast<int>(std::min<int64_t>(deadline.RemainingMs() + 1, 100));
    if (poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) return ErrnoStatus(errno, "poll");
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int r = who[i];
      Peer& p = peers_[r];
      char buf[256];
      ssize_t got = recv(p.ctrl_fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (got == 0) return PeerGone(r, "died during bootstrap (connection closed)");
      if (got < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        return PeerGone(r, std::string("failed during bootstrap: ") + std::strerror(errno));
      }
      p.ctrl_in.append(buf, static_cast<size_t>(got));
      size_t used = 0;
      auto bytes = std::span<const std::byte>(reinterpret_cast<const std::byte*>(p.ctrl_in.data()),
                                              p.ctrl_in.size());
      Result<Frame> f = DecodeFrame(bytes, 1 << 20, &used);
      if (!f.ok()) {
        if (f.status().code() == StatusCode::kOutOfRange) continue;
        return Status(StatusCode::kProtocolError, RankName(r) + ": bad bootstrap frame");
      }
      p.ctrl_in.erase(0, used);
      if (f->header.type == type) seen[r] = true;
      else if (f->header.type == kAbortNotice)
        return PeerGone(r, "failed during bootstrap: " + ToString(f->payload));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Arena (direct shared-memory collectives)

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
    iovec remote{reinterpret_cast<void*>(h->own_address + offsetof(SegHeader, nonce)), sizeof(seen)};
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
                    ctx.What() + ": reading " + RankName(q) + "'s buffer failed: " +
                        (got < 0 ? std::strerror(errno) : "nothing read"));
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
      int left_ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(op_timeout_ - waited).count()) + 1;
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
                  ctx.What() + ": ranks disagree: " + RankName(q) + " sent " + DescribeHeader(*got) +
                      " over its ring, " + RankName(rank_) + " expected " +
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
