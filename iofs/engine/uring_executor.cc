#include "iofs/engine/uring_executor.h"

#include <liburing.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace rt::iofs {
namespace {

constexpr uint64_t kWakeTag = 0;  // user_data of the eventfd read

// A batch handed to the ring thread. Shared between the caller and the thread.
struct Batch {
  std::vector<IoOp> ops;
  std::mutex mu;
  std::condition_variable cv;
  size_t remaining = 0;    // GUARDED_BY(mu)
  bool abandoned = false;  // GUARDED_BY(mu)
};

// One op of a batch as the ring thread sees it.
struct Pending {
  std::shared_ptr<Batch> batch;
  size_t index = 0;
};

class UringExecutorImpl final : public UringExecutor {
 public:
  explicit UringExecutorImpl(UringOptions options) : options_(options) {}

  ~UringExecutorImpl() override {
    if (thread_.joinable()) {
      {
        std::lock_guard lock(mu_);
        stopping_ = true;
      }
      Wake();
      thread_.join();
    }
    if (ring_ready_) io_uring_queue_exit(&ring_);
    if (event_fd_ >= 0) close(event_fd_);
    if (arena_ != nullptr) munmap(arena_, arena_bytes_);
  }

  Status Init() {
    if (options_.queue_depth < 1 || options_.queue_depth > 4096)
      return InvalidArgument("io_uring queue_depth " + std::to_string(options_.queue_depth) +
                             " is outside [1, 4096]");
    if (options_.buffer_size % 4096 != 0 || options_.buffer_size == 0)
      return InvalidArgument("io_uring buffer_size must be a positive multiple of 4096");
    // One extra entry for the wake-up read on the eventfd.
    int rc = io_uring_queue_init(static_cast<unsigned>(options_.queue_depth + 1), &ring_, 0);
    if (rc < 0) return ErrnoStatus(-rc, "io_uring_queue_init");
    ring_ready_ = true;
    const size_t total = options_.buffer_size * static_cast<size_t>(options_.buffer_count);
    // Mapped on its own (zeroed) and left out of fork(): the kernel copies pinned pages into a
    // forked child at once, so every worker the daemon starts would copy all of them.
    void* arena = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED)
      return ErrnoStatus(errno, "map " + std::to_string(total) + " bytes of I/O buffers");
    arena_ = arena;
    arena_bytes_ = total;
    if (madvise(arena_, total, MADV_DONTFORK) != 0)
      return ErrnoStatus(errno, "madvise(MADV_DONTFORK) of the I/O buffers");
    std::vector<iovec> iovs(options_.buffer_count);
    for (int i = 0; i < options_.buffer_count; ++i) {
      iovs[i].iov_base = static_cast<std::byte*>(arena_) + options_.buffer_size * i;
      iovs[i].iov_len = options_.buffer_size;
      free_buffers_.push_back(i);
    }
    rc = io_uring_register_buffers(&ring_, iovs.data(), static_cast<unsigned>(iovs.size()));
    if (rc < 0) return ErrnoStatus(-rc, "io_uring_register_buffers");
    rc = io_uring_register_files_sparse(&ring_, static_cast<unsigned>(options_.max_files));
    if (rc < 0) return ErrnoStatus(-rc, "io_uring_register_files_sparse");
    event_fd_ = eventfd(0, EFD_CLOEXEC);
    if (event_fd_ < 0) return ErrnoStatus(errno, "eventfd for the io_uring thread");
    ArmWakeRead();
    rc = io_uring_submit(&ring_);
    if (rc < 0) return ErrnoStatus(-rc, "io_uring_submit of the wake-up read");
    thread_ = std::thread([this] { Loop(); });
    return Status();
  }

  Status RegisterFile(int slot, int fd) override {
    if (slot < 0 || slot >= options_.max_files)
      return OutOfRange("registered file slot " + std::to_string(slot) + " outside [0, " +
                        std::to_string(options_.max_files) + ")");
    std::lock_guard lock(register_mu_);
    int rc = io_uring_register_files_update(&ring_, static_cast<unsigned>(slot), &fd, 1);
    if (rc < 0)
      return ErrnoStatus(-rc, "io_uring_register_files_update slot " + std::to_string(slot));
    return Status();
  }

