// UringExecutor: one io_uring instance with registered buffers and registered files, driven by
// one thread that submits queued operations in batches and completes them. Callers on any thread
// hand it a batch of operations and wait (with a deadline) for all of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/status.h"

namespace rt::iofs {

// One I/O operation on a registered file. `buffer` is the index of a registered buffer for
// kRead/kWrite; `data` points into that buffer. A kRead may instead have `buffer` -1 and `data`
// in the caller's own memory (4096-byte aligned): a read straight into its destination.
// `offset` and `length` must be multiples of 4096 (O_DIRECT). The result is filled in by the
// executor.
struct IoOp {
  enum class Kind : uint8_t { kRead, kWrite, kDataSync };
  Kind kind = Kind::kRead;
  int file = -1;    // registered file slot
  int buffer = -1;  // registered buffer index (unused for kDataSync)
  std::byte* data = nullptr;
  uint32_t length = 0;
  uint64_t offset = 0;
  int result = 0;  // bytes transferred, or -errno
};

// Options for the executor.
struct UringOptions {
  int queue_depth = 32;          // io_uring submission queue entries; also max ops in flight
  int buffer_count = 16;         // registered buffers
  size_t buffer_size = 4 << 20;  // bytes per registered buffer (a multiple of 4096)
  int max_files = 1024;          // registered file table size
};

// A registered buffer handed out by the executor; returned with ReleaseBuffer.
struct IoBuffer {
  int index = -1;
  std::byte* data = nullptr;
  size_t size = 0;
};

// How long past its deadline a read into caller memory is waited for (see UringExecutor::Run).
inline constexpr int64_t kCallerMemoryGraceMs = 60'000;

// Thread-safe. Destroying it waits for operations in flight, then closes the ring.
class UringExecutor {
 public:
  // Creates the ring, allocates and registers the buffers, starts the completion thread.
  // Errors: IoError naming the failing io_uring call (e.g. io_uring disabled by the kernel).
  static Result<std::unique_ptr<UringExecutor>> Create(const UringOptions& options);
  virtual ~UringExecutor() = default;

  // Registers `fd` (opened with O_DIRECT) in slot `slot` of the file table. The caller keeps
  // ownership of the descriptor and must keep it open while the slot is in use.
  virtual Status RegisterFile(int slot, int fd) = 0;

  // Takes `n` free registered buffers at once (all or none, so concurrent callers cannot
  // deadlock), waiting until they are free or `deadline` passes (DeadlineExceeded).
  // InvalidArgument if n exceeds the number of buffers.
  virtual Result<std::vector<IoBuffer>> AcquireBuffers(int n, Deadline deadline) = 0;
  // Gives a buffer back.
  virtual void ReleaseBuffer(const IoBuffer& buffer) = 0;

  // Submits every op of `ops` as one batch and waits until all have completed, filling each
  // op's `result`. Returns OK when every op completed (check each result for -errno or a short
  // transfer). DeadlineExceeded if they had not by `deadline`: the executor then takes over the
  // ops' registered buffers and releases them when the ops complete, so the caller must not
  // release them (or touch their memory) itself. A batch with a read into the caller's memory
  // (buffer -1) is waited for past `deadline` until it completes, since the kernel writes that
  // memory until then; a device that does not complete it within kCallerMemoryGraceMs more aborts
  // the process (returning would let the kernel write memory the caller has moved on from).
  virtual Status Run(std::span<IoOp> ops, Deadline deadline) = 0;

  // Operations completed and batches submitted so far (for tests and stats).
  virtual uint64_t ops_completed() const = 0;
  virtual uint64_t batches_submitted() const = 0;
};

}  // namespace rt::iofs
