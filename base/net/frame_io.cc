#include "base/net/frame_io.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <array>

namespace rt::net {
namespace {

using asio::as_tuple;
using asio::use_awaitable;
using namespace asio::experimental::awaitable_operators;
using ErrorCode = boost::system::error_code;

// Maps an Asio error in an I/O on `peer` to a Status.
Status IoStatus(const ErrorCode& ec, std::string_view what, std::string_view peer) {
  std::string m = std::string(what) + " " + std::string(peer) + ": ";
  if (ec == asio::error::eof || ec == asio::error::connection_reset ||
      ec == asio::error::broken_pipe || ec == asio::error::connection_aborted)
    return Status(StatusCode::kUnavailable, m + "peer closed the connection (" + ec.message() + ")",
                  /*retryable=*/true);
  if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor)
    return Status(StatusCode::kAborted, m + "socket closed locally");
  return Status(StatusCode::kIoError, m + ec.message());
}

Status DeadlineStatus(std::string_view what, std::string_view peer) {
  return DeadlineExceeded(std::string(what) + " " + std::string(peer) + ": deadline exceeded");
}

// Races an Asio async operation (given as a deferred awaitable) against `deadline`.
// Returns the operation's error code, or std::nullopt when the deadline won.
template <typename Awaitable>
asio::awaitable<std::optional<std::tuple<ErrorCode, size_t>>> Race(Awaitable op, Deadline deadline) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_at(deadline.when());
  auto result = co_await (std::move(op) || timer.async_wait(as_tuple(use_awaitable)));
  if (result.index() == 0) co_return std::get<0>(result);
  co_return std::nullopt;
}

}  // namespace

asio::awaitable<Status> ReadExactly(tcp::socket& socket, std::span<std::byte> buffer,
                                    Deadline deadline, std::string_view peer) {
  if (buffer.empty()) co_return Status();
  auto r = co_await Race(
      asio::async_read(socket, asio::buffer(buffer.data(), buffer.size()), as_tuple(use_awaitable)),
      deadline);
  if (!r) co_return DeadlineStatus("reading from", peer);
  auto [ec, n] = *r;
  if (ec) co_return IoStatus(ec, "reading from", peer);
  co_return Status();
}

asio::awaitable<Status> WriteAll(tcp::socket& socket, std::span<const std::byte> buffer,
                                 Deadline deadline, std::string_view peer) {
  if (buffer.empty()) co_return Status();
  auto r = co_await Race(asio::async_write(socket, asio::buffer(buffer.data(), buffer.size()),
                                           as_tuple(use_awaitable)),
                         deadline);
  if (!r) co_return DeadlineStatus("writing to", peer);
  auto [ec, n] = *r;
  if (ec) co_return IoStatus(ec, "writing to", peer);
  co_return Status();
}

asio::awaitable<Result<Frame>> ReadFrame(tcp::socket& socket, uint32_t max_payload,
                                         Deadline deadline, std::string_view peer) {
  std::array<std::byte, kFrameHeaderSize> header_bytes;
  CO_RETURN_IF_ERROR(co_await ReadExactly(socket, header_bytes, deadline, peer));
  Result<FrameHeader> header = DecodeFrameHeader(header_bytes, max_payload);
  if (!header.ok()) co_return header.status().WithContext("frame from " + std::string(peer));
  Frame frame{*header, std::vector<std::byte>(header->length)};
  CO_RETURN_IF_ERROR(co_await ReadExactly(socket, frame.payload, deadline, peer));
  Status verified = VerifyFramePayload(frame.header, frame.payload);
  if (!verified.ok()) co_return verified.WithContext("frame from " + std::string(peer));
  co_return frame;
}

asio::awaitable<Status> WriteFrame(tcp::socket& socket, uint16_t type, uint32_t flags,
                                   uint32_t request_id, std::span<const std::byte> payload,
                                   Deadline deadline, std::string_view peer) {
  auto header = EncodeFrameHeader(type, flags, request_id, payload);
  std::array<asio::const_buffer, 2> buffers{asio::buffer(header.data(), header.size()),
                                            asio::buffer(payload.data(), payload.size())};
  auto r = co_await Race(asio::async_write(socket, buffers, as_tuple(use_awaitable)), deadline);
  if (!r) co_return DeadlineStatus("writing a frame to", peer);
  auto [ec, n] = *r;
  if (ec) co_return IoStatus(ec, "writing a frame to", peer);
  co_return Status();
}