  Result<std::vector<IoBuffer>> AcquireBuffers(int n, Deadline deadline) override {
    if (n < 0 || n > options_.buffer_count)
      return InvalidArgument("asked for " + std::to_string(n) + " I/O buffers, only " +
                             std::to_string(options_.buffer_count) + " exist");
    std::unique_lock lock(buffer_mu_);
    if (!buffer_cv_.wait_until(lock, deadline.when(),
                               [&] { return free_buffers_.size() >= static_cast<size_t>(n); }))
      return DeadlineExceeded("no " + std::to_string(n) + " free registered I/O buffers (" +
                              std::to_string(free_buffers_.size()) + " of " +
                              std::to_string(options_.buffer_count) + " free)");
    std::vector<IoBuffer> out;
    for (int i = 0; i < n; ++i) {
      const int index = free_buffers_.back();
      free_buffers_.pop_back();
      out.push_back(IoBuffer{index, static_cast<std::byte*>(arena_) + options_.buffer_size * index,
                             options_.buffer_size});
    }
    return out;
  }

  void ReleaseBuffer(const IoBuffer& buffer) override {
    {
      std::lock_guard lock(buffer_mu_);
      free_buffers_.push_back(buffer.index);
    }
    buffer_cv_.notify_all();
  }

  Status Run(std::span<IoOp> ops, Deadline deadline) override {
    if (ops.empty()) return Status();
    auto batch = std::make_shared<Batch>();
    batch->ops.assign(ops.begin(), ops.end());
    batch->remaining = ops.size();
    {
      std::lock_guard lock(mu_);
      if (stopping_) return Aborted("io_uring executor is shutting down");
      for (size_t i = 0; i < ops.size(); ++i) queue_.push_back(Pending{batch, i});
    }
    Wake();
    std::unique_lock lock(batch->mu);
    if (!batch->cv.wait_until(lock, deadline.when(), [&] { return batch->remaining == 0; })) {
      const std::string late = std::to_string(batch->remaining) + " of " +
                               std::to_string(ops.size()) + " io_uring operations still in flight";
      const bool caller_memory = std::any_of(ops.begin(), ops.end(), [](const IoOp& op) {
        return op.kind == IoOp::Kind::kRead && op.buffer < 0;
      });
      if (!caller_memory) {
        batch->abandoned = true;
        return DeadlineExceeded(late);
      }
      // The kernel writes the caller's memory until the read completes: wait for it.
      const Deadline grace = Deadline::AfterMs(kCallerMemoryGraceMs);
      if (!batch->cv.wait_until(lock, grace.when(), [&] { return batch->remaining == 0; })) {
        internal::AbortWithMessage("io_uring: " + late +
                                   ", a read into caller memory among them, " +
                                   std::to_string(kCallerMemoryGraceMs) + " ms past the deadline");
      }
      return DeadlineExceeded(late + " at the deadline (completed since)");
    }
    for (size_t i = 0; i < ops.size(); ++i) ops[i].result = batch->ops[i].result;
    return Status();
  }

  uint64_t ops_completed() const override { return ops_completed_.load(); }
  uint64_t batches_submitted() const override { return batches_.load(); }

 private:
  void Wake() {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(event_fd_, &one, sizeof(one));
  }

