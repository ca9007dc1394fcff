// Frame I/O over TCP with Boost.Asio C++20 coroutines: read and write base/frame.h frames on a
// socket with a deadline, and connect with a deadline and retries. The building blocks of every
// ringtrain protocol (comm bootstrap, the TCP store, iofs, the control API); see
// docs/formats/frame.md for the wire format.
//
// Conventions (STYLE.md rule 5):
//  - Every function is a coroutine returning asio::awaitable<Status> or awaitable<Result<T>>.
//    Errors are values: no exception is thrown for a network error, a timeout or a bad frame.
//  - Every wait has a deadline: the operation races a steady_timer and the loser is cancelled.
//  - A `peer` string names the other end in every error ("store at 127.0.0.1:4000",
//    "rank 3"), so a log line says who failed, not only how.
//  - After a deadline or an error in the middle of a frame the byte stream is out of step:
//    the caller must close the socket. A frame is never half-delivered to the caller.
//
// Every function reads or writes a StreamRef: a plain TCP socket (callers pass their socket), or
// a TLS session on one (base/net/tls.h), so RPC links run over TLS with the same code.
//
// Thread safety: a socket belongs to one executor (an io_context run by one thread or a strand);
// call these functions from coroutines on that executor. At most one ReadFrame and one
// WriteFrame may be outstanding on a socket at a time (use FrameWriter to serialise writers).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "base/deadline.h"
#include "base/frame.h"
#include "base/status.h"

namespace rt::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// Frame flag (a frame-level bit, not a protocol's): the payload is not checksummed by the frame.
// The `crc` field then holds the CRC32C of header bytes 0-19, so the header (type, flags, request
// id, length) is still verified; the payload's integrity is the protocol's job (iofs carries
// CRC32C of its data end to end). Meant for bulk payloads, to avoid a second pass over them.
inline constexpr uint32_t kFrameUncheckedPayload = 1u << 29;

class TlsSession;  // base/net/tls.h

// The byte stream of a connection as the functions below see it: a connected TCP socket, alone
// or under a TLS session on it. A non-owning view, cheap to copy; the socket (and session) must
// outlive every operation started on it. Converts implicitly from a socket, so plain callers pass
// their socket; each I/O call branches once on tls().
class StreamRef {
 public:
  StreamRef(tcp::socket& socket) : socket_(&socket) {}  // NOLINT(google-explicit-constructor)
  // A TLS session running on `socket` (null: plain).
  StreamRef(tcp::socket& socket, TlsSession* tls) : socket_(&socket), tls_(tls) {}
  // The TCP socket (options, endpoints, close).
  tcp::socket& socket() const { return *socket_; }
  // The TLS session, or null for a plain connection.
  TlsSession* tls() const { return tls_; }

 private:
  tcp::socket* socket_;
  TlsSession* tls_ = nullptr;
};

// A payload gathered from several pieces (sent back to back, without copying them together).
using Pieces = std::span<const std::span<const std::byte>>;

// Encodes the header of a frame whose payload is `pieces` concatenated: the length, and the crc
// over the payload, or over the header if `flags` has kFrameUncheckedPayload.
std::array<std::byte, kFrameHeaderSize> EncodeGatherHeader(uint16_t type, uint32_t flags,
                                                           uint32_t request_id, Pieces pieces);

// Decodes and validates a received header: base/frame.h's checks (magic, version, length ≤
// max_payload) plus, for kFrameUncheckedPayload frames, the header CRC (Corruption on mismatch).
Result<FrameHeader> DecodeCheckedHeader(std::span<const std::byte> bytes, uint32_t max_payload);

// Reads and validates one frame header (see DecodeCheckedHeader); the caller reads `length`
// payload bytes next and, unless kFrameUncheckedPayload is set, checks them with
// VerifyFramePayload. Errors as ReadFrame.
asio::awaitable<Result<FrameHeader>> ReadFrameHeader(StreamRef stream, uint32_t max_payload,
                                                     Deadline deadline, std::string_view peer);

// Reads one whole frame: header, then payload, verified (magic, version, length ≤ max_payload,
// CRC32C). Errors: Unavailable "peer closed the connection" on EOF or reset (retryable),
// DeadlineExceeded when `deadline` passes first, Corruption/ProtocolError for a bad frame
// (nothing of the bad payload is allocated beyond max_payload), Aborted if the socket was closed
// locally. Every message names `peer`.
asio::awaitable<Result<Frame>> ReadFrame(StreamRef stream, uint32_t max_payload, Deadline deadline,
                                         std::string_view peer);

// Writes one frame (header and payload in one gathered write). Errors as ReadFrame.
asio::awaitable<Status> WriteFrame(StreamRef stream, uint16_t type, uint32_t flags,
                                   uint32_t request_id, std::span<const std::byte> payload,
                                   Deadline deadline, std::string_view peer);
// Writes one frame whose payload is `pieces` (header and pieces in one gathered write).
asio::awaitable<Status> WriteFrame(StreamRef stream, uint16_t type, uint32_t flags,
                                   uint32_t request_id, Pieces pieces, Deadline deadline,
                                   std::string_view peer);

// Reads exactly `buffer.size()` raw bytes (for protocols that stream bulk data after a frame).
asio::awaitable<Status> ReadExactly(StreamRef stream, std::span<std::byte> buffer,
                                    Deadline deadline, std::string_view peer);
