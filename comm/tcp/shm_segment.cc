// A rank's shared-memory segment: creation, mapping, futex calls (comm/tcp/shm_segment.h).
#include "comm/tcp/shm_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <random>

namespace rt::comm::tcp {
namespace {

constexpr uint32_t kShmMagic = 0x53435452;  // "RTCS"

size_t SegmentBytes(int nranks, size_t ring_bytes, size_t arena_bytes) {
  return ArenaOffset(nranks, ring_bytes) + arena_bytes;
}

}  // namespace

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms) {
  timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}
void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

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
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != seg->bytes) {
    close(fd);
    return Status(StatusCode::kProtocolError,
                  "shared-memory segment " + name + " has the wrong size");
  }
  void* p = mmap(nullptr, seg->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) return ErrnoStatus(e, "mmap " + name);
  seg->base = p;
  auto* h = Header(p);
  if (h->magic != kShmMagic || h->nranks != static_cast<uint32_t>(nranks) ||
      h->ring_bytes != ring_bytes || h->arena_bytes != arena_bytes)
    return Status(StatusCode::kProtocolError,
                  "shared-memory segment " + name + " has a bad header");
  return seg;
}

}  // namespace rt::comm::tcp
