#include "base/net/frame_io.h"

#include <sys/socket.h>

#include <array>
#include <cstring>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "base/crc32c.h"
#include "base/net/tls.h"

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
  if (IsTlsTruncation(ec))
    return Status(StatusCode::kUnavailable, m + "peer closed the connection", /*retryable=*/true);
  // A TLS alert (e.g. the peer refused our certificate) or a record that fails its MAC.
  if (IsTlsError(ec)) return Unauthenticated(m + "TLS: " + ec.message());
  return Status(StatusCode::kIoError, m + ec.message());
}

Status DeadlineStatus(std::string_view what, std::string_view peer) {
  return DeadlineExceeded(std::string(what) + " " + std::string(peer) + ": deadline exceeded");
}

// Races an Asio async operation (given as a deferred awaitable) against `deadline`.
// Returns the operation's error code, or std::nullopt when the deadline won.
template <typename Awaitable>
asio::awaitable<std::optional<std::tuple<ErrorCode, size_t>>> Race(Awaitable op,
                                                                   Deadline deadline) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_at(deadline.when());
  auto result = co_await (std::move(op) || timer.async_wait(as_tuple(use_awaitable)));
  if (result.index() == 0) co_return std::get<0>(result);
  co_return std::nullopt;
}

void PutU32(std::byte* at, uint32_t v) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<std::byte>(v >> (8 * i));
}

// Offsets of the header fields that EncodeGatherHeader fills in (docs/formats/frame.md).
constexpr size_t kLengthOffset = 16;
constexpr size_t kCrcOffset = 20;

std::vector<asio::const_buffer> Buffers(std::span<const std::byte> header, Pieces pieces) {
  std::vector<asio::const_buffer> buffers;
  buffers.reserve(pieces.size() + 1);
  buffers.push_back(asio::buffer(header.data(), header.size()));
  for (const auto& p : pieces)
    if (!p.empty()) buffers.push_back(asio::buffer(p.data(), p.size()));
  return buffers;
}

using RaceResult = std::optional<std::tuple<ErrorCode, size_t>>;

}  // namespace

std::array<std::byte, kFrameHeaderSize> EncodeGatherHeader(uint16_t type, uint32_t flags,
                                                           uint32_t request_id, Pieces pieces) {
  auto header = EncodeFrameHeader(type, flags, request_id, {});
  uint64_t length = 0;
  uint32_t crc = 0;
  for (const auto& p : pieces) {
    length += p.size();
    if (!(flags & kFrameUncheckedPayload)) crc = Crc32cExtend(crc, p.data(), p.size());
  }
  PutU32(header.data() + kLengthOffset, static_cast<uint32_t>(length));
  if (flags & kFrameUncheckedPayload) crc = Crc32c(header.data(), kCrcOffset);
  PutU32(header.data() + kCrcOffset, crc);
  return header;
}

Result<FrameHeader> DecodeCheckedHeader(std::span<const std::byte> bytes, uint32_t max_payload) {
  ASSIGN_OR_RETURN(FrameHeader header, DecodeFrameHeader(bytes, max_payload));
  if ((header.flags & kFrameUncheckedPayload) && Crc32c(bytes.data(), kCrcOffset) != header.crc)
    return Corruption("frame header checksum mismatch");
  return header;
}

asio::awaitable<Status> ReadExactly(StreamRef stream, std::span<std::byte> buffer,
                                    Deadline deadline, std::string_view peer) {
  if (buffer.empty()) co_return Status();
  RaceResult r;
  if (stream.tls())
    r = co_await Race(TlsRead(*stream.tls(), buffer), deadline);
  else
    r = co_await Race(asio::async_read(stream.socket(), asio::buffer(buffer.data(), buffer.size()),
                                       as_tuple(use_awaitable)),
                      deadline);
  if (!r) co_return DeadlineStatus("reading from", peer);
  auto [ec, n] = *r;
  if (ec) co_return IoStatus(ec, "reading from", peer);
  co_return Status();
}

namespace {

// Sets the socket's receive low-water mark: the kernel reports it readable, and wakes its reader,
// only once `bytes` are queued (or the peer closed). False if the kernel refused.
bool SetLowWater(tcp::socket& socket, int bytes) {
  return setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof bytes) == 0;
}

// ReadExactlyBatched's reads, without the deadline.
asio::awaitable<std::tuple<ErrorCode, size_t>> ReadInBatches(tcp::socket& socket,
                                                             std::span<std::byte> buffer,
                                                             size_t batch) {
  size_t done = 0;
  int mark = 1;
  ErrorCode ec;
  while (done < buffer.size()) {
    const size_t left = buffer.size() - done;
    // Never above what is still to come: the last batch lowers the mark to the bytes left.
    const int want = static_cast<int>(std::min(left, batch));
    if (want != mark) {
      if (SetLowWater(socket, want)) {
        mark = want;
      } else if (want < mark) {
        ec = ErrorCode(errno, boost::system::system_category());
        break;
      }
    }
    auto [read_ec, n] = co_await socket.async_read_some(asio::buffer(buffer.data() + done, left),
                                                        as_tuple(use_awaitable));
    done += n;
    if (read_ec) {
      ec = read_ec;
      break;
    }
  }
  if (mark != 1) SetLowWater(socket, 1);
  co_return std::tuple{ec, done};
}

}  // namespace