// ReadExactly for large buffers: the kernel wakes this reader only once `batch` bytes (or what is
// left of the buffer, if less) are queued (SO_RCVLOWAT), so megabytes arrive in a few large reads
// instead of one per segment, with fewer wake-ups on both ends. The socket's low-water mark is 1
// byte again when this returns. batch 0, a buffer of at most `batch` bytes, or a TLS stream
// (whose records arrive decrypted piece by piece anyway): ReadExactly.
asio::awaitable<Status> ReadExactlyBatched(StreamRef stream, std::span<std::byte> buffer,
                                           size_t batch, Deadline deadline, std::string_view peer);
// Reads and drops the payload of a frame whose `header` was read, when it is at most `limit`
// bytes (a larger one is left unread: OK, the caller closes the connection anyway). For replying
// to a refused frame before closing: a close with unread bytes resets the connection, and the
// peer may lose the reply.
asio::awaitable<Status> DiscardPayload(StreamRef stream, const FrameHeader& header, uint32_t limit,
                                       Deadline deadline, std::string_view peer);
// Writes all of `buffer`.
asio::awaitable<Status> WriteAll(StreamRef stream, std::span<const std::byte> buffer,
                                 Deadline deadline, std::string_view peer);

// How Connect retries.
struct ConnectOptions {
  // First pause between attempts after a refused or failed connect; doubles up to max_backoff.
  std::chrono::milliseconds initial_backoff{10};
  // Longest pause between attempts.
  std::chrono::milliseconds max_backoff{500};
  // Set TCP_NODELAY on the connected socket (default true: our frames are small and latency
  // counts).
  bool no_delay = true;
};

// Connects to host:port (name or address), retrying refused/unreachable attempts with backoff
// until `deadline`. Errors: Unavailable (retryable) naming host:port and the last error when the
// deadline passes after failed attempts, DeadlineExceeded if it passes mid-attempt, InvalidArgument
// when the name does not resolve.
asio::awaitable<Result<tcp::socket>> Connect(std::string host, uint16_t port, Deadline deadline,
                                             ConnectOptions options = {});

// Waits until `socket` has bytes to read or its peer closed it (a read then returns at once),
// without reading anything (over TLS it reads one byte ahead, which the next read returns first:
// decrypted bytes buffered by TLS do not make the socket readable). Errors: DeadlineExceeded
// naming `peer` when nothing arrived before
// `deadline`; Aborted if the socket was closed locally.
asio::awaitable<Status> WaitReadable(StreamRef stream, Deadline deadline, std::string_view peer);

// Sleeps on the current executor until `deadline` (a cancellable pause for retry loops).
asio::awaitable<void> SleepUntil(Deadline deadline);

// "host:port" of a socket's remote end, or "unconnected".
std::string RemoteName(const tcp::socket& socket);

// Runs the coroutine `op` on `executor` and blocks the calling thread until it completes,
// returning its value. The calling thread must not be one that runs `executor` (it would wait on
// itself). Works for result types that are not default-constructible (Result<T>), which
// asio::use_future does not. An exception escaping `op` is rethrown here (a bug, not an error).
template <typename T>
T BlockOn(const asio::any_io_executor& executor, asio::awaitable<T> op) {
  std::promise<T> promise;
  auto future = promise.get_future();
  asio::co_spawn(
      executor,
      [&promise, op = std::move(op)]() mutable -> asio::awaitable<void> {
        try {
          promise.set_value(co_await std::move(op));
        } catch (...) {
          promise.set_exception(std::current_exception());
        }
      },
      asio::detached);
  return future.get();
}

// Serialises frame writes from several coroutines on one socket: Send() queues a frame and
// returns when it has been written (or failed). Frames go out in Send() order; the frames queued
// together (up to kMaxFramesPerWrite, kMaxBytesPerWrite unless one frame alone is larger) go out
// in one gathered write bounded by the earliest of their deadlines. After the first
// write error every queued and later Send() fails with that error, and the socket is closed so
// the reader side wakes too. Must be used on the socket's executor; the socket must outlive it.
class FrameWriter : public std::enable_shared_from_this<FrameWriter> {
 public:
  // The most frames and bytes one gathered write carries.
  static constexpr size_t kMaxFramesPerWrite = 32;
  static constexpr size_t kMaxBytesPerWrite = 256 << 10;

  FrameWriter(StreamRef stream, std::string peer) : stream_(stream), peer_(std::move(peer)) {}

  // Queues one frame; completes when it is on the wire. `deadline` bounds this frame's own
  // write and its time in the queue. The payload is not copied: it must stay valid until the
  // returned awaitable completes (it does not complete before the frame's write has ended).
  asio::awaitable<Status> Send(uint16_t type, uint32_t flags, uint32_t request_id,
                               std::span<const std::byte> payload, Deadline deadline);
  // The same with a payload gathered from `pieces` (each valid until completion).
  asio::awaitable<Status> Send(uint16_t type, uint32_t flags, uint32_t request_id, Pieces pieces,
                               Deadline deadline);

  // Fails every queued frame with `why` and refuses later ones.
  void Fail(Status why);

 private:
  struct Item;
  asio::awaitable<void> Drain();
  StreamRef stream_;
  std::string peer_;
  std::deque<std::shared_ptr<Item>> queue_;
  bool draining_ = false;
  Status failed_;
};

}  // namespace rt::net