  void ArmWakeRead() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_read(sqe, event_fd_, &wake_value_, sizeof(wake_value_), 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  // Moves queued ops into the ring up to the queue depth; returns how many were prepared.
  int PrepareQueued() {
    int prepared = 0;
    std::lock_guard lock(mu_);
    while (!queue_.empty() && in_flight_ < options_.queue_depth) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) break;
      Pending p = std::move(queue_.front());
      queue_.pop_front();
      IoOp& op = p.batch->ops[p.index];
      switch (op.kind) {
        case IoOp::Kind::kRead:
          if (op.buffer < 0) {
            io_uring_prep_read(sqe, op.file, op.data, op.length, op.offset);
          } else {
            io_uring_prep_read_fixed(sqe, op.file, op.data, op.length, op.offset, op.buffer);
          }
          break;
        case IoOp::Kind::kWrite:
          io_uring_prep_write_fixed(sqe, op.file, op.data, op.length, op.offset, op.buffer);
          break;
        case IoOp::Kind::kDataSync:
          io_uring_prep_fsync(sqe, op.file, IORING_FSYNC_DATASYNC);
          break;
      }
      sqe->flags |= IOSQE_FIXED_FILE;
      auto* slot = new Pending(std::move(p));
      io_uring_sqe_set_data(sqe, slot);
      ++in_flight_;
      ++prepared;
    }
    return prepared;
  }

  void Complete(Pending* p, int res) {
    std::shared_ptr<Batch> batch = std::move(p->batch);
    const size_t index = p->index;
    delete p;
    --in_flight_;
    ops_completed_.fetch_add(1);
    bool release = false;
    {
      std::lock_guard lock(batch->mu);
      batch->ops[index].result = res;
      --batch->remaining;
      release = batch->abandoned && batch->remaining == 0;
      if (batch->remaining == 0) batch->cv.notify_all();
    }
    if (release) {
      // The caller gave up waiting: give back the buffers it handed over.
      std::vector<int> seen;
      for (const IoOp& op : batch->ops) {
        if (op.buffer < 0 || std::find(seen.begin(), seen.end(), op.buffer) != seen.end()) continue;
        seen.push_back(op.buffer);
        ReleaseBuffer(IoBuffer{op.buffer, nullptr, 0});
      }
    }
  }

  void Loop() {
    for (;;) {
      {
        std::lock_guard lock(mu_);
        if (stopping_ && queue_.empty() && in_flight_ == 0) return;
      }
      if (PrepareQueued() > 0) batches_.fetch_add(1);
      int rc = io_uring_submit_and_wait(&ring_, 1);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        // The ring itself failed: fail everything queued so no caller waits forever.
        FailAll(rc);
        return;
      }
      io_uring_cqe* cqe = nullptr;
      unsigned head;
      unsigned seen = 0;
      bool rearm = false;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        if (cqe->user_data == kWakeTag) {
          rearm = true;
        } else {
          Complete(static_cast<Pending*>(io_uring_cqe_get_data(cqe)), cqe->res);
        }
      }
      io_uring_cq_advance(&ring_, seen);
      if (rearm) ArmWakeRead();
    }
  }

  void FailAll(int rc) {
    std::deque<Pending> queued;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      queued.swap(queue_);
    }
    for (Pending& p : queued) {
      ++in_flight_;  // Complete() counts it down
      Complete(new Pending(std::move(p)), rc);
    }
  }

  const UringOptions options_;
  io_uring ring_{};
  bool ring_ready_ = false;
  void* arena_ = nullptr;  // the registered I/O buffers (mmap, MADV_DONTFORK)
  size_t arena_bytes_ = 0;
  int event_fd_ = -1;
  uint64_t wake_value_ = 0;
  std::thread thread_;
  int in_flight_ = 0;  // touched by the ring thread only

  std::mutex mu_;
  std::deque<Pending> queue_;  // GUARDED_BY(mu_)
  bool stopping_ = false;      // GUARDED_BY(mu_)

  std::mutex register_mu_;

  std::mutex buffer_mu_;
  std::condition_variable buffer_cv_;
  std::vector<int> free_buffers_;  // GUARDED_BY(buffer_mu_)

  std::atomic<uint64_t> ops_completed_{0};
  std::atomic<uint64_t> batches_{0};
};

}  // namespace

Result<std::unique_ptr<UringExecutor>> UringExecutor::Create(const UringOptions& options) {
  auto executor = std::make_unique<UringExecutorImpl>(options);
  RETURN_IF_ERROR(executor->Init());
  return std::unique_ptr<UringExecutor>(std::move(executor));
}

}  // namespace rt::iofs