asio::awaitable<Status> DiscardPayload(StreamRef stream, const FrameHeader& header, uint32_t limit,
                                       Deadline deadline, std::string_view peer) {
  if (header.length == 0 || header.length > limit) co_return Status();
  std::vector<std::byte> ignored(header.length);
  co_return co_await ReadExactly(stream, ignored, deadline, peer);
}

asio::awaitable<Status> ReadExactlyBatched(StreamRef stream, std::span<std::byte> buffer,
                                           size_t batch, Deadline deadline, std::string_view peer) {
  if (batch == 0 || buffer.size() <= batch || stream.tls())
    co_return co_await ReadExactly(stream, buffer, deadline, peer);
  auto r = co_await Race(ReadInBatches(stream.socket(), buffer, batch), deadline);
  if (!r) co_return DeadlineStatus("reading from", peer);
  auto [ec, n] = *r;
  if (ec) co_return IoStatus(ec, "reading from", peer);
  co_return Status();
}

asio::awaitable<Status> WriteAll(StreamRef stream, std::span<const std::byte> buffer,
                                 Deadline deadline, std::string_view peer) {
  if (buffer.empty()) co_return Status();
  const asio::const_buffer one[] = {asio::buffer(buffer.data(), buffer.size())};
  RaceResult r;
  if (stream.tls())
    r = co_await Race(TlsWrite(*stream.tls(), one), deadline);
  else
    r = co_await Race(asio::async_write(stream.socket(), one[0], as_tuple(use_awaitable)),
                      deadline);
  if (!r) co_return DeadlineStatus("writing to", peer);
  auto [ec, n] = *r;
  if (ec) co_return IoStatus(ec, "writing to", peer);
  co_return Status();
}

asio::awaitable<Result<FrameHeader>> ReadFrameHeader(StreamRef stream, uint32_t max_payload,
                                                     Deadline deadline, std::string_view peer) {
  std::array<std::byte, kFrameHeaderSize> header_bytes;
  CO_RETURN_IF_ERROR(co_await ReadExactly(stream, header_bytes, deadline, peer));
  Result<FrameHeader> header = DecodeCheckedHeader(header_bytes, max_payload);
  if (!header.ok()) co_return header.status().WithContext("frame from " + std::string(peer));
  co_return *header;
}

asio::awaitable<Result<Frame>> ReadFrame(StreamRef stream, uint32_t max_payload, Deadline deadline,
                                         std::string_view peer) {
  Result<FrameHeader> header = co_await ReadFrameHeader(stream, max_payload, deadline, peer);
  if (!header.ok()) co_return header.status();
  Frame frame{*header, std::vector<std::byte>(header->length)};
  CO_RETURN_IF_ERROR(co_await ReadExactly(stream, frame.payload, deadline, peer));
  if (!(frame.header.flags & kFrameUncheckedPayload)) {
    Status verified = VerifyFramePayload(frame.header, frame.payload);
    if (!verified.ok()) co_return verified.WithContext("frame from " + std::string(peer));
  }
  co_return frame;
}

asio::awaitable<Status> WriteFrame(StreamRef stream, uint16_t type, uint32_t flags,
                                   uint32_t request_id, std::span<const std::byte> payload,
                                   Deadline deadline, std::string_view peer) {
  const std::span<const std::byte> one[] = {payload};
  co_return co_await WriteFrame(stream, type, flags, request_id, Pieces(one), deadline, peer);
}

asio::awaitable<Status> WriteFrame(StreamRef stream, uint16_t type, uint32_t flags,
                                   uint32_t request_id, Pieces pieces, Deadline deadline,
                                   std::string_view peer) {
  auto header = EncodeGatherHeader(type, flags, request_id, pieces);
  auto buffers = Buffers(header, pieces);
  RaceResult r;  // (branching here, not in a helper coroutine: no extra frame on the plain path)
  if (stream.tls())
    r = co_await Race(TlsWrite(*stream.tls(), buffers), deadline);
  else
    r = co_await Race(asio::async_write(stream.socket(), buffers, as_tuple(use_awaitable)),
                      deadline);
  if (!r) co_return DeadlineStatus("writing a frame to", peer);
  auto [ec, n] = *r;
  if (ec) co_return IoStatus(ec, "writing a frame to", peer);
  co_return Status();
}

