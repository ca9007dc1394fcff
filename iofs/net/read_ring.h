// ReadRing: an io_uring that belongs to one asio I/O thread. Coroutines on that thread submit
// reads to it directly and resume on the same thread when the kernel completes them (the ring's
// eventfd is watched by the thread's io_context): no other thread, lock or wake-up is involved,
// which is what a small random read costs most of when it is handed between threads. The reads
// that coroutines ask for in one turn of the io_context go to the kernel in one system call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include "base/status.h"

namespace rt::iofs {

// Use from the io_context's own thread only.
class ReadRing {
 public:
  // A ring of `depth` entries whose completions run on `io`'s thread. Errors: IoError naming the
  // failing io_uring or eventfd call.
  static Result<std::unique_ptr<ReadRing>> Create(boost::asio::io_context& io, unsigned depth);
  // Waits (bounded) for reads still in flight: the kernel writes their memory until they end.
  virtual ~ReadRing() = default;

  // Reads `length` bytes at `offset` of `fd` (O_DIRECT: 4096-aligned memory, offset, length)
  // into `dest` and returns the bytes read or -errno; -EBUSY when the ring is full (the caller
  // reads another way). The read is submitted once the io_context's ready handlers have run,
  // together with every other read they asked for. Waits until the kernel completed the read,
  // however long: `dest` is written until then. A read that has not completed
  // kCallerMemoryGraceMs (uring_executor.h) after it was asked for aborts the process, as the
  // engine's own ring does.
  virtual boost::asio::awaitable<int> Read(int fd, std::byte* dest, uint32_t length,
                                           uint64_t offset) = 0;
  // Reads completed so far (for tests and stats).
  virtual uint64_t reads_completed() const = 0;
  // Submissions that handed the kernel at least one read so far (for tests and stats).
  virtual uint64_t submissions() const = 0;
};

}  // namespace rt::iofs
