#include "iofs/net/read_ring.h"

#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/log.h"
#include "iofs/engine/uring_executor.h"

namespace rt::iofs {
namespace {

namespace asio = boost::asio;

// One read in flight. Owned by the coroutine that waits for it; the ring only completes it.
struct ReadOp {
  explicit ReadOp(asio::io_context& io) : done(io, asio::steady_timer::time_point::max()) {}
  int result = 0;
  bool completed = false;
  asio::steady_timer done;  // cancelled when the read completes
};

class ReadRingImpl final : public ReadRing {
 public:
  ReadRingImpl(asio::io_context& io) : io_(io), events_(io), retry_(io) {}

  ~ReadRingImpl() override {
    // The coroutines that own the ops in flight are gone with the io_context; the kernel still
    // writes their memory until it completes them, so wait for that (bounded) before the ring goes.
    // Reads it never took are dropped with the ring.
    const Deadline grace = Deadline::AfterMs(kCallerMemoryGraceMs);
    in_flight_ -= unsubmitted_;
    while (in_flight_ > 0 && ring_ready_ && !grace.Expired()) {
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec ts{0, 10'000'000};
      if (io_uring_wait_cqe_timeout(&ring_, &cqe, &ts) == 0 && cqe) {
        --in_flight_;
        io_uring_cqe_seen(&ring_, cqe);
      }
    }
    boost::system::error_code ec;
    events_.close(ec);  // closes the eventfd
    if (ring_ready_) io_uring_queue_exit(&ring_);
  }

  Status Init(unsigned depth) {
    int rc = io_uring_queue_init(depth, &ring_, 0);
    if (rc < 0) return ErrnoStatus(-rc, "io_uring_queue_init for the read ring");
    ring_ready_ = true;
    const int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (efd < 0) return ErrnoStatus(errno, "eventfd for the read ring");
    events_.assign(efd);
    rc = io_uring_register_eventfd(&ring_, efd);
    if (rc < 0) return ErrnoStatus(-rc, "io_uring_register_eventfd");
    return Status();
  }

  asio::awaitable<int> Read(int fd, std::byte* dest, uint32_t length, uint64_t offset) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) co_return -EBUSY;
    ReadOp op(io_);
    io_uring_prep_read(sqe, fd, dest, length, offset);
    io_uring_sqe_set_data(sqe, &op);
    ++unsubmitted_;
    if (!submit_posted_) {  // after the handlers ready now, which may queue more reads
      submit_posted_ = true;
      asio::post(io_, [this] { Submit(); });
    }
    if (in_flight_++ == 0 && !draining_) {
      draining_ = true;
      asio::co_spawn(io_, Drain(), asio::detached);
    }
    const Deadline grace = Deadline::AfterMs(kCallerMemoryGraceMs);
    op.done.expires_at(grace.when());
    while (!op.completed) {
      (void)co_await op.done.async_wait(asio::as_tuple(asio::use_awaitable));
      if (!op.completed && grace.Expired())
        internal::AbortWithMessage("read ring: a read of " + std::to_string(length) + " bytes at " +
                                   std::to_string(offset) + " did not complete in " +
                                   std::to_string(kCallerMemoryGraceMs) + " ms");
    }
    co_return op.result;
  }

  uint64_t reads_completed() const override { return completed_; }
  uint64_t submissions() const override { return submissions_; }

 private:
  // Hands the kernel every read queued since the last call. The queued entries stay in the
  // submission ring until the kernel takes them (their coroutines wait for them whatever
  // happens), so a refused submission is retried: at once for what the kernel did not take,
  // after 1 ms when it refused (a full completion queue is reaped meanwhile).
  void Submit() {
    submit_posted_ = false;
    if (unsubmitted_ == 0) return;
    const int rc = io_uring_submit(&ring_);
    if (rc > 0) {
      unsubmitted_ -= rc;
      ++submissions_;
      submit_failing_ = false;
    } else if (!submit_failing_) {
      submit_failing_ = true;
      LOG_WARN("read ring: io_uring_submit of {} read(s): {} (retrying every millisecond)",
               unsubmitted_, rc < 0 ? std::strerror(-rc) : "none taken");
    }
    if (unsubmitted_ == 0) return;
    submit_posted_ = true;
    if (rc > 0) {
      asio::post(io_, [this] { Submit(); });
      return;
    }
    Reap();
    retry_.expires_after(std::chrono::milliseconds(1));
    retry_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;  // cancelled: the ring is going
      Submit();
    });
  }

  // Reaps completions whenever the eventfd says there are some, while reads are in flight.
  asio::awaitable<void> Drain() {
    uint64_t count = 0;
    while (in_flight_ > 0) {
      auto [ec, n] = co_await events_.async_read_some(asio::buffer(&count, sizeof(count)),
                                                      asio::as_tuple(asio::use_awaitable));
      if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
        LOG_ERROR("read ring: waiting on its eventfd failed: {}", ec.message());
        break;
      }
      Reap();
    }
    draining_ = false;
  }

  void Reap() {
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe) {
      auto* op = static_cast<ReadOp*>(io_uring_cqe_get_data(cqe));
      op->result = cqe->res;
      op->completed = true;
      op->done.cancel();
      --in_flight_;
      ++completed_;
      io_uring_cqe_seen(&ring_, cqe);
    }
  }

  asio::io_context& io_;
  io_uring ring_{};
  bool ring_ready_ = false;
  asio::posix::stream_descriptor events_;
  asio::steady_timer retry_;  // a refused submission's next try
  int unsubmitted_ = 0;       // reads queued in the submission ring, not yet taken by the kernel
  bool submit_posted_ = false;
  bool submit_failing_ = false;  // the last try was refused (logged once until one succeeds)
  uint64_t submissions_ = 0;
  int in_flight_ = 0;
  bool draining_ = false;
  uint64_t completed_ = 0;
};

}  // namespace

Result<std::unique_ptr<ReadRing>> ReadRing::Create(asio::io_context& io, unsigned depth) {
  auto ring = std::make_unique<ReadRingImpl>(io);
  RETURN_IF_ERROR(ring->Init(depth));
  return std::unique_ptr<ReadRing>(std::move(ring));
}

}  // namespace rt::iofs