asio::awaitable<Status> WaitReadable(StreamRef stream, Deadline deadline, std::string_view peer) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_at(deadline.when());
  ErrorCode ec;
  if (stream.tls()) {
    auto r = co_await (TlsWaitReadable(*stream.tls()) || timer.async_wait(as_tuple(use_awaitable)));
    if (r.index() == 1) co_return DeadlineStatus("waiting for data from", peer);
    ec = std::get<0>(r);
  } else {
    auto r =
        co_await (stream.socket().async_wait(tcp::socket::wait_read, as_tuple(use_awaitable)) ||
                  timer.async_wait(as_tuple(use_awaitable)));
    if (r.index() == 1) co_return DeadlineStatus("waiting for data from", peer);
    ec = std::get<0>(std::get<0>(r));
  }
  if (ec) co_return IoStatus(ec, "waiting for data from", peer);
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
  auto resolved =
      co_await (resolver.async_resolve(host, std::to_string(port), as_tuple(use_awaitable)) ||
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
  std::array<std::byte, kFrameHeaderSize> header;
  std::vector<asio::const_buffer> buffers;  // the header, then the caller's pieces (not copied)
  Deadline deadline = Deadline::At(MonoTime::max());
  std::optional<Status> done;
  std::unique_ptr<asio::steady_timer> wake;  // cancelled when `done` is set
};

asio::awaitable<Status> FrameWriter::Send(uint16_t type, uint32_t flags, uint32_t request_id,
                                          std::span<const std::byte> payload, Deadline deadline) {
  const std::span<const std::byte> one[] = {payload};
  co_return co_await Send(type, flags, request_id, Pieces(one), deadline);
}

asio::awaitable<Status> FrameWriter::Send(uint16_t type, uint32_t flags, uint32_t request_id,
                                          Pieces pieces, Deadline deadline) {
  if (!failed_.ok()) co_return failed_;
  auto ex = co_await asio::this_coro::executor;
  auto item = std::make_shared<Item>();
  item->header = EncodeGatherHeader(type, flags, request_id, pieces);
  item->buffers = Buffers(item->header, pieces);
  item->deadline = deadline;
  item->wake = std::make_unique<asio::steady_timer>(ex);
  item->wake->expires_at(MonoTime::max());
  queue_.push_back(item);
  if (!draining_) {
    draining_ = true;
    asio::co_spawn(
        ex, [self = shared_from_this()]() { return self->Drain(); }, asio::detached);
  }
  // Wakes only when `done` is set (by Drain after the write ended, or by Fail while still
  // queued), so the caller's pieces are never used after this returns. co_spawn may run Drain
  // inline up to its first suspension: a frame refused at once (its deadline already passed)
  // is done before we get here, and its cancel() found no wait to wake — waiting then would
  // never end.
  if (!item->done) co_await item->wake->async_wait(as_tuple(use_awaitable));
  if (!item->done) co_return Aborted("frame writer to " + peer_ + " stopped");
  co_return *item->done;
}

asio::awaitable<void> FrameWriter::Drain() {
  // Let the coroutines that are ready now queue their frames first: replies to requests that
  // completed together then go out in one write (one system call, one wake-up of the peer).
  co_await asio::post(co_await asio::this_coro::executor, use_awaitable);
  while (!queue_.empty()) {
    std::vector<std::shared_ptr<Item>> batch;
    std::vector<asio::const_buffer> buffers;
    Deadline deadline = Deadline::At(MonoTime::max());
    size_t bytes = 0;
    while (!queue_.empty() && batch.size() < kMaxFramesPerWrite) {
      std::shared_ptr<Item> item = queue_.front();
      const size_t size = asio::buffer_size(item->buffers);
      if (!batch.empty() && bytes + size > kMaxBytesPerWrite) break;
      queue_.pop_front();
      if (failed_.ok() && item->deadline.Expired()) {
        item->done = DeadlineStatus("queued frame for", peer_);
        item->wake->cancel();
        continue;
      }
      buffers.insert(buffers.end(), item->buffers.begin(), item->buffers.end());
      deadline = deadline.Min(item->deadline);
      bytes += size;
      batch.push_back(std::move(item));
    }
    if (batch.empty()) continue;
    Status s = failed_;
    if (s.ok()) {
      RaceResult r;
      if (stream_.tls())
        r = co_await Race(TlsWrite(*stream_.tls(), buffers), deadline);
      else
        r = co_await Race(asio::async_write(stream_.socket(), buffers, as_tuple(use_awaitable)),
                          deadline);
      if (!r)
        s = DeadlineStatus("writing a frame to", peer_);
      else if (auto [ec, n] = *r; ec)
        s = IoStatus(ec, "writing a frame to", peer_);
      // A failed or timed-out write leaves the stream out of step: the connection is done.
      if (!s.ok()) Fail(s);
    }
    for (auto& item : batch) {
      item->done = s;
      item->wake->cancel();
    }
  }
  draining_ = false;
}

void FrameWriter::Fail(Status why) {
  if (failed_.ok()) failed_ = why.ok() ? Aborted("frame writer to " + peer_ + " closed") : why;
  ErrorCode ignored;
  stream_.socket().close(ignored);
  for (auto& item : queue_) {
    if (!item->done) {
      item->done = failed_;
      item->wake->cancel();
    }
  }
  queue_.clear();
}

}  // namespace rt::net