asio::awaitable<void> SleepUntil(Deadline deadline) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_at(deadline.when());
  co_await timer.async_wait(as_tuple(use_awaitable));
}

asio::awaitable<Result<tcp::socket>> Connect(std::string host, uint16_t port, Deadline deadline,
                                             ConnectOptions options) {
  auto ex = co_await asio::this_coro::executor;
  const std::string name = host + ":" + std::to_string(port);
  tcp::resolver resolver(ex);
  asio::steady_timer timer(ex);
  timer.expires_at(deadline.when());
  auto resolved = co_await (resolver.async_resolve(host, std::to_string(port),
                                                   as_tuple(use_awaitable)) ||
                            timer.async_wait(as_tuple(use_awaitable)));
  if (resolved.index() == 1) co_return DeadlineStatus("resolving", name);
  auto [rec, endpoints] = std::get<0>(std::move(resolved));
  if (rec) co_return InvalidArgument("cannot resolve " + name + ": " + rec.message());

  auto backoff = options.initial_backoff;
  std::string last_error = "no attempt made";
  while (!deadline.Expired()) {
    for (const auto& entry : endpoints) {
      tcp::socket socket(ex);
      timer.expires_at(deadline.when());
      auto r = co_await (socket.async_connect(entry.endpoint(), as_tuple(use_awaitable)) ||
                         timer.async_wait(as_tuple(use_awaitable)));
      if (r.index() == 1)
        co_return DeadlineStatus("connecting to", name + " (last error: " + last_error + ")");
      auto [ec] = std::get<0>(r);
      if (!ec) {
        ErrorCode ignored;
        if (options.no_delay) socket.set_option(tcp::no_delay(true), ignored);
        co_return std::move(socket);
      }
      last_error = ec.message();
    }
    auto pause = Deadline::After(backoff).Min(deadline);
    co_await SleepUntil(pause);
    backoff = std::min(backoff * 2, options.max_backoff);
  }
  co_return Status(StatusCode::kUnavailable,
                   "connecting to " + name + ": deadline passed, last error: " + last_error,
                   /*retryable=*/true);
}

std::string RemoteName(const tcp::socket& socket) {
  ErrorCode ec;
  auto ep = socket.remote_endpoint(ec);
  if (ec) return "unconnected";
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

struct FrameWriter::Item {
  std::vector<std::byte> wire;
  Deadline deadline;
  std::optional<Status> done;
  std::unique_ptr<asio::steady_timer> wake;  // cancelled when `done` is set
};

asio::awaitable<Status> FrameWriter::Send(uint16_t type, uint32_t flags, uint32_t request_id,
                                          std::span<const std::byte> payload, Deadline deadline) {
  if (!failed_.ok()) co_return failed_;
  auto ex = co_await asio::this_coro::executor;
  auto item = std::make_shared<Item>(Item{EncodeFrame(type, flags, request_id, payload), deadline,
                                          std::nullopt, std::make_unique<asio::steady_timer>(ex)});
  item->wake->expires_at(MonoTime::max());
  queue_.push_back(item);
  if (!draining_) {
    draining_ = true;
    asio::co_spawn(ex, [self = shared_from_this()]() { return self->Drain(); }, asio::detached);
  }
  co_await item->wake->async_wait(as_tuple(use_awaitable));
  if (!item->done) co_return Aborted("frame writer to " + peer_ + " stopped");
  co_return *item->done;
}

asio::awaitable<void> FrameWriter::Drain() {
  while (!queue_.empty()) {
    auto item = queue_.front();
    queue_.pop_front();
    Status s = failed_;
    if (s.ok()) {
      if (item->deadline.Expired())
        s = DeadlineStatus("queued frame for", peer_);
      else
        s = co_await WriteAll(socket_, item->wire, item->deadline, peer_);
      // A failed or timed-out write leaves the stream out of step: the connection is done.
      if (!s.ok()) Fail(s);
    }
    item->done = s;
    item->wake->cancel();
  }
  draining_ = false;
}

void FrameWriter::Fail(Status why) {
  if (failed_.ok()) failed_ = why.ok() ? Aborted("frame writer to " + peer_ + " closed") : why;
  ErrorCode ignored;
  socket_.close(ignored);
  for (auto& item : queue_) {
    if (!item->done) {
      item->done = failed_;
      item->wake->cancel();
    }
  }
  queue_.clear();
}

}  // namespace rt::net
