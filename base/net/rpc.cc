#include "base/net/rpc.h"

#include <cstdlib>
#include <future>
#include <optional>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/bytes.h"
#include "base/crc32c.h"
#include "base/log.h"
#include "base/net/auth.h"

namespace rt::net {
namespace {
using asio::as_tuple;
using asio::use_awaitable;
using ErrorCode = boost::system::error_code;

Deadline Forever() { return Deadline::At(MonoTime::max()); }

// How long the accept loop pauses after a failed accept (e.g. out of file descriptors).
constexpr std::chrono::milliseconds kAcceptErrorPause{100};
// A plain client's first frame at a TLS server is read whole up to this size before the refusal.
constexpr uint32_t kMaxDrainedPayload = 1 << 20;
}  // namespace

std::vector<std::byte> EncodeRpcError(const Status& status) {
  ByteWriter w;
  w.Put<uint16_t>(static_cast<uint16_t>(status.code()));
  w.Put<uint8_t>(status.retryable() ? 1 : 0);
  w.PutString(status.message());
  return w.Take();
}

Status DecodeRpcError(std::span<const std::byte> payload, std::string_view peer) {
  ByteReader r(payload, "error response from " + std::string(peer));
  auto code = r.Get<uint16_t>();
  auto retryable = r.Get<uint8_t>();
  auto message = r.GetString(1 << 20);
  if (!code.ok() || !retryable.ok() || !message.ok() || *code == 0)
    return Status(StatusCode::kProtocolError, "malformed error response from " + std::string(peer));
  return Status(static_cast<StatusCode>(*code), std::string(peer) + ": " + *message,
                *retryable != 0);
}

// ---------------------------------------------------------------------------------------------
// Server

// The address part of a connected socket's remote end ("10.0.0.7"), or "unconnected".
std::string RemoteAddress(const tcp::socket& socket) {
  ErrorCode ec;
  auto ep = socket.remote_endpoint(ec);
  return ec ? "unconnected" : ep.address().to_string();
}

struct RpcServer::Connection {
  explicit Connection(tcp::socket s)
      : socket(std::move(s)),
        peer(RemoteName(socket)),
        address(RemoteAddress(socket)),
        slot(socket.get_executor()) {
    writer = std::make_shared<FrameWriter>(socket, peer);
  }
  tcp::socket socket;
  TlsSessionPtr tls;  // on `socket`, once the TLS handshake is done (TLS servers only)
  std::string peer;
  std::string address;  // the peer's address without the port (the per-peer limit's key)
  std::shared_ptr<FrameWriter> writer;
  // The read loop sleeps on it while max_requests_per_connection handlers run; a finishing
  // handler cancels it.
  asio::steady_timer slot;
  int active = 0;       // handlers running for this connection
  bool reading = true;  // the read loop is still running
  StreamRef stream() { return StreamRef(socket, tls.get()); }
  void CloseIfIdle() {
    if (!reading && active == 0) writer->Fail(Aborted("connection from " + peer + " closed"));
  }
};

std::shared_ptr<RpcServer> RpcServer::Create(asio::any_io_executor executor,
                                             RpcServerOptions options) {
  return std::shared_ptr<RpcServer>(new RpcServer(std::move(executor), std::move(options)));
}

RpcServer::RpcServer(asio::any_io_executor executor, RpcServerOptions options)
    : executor_(std::move(executor)), options_(std::move(options)) {
  if (!options_.tls && options_.secret) options_.tls = options_.secret->tls();
}

RpcServer::~RpcServer() = default;

void RpcServer::Handle(uint16_t type, RpcHandler handler) { handlers_[type] = std::move(handler); }

void RpcServer::HandleBulk(uint16_t type, RpcBulkHandler handler) {
  bulk_handlers_[type] = std::move(handler);
}

// A received request. The payload is read into memory that is not zeroed first (it is
// overwritten by the read), which matters for megabyte payloads.
struct RpcServer::Request {
  FrameHeader header;
  std::unique_ptr<std::byte[]> payload;
  size_t capacity = 0;  // of `payload`, at least header.length
  std::span<const std::byte> bytes() const { return {payload.get(), header.length}; }
};

namespace {
// Payloads from this size on are read into buffers kept for reuse (when the server keeps any).
constexpr size_t kMinSparePayload = 1 << 20;
// Their buffers are sized in these steps, so payloads of slightly different sizes share them.
constexpr size_t kSparePayloadStep = 64 << 10;
}  // namespace

std::unique_ptr<std::byte[]> RpcServer::TakePayload(uint32_t length, size_t* capacity) {
  if (options_.spare_payload_bytes == 0 || length < kMinSparePayload) {
    *capacity = length;
    return std::unique_ptr<std::byte[]>(new std::byte[length]);
  }
  // The smallest spare buffer that fits.
  auto best = spare_payloads_.end();
  for (auto it = spare_payloads_.begin(); it != spare_payloads_.end(); ++it)
    if (it->first >= length && (best == spare_payloads_.end() || it->first < best->first))
      best = it;
  if (best != spare_payloads_.end()) {
    *capacity = best->first;
    std::unique_ptr<std::byte[]> buffer = std::move(best->second);
    spare_bytes_ -= best->first;
    spare_payloads_.erase(best);
    return buffer;
  }
  *capacity = (length + kSparePayloadStep - 1) / kSparePayloadStep * kSparePayloadStep;
  return std::unique_ptr<std::byte[]>(new std::byte[*capacity]);
}

void RpcServer::RecyclePayload(std::unique_ptr<std::byte[]> buffer, size_t capacity) {
  if (!buffer || capacity < kMinSparePayload ||
      spare_bytes_ + capacity > options_.spare_payload_bytes)
    return;
  spare_bytes_ += capacity;
  spare_payloads_.emplace_back(capacity, std::move(buffer));
}

Result<uint16_t> RpcServer::Start() {
  if (options_.secret == nullptr && options_.tls == nullptr &&
      !IsLoopbackAddress(options_.bind_address))
    return FailedPrecondition(options_.name + ": refusing to listen on " + options_.bind_address +
                              " without a cluster secret: configure one ([auth] secret_file, "
                              "`ringctl init-secret`) or bind to loopback");
  ErrorCode ec;
  auto address = asio::ip::make_address(options_.bind_address, ec);
  if (ec) return InvalidArgument(options_.name + ": bad bind address " + options_.bind_address);
  tcp::endpoint endpoint(address, options_.port);
  auto acceptor = std::make_unique<tcp::acceptor>(executor_);
  acceptor->open(endpoint.protocol(), ec);
  if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return Status(StatusCode::kIoError, options_.name + ": cannot listen on " +
                                            options_.bind_address + ":" +
                                            std::to_string(options_.port) + ": " + ec.message());
  port_ = acceptor->local_endpoint().port();
  acceptor_ = std::move(acceptor);
  asio::co_spawn(
      executor_, [self = shared_from_this()] { return self->AcceptLoop(); }, asio::detached);
  return port_.load();
}

asio::awaitable<void> RpcServer::AcceptLoop() {
  while (!stopping_) {
    auto [ec, socket] = co_await acceptor_->async_accept(as_tuple(use_awaitable));
    if (ec) {
      if (ec == asio::error::operation_aborted || stopping_) break;
      // Out of descriptors (EMFILE) and the like: pause instead of spinning on the error.
      LOG_WARN("{}: accept failed: {}", options_.name, ec.message());
      co_await SleepUntil(Deadline::After(kAcceptErrorPause));
      continue;
    }
    ErrorCode ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto connection = std::make_shared<Connection>(std::move(socket));
    if (!Admit(connection)) continue;
    asio::co_spawn(
        executor_,
        [self = shared_from_this(), connection] { return self->ServeConnection(connection); },
        asio::detached);
  }
}

asio::awaitable<Status> RpcServer::AcceptTls(Connection& connection) {
  const Deadline deadline = Deadline::After(options_.auth_timeout);
  // A TLS client's first byte starts a handshake record (22); a plain client's, a frame header.
  CO_RETURN_IF_ERROR(co_await WaitReadable(connection.socket, deadline, connection.peer));
  std::byte first{};
  ErrorCode ec;
  const size_t n =
      connection.socket.receive(asio::buffer(&first, 1), tcp::socket::message_peek, ec);
  if (ec || n == 0)
    co_return Unavailable(connection.peer + " closed the connection before the TLS handshake");
  if (first != std::byte{22}) {
    // Tell a plain ringtrain client why, in a frame it can read, before closing.
    Result<FrameHeader> header = co_await ReadFrameHeader(connection.socket, options_.max_payload,
                                                          deadline, connection.peer);
    if (header.ok()) {
      (void)co_await DiscardPayload(connection.socket, *header, kMaxDrainedPayload, deadline,
                                    connection.peer);
      const Status why = Unauthenticated(options_.name +
                                         " requires TLS ([tls] in the node config, "
                                         "--tls-dir on the tools)");
      (void)co_await WriteFrame(connection.socket, header->type, kRpcResponse | kRpcError,
                                header->request_id, EncodeRpcError(why), deadline, connection.peer);
    }
    co_return Unauthenticated(connection.peer + " does not speak TLS (a plain-TCP client)");
  }
  CO_ASSIGN_OR_RETURN(connection.tls,
                      co_await TlsHandshake(connection.socket, *options_.tls, TlsRole::kServer,
                                            deadline, connection.peer));
  connection.writer = std::make_shared<FrameWriter>(connection.stream(), connection.peer);
  LOG_DEBUG("{}: {} presented the TLS certificate of {}", options_.name, connection.peer,
            TlsPeerSubject(*connection.tls));
  co_return Status();
}

asio::awaitable<void> RpcServer::ServeConnection(std::shared_ptr<Connection> connection) {
  Status auth;
  if (options_.tls) auth = co_await AcceptTls(*connection);  // (GCC 12: no co_await in a ?:)
  if (auth.ok())
    auth = co_await AuthenticateServer(connection->stream(), options_.secret.get(),
                                       Deadline::After(options_.auth_timeout), connection->peer);
  if (!auth.ok()) {
    LOG_WARN("{}: authentication failed, closing the connection from {}: {}", options_.name,
             connection->peer, auth.ToString());
    connection->reading = false;
    connection->CloseIfIdle();
    Forget(connection);
    co_return;
  }
  while (!stopping_) {
    if (connection->active >= options_.max_requests_per_connection) {
      connection->slot.expires_at(MonoTime::max());
      co_await connection->slot.async_wait(as_tuple(use_awaitable));
      continue;
    }
    if (Status next = co_await AwaitNextFrame(*connection); !next.ok()) {
      if (next.code() == StatusCode::kDeadlineExceeded)
        LOG_WARN("{}: {} was silent for {} ms; closing the connection", options_.name,
                 connection->peer, options_.idle_timeout.count());
      break;
    }
    if (stopping_) break;
    // The frame has begun: all of it must arrive by this deadline (slowloris).
    const Deadline frame_deadline = Deadline::After(options_.frame_timeout);
    auto request = std::make_shared<Request>();
    Status status;
    Result<FrameHeader> header = co_await ReadFrameHeader(
        connection->stream(), options_.max_payload, frame_deadline, connection->peer);
    if (header.ok()) {
      request->header = *header;
      request->payload = TakePayload(header->length, &request->capacity);
      status = co_await ReadExactlyBatched(
          connection->stream(), {request->payload.get(), header->length},
          options_.payload_read_batch, frame_deadline, connection->peer);
      if (status.ok() && !(header->flags & kFrameUncheckedPayload))
        status = VerifyFramePayload(*header, request->bytes())
                     .WithContext("frame from " + connection->peer);
    } else {
      status = header.status();
    }
    if (!status.ok()) {
      if (status.code() == StatusCode::kDeadlineExceeded)
        LOG_WARN("{}: {} took more than {} ms to send one frame; closing the connection",
                 options_.name, connection->peer, options_.frame_timeout.count());
      else if (status.code() != StatusCode::kUnavailable && status.code() != StatusCode::kAborted)
        LOG_WARN("{}: dropping the connection from {}: {}", options_.name, connection->peer,
                 status.ToString());
      break;
    }
    if (stopping_) break;
    if (request->header.flags & kRpcResponse) {
      LOG_WARN("{}: {} sent a response frame as a request; dropping it", options_.name,
               connection->peer);
      break;
    }
    ++connection->active;
    ++active_;
    asio::co_spawn(
        executor_,
        [self = shared_from_this(), connection, request]() mutable {
          return self->ServeRequest(connection, std::move(request));
        },
        asio::detached);
  }
  connection->reading = false;
  connection->CloseIfIdle();
  if (connection->active == 0) Forget(connection);
}

asio::awaitable<Status> RpcServer::AwaitNextFrame(Connection& connection) {
  while (true) {
    const Deadline idle =
        options_.idle_timeout.count() > 0 ? Deadline::After(options_.idle_timeout) : Forever();
    Status readable = co_await WaitReadable(connection.stream(), idle, connection.peer);
    // A connection waiting for its own requests' answers is not idle.
    if (readable.code() == StatusCode::kDeadlineExceeded && connection.active > 0) continue;
    co_return readable;
  }
}

bool RpcServer::Admit(const std::shared_ptr<Connection>& connection) {
  int& from_peer = connections_per_peer_[connection->address];
  std::string over;
  if (static_cast<int>(connections_.size()) >= options_.max_connections)
    over = std::to_string(connections_.size()) + " connections open (max_connections)";
  else if (from_peer >= options_.max_connections_per_peer)
    over = std::to_string(from_peer) + " connections open from " + connection->address +
           " (max_connections_per_peer)";
  if (over.empty()) {
    ++from_peer;
    connections_.insert(connection);
    return true;
  }
  if (from_peer == 0) connections_per_peer_.erase(connection->address);
  LOG_WARN("{}: refusing the connection from {}: {}", options_.name, connection->peer, over);
  ErrorCode ignored;
  connection->socket.close(ignored);
  return false;
}

void RpcServer::Forget(const std::shared_ptr<Connection>& connection) {
  if (connections_.erase(connection) == 0) return;
  auto it = connections_per_peer_.find(connection->address);
  if (it != connections_per_peer_.end() && --it->second <= 0) connections_per_peer_.erase(it);
}

asio::awaitable<void> RpcServer::ServeRequest(std::shared_ptr<Connection> connection,
                                              std::shared_ptr<Request> request) {
  const FrameHeader& header = request->header;
  const RpcRequest call{header, request->bytes(), connection->peer};
  Result<RpcBulkReply> reply =
      Unimplemented("no handler for request type " + std::to_string(header.type));
  bool bulk = false;
  try {
    if (auto it = handlers_.find(header.type); it != handlers_.end()) {
      Result<std::vector<std::byte>> plain = co_await it->second(call);
      if (plain.ok())
        reply = RpcBulkReply{{}, std::move(*plain)};
      else
        reply = plain.status();
    } else if (auto bit = bulk_handlers_.find(header.type); bit != bulk_handlers_.end()) {
      bulk = true;
      reply = co_await bit->second(call);
    }
  } catch (const std::exception& e) {
    reply = Internal(options_.name + ": handler threw: " + e.what());
  }
  Status sent;
  const Deadline deadline = Deadline::After(options_.write_timeout);
  if (reply.ok()) {
    const std::span<const std::byte> pieces[] = {reply->head, reply->body};
    sent = co_await connection->writer->Send(header.type,
                                             kRpcResponse | (bulk ? kFrameUncheckedPayload : 0),
                                             header.request_id, Pieces(pieces), deadline);
  } else {
    auto payload = EncodeRpcError(reply.status());
    sent = co_await connection->writer->Send(header.type, kRpcResponse | kRpcError,
                                             header.request_id, payload, deadline);
  }
  if (!sent.ok()) LOG_DEBUG("{}: response not sent: {}", options_.name, sent.ToString());
  RecyclePayload(std::move(request->payload), request->capacity);
  --connection->active;
  --active_;
  connection->slot.cancel();
  connection->CloseIfIdle();
  if (!connection->reading && connection->active == 0) Forget(connection);
}

void RpcServer::CloseAll() {
  ErrorCode ignored;
  if (acceptor_) acceptor_->close(ignored);
  for (auto& c : connections_) {
    c->writer->Fail(Aborted(options_.name + " aborted"));
    c->slot.cancel();
  }
}

Status RpcServer::Shutdown(Deadline deadline) {
  stopping_ = true;
  // Stop accepting and stop reading requests; running handlers may still answer.
  std::promise<void> stopped;
  asio::post(executor_, [this, self = shared_from_this(), &stopped] {
    ErrorCode ignored;
    if (acceptor_) acceptor_->close(ignored);
    for (auto& c : connections_) c->socket.shutdown(tcp::socket::shutdown_receive, ignored);
    stopped.set_value();
  });
  if (stopped.get_future().wait_until(deadline.when()) != std::future_status::ready) {
    Abort();
    return DeadlineExceeded(options_.name + ": shutdown: executor did not respond");
  }
  while (active_.load() > 0 && !deadline.Expired())
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const bool drained = active_.load() == 0;
  Abort();
  if (!drained)
    return DeadlineExceeded(options_.name + ": shutdown: " + std::to_string(active_.load()) +
                            " requests still running at the deadline");
  return Status();
}

void RpcServer::Abort() {
  stopping_ = true;
  asio::post(executor_, [self = shared_from_this()] { self->CloseAll(); });
}

// ---------------------------------------------------------------------------------------------
// Client

struct RpcClient::Pending {
  explicit Pending(asio::any_io_executor ex) : wake(ex) {}
  asio::steady_timer wake;  // expires at the call's deadline; cancelled when `result` is set
  std::optional<Result<Frame>> result;
  // CallInto's buffers: a successful response's payload is read into them.
  bool sink = false;
  std::span<std::byte> head, body;
  size_t* received = nullptr;
  bool filling = false;  // the read loop is writing into head/body now
};

RpcClient::RpcClient(tcp::socket socket, RpcClientOptions options)
    : socket_(std::move(socket)), options_(std::move(options)) {
  peer_ = options_.peer_name.empty() ? RemoteName(socket_) : options_.peer_name;
  writer_ = std::make_shared<FrameWriter>(socket_, peer_);  // replaced once TLS is up
}

RpcClient::~RpcClient() {
  ErrorCode ignored;
  socket_.close(ignored);
}

asio::awaitable<Result<std::shared_ptr<RpcClient>>> RpcClient::Connect(std::string host,
                                                                       uint16_t port,
                                                                       Deadline deadline,
                                                                       RpcClientOptions options) {
  if (options.peer_name.empty()) options.peer_name = host + ":" + std::to_string(port);
  if (!options.tls && options.secret) options.tls = options.secret->tls();
  CO_ASSIGN_OR_RETURN(tcp::socket socket,
                      co_await net::Connect(host, port, deadline, options.connect));
  // Built first: the TLS session refers to the client's own socket (closed if we return early).
  auto client = std::shared_ptr<RpcClient>(new RpcClient(std::move(socket), std::move(options)));
  if (client->options_.tls) {
    CO_ASSIGN_OR_RETURN(client->tls_,
                        co_await TlsHandshake(client->socket_, *client->options_.tls,
                                              TlsRole::kClient, deadline, client->peer_));
    client->writer_ = std::make_shared<FrameWriter>(client->stream(), client->peer_);
  }
  CO_RETURN_IF_ERROR(co_await AuthenticateClient(client->stream(), client->options_.secret.get(),
                                                 deadline, client->peer_));
  asio::co_spawn(
      client->socket_.get_executor(), [client] { return client->ReadLoop(); }, asio::detached);
  co_return client;
}

asio::awaitable<Result<std::shared_ptr<RpcClient>>> RpcClient::Connect(std::string host,
                                                                       uint16_t port,
                                                                       Deadline deadline) {
  return Connect(std::move(host), port, deadline, RpcClientOptions{});
}

asio::awaitable<Result<Frame>> RpcClient::Call(uint16_t type, std::span<const std::byte> payload,
                                               Deadline deadline) {
  const std::span<const std::byte> one[] = {payload};
  co_return co_await CallInto(type, Pieces(one), 0, {}, {}, nullptr, deadline);
}

asio::awaitable<Result<Frame>> RpcClient::Call(uint16_t type, Pieces pieces, uint32_t flags,
                                               Deadline deadline) {
  co_return co_await CallInto(type, pieces, flags, {}, {}, nullptr, deadline);
}

asio::awaitable<Result<Frame>> RpcClient::CallInto(uint16_t type, Pieces pieces, uint32_t flags,
                                                   std::span<std::byte> head,
                                                   std::span<std::byte> body, size_t* received,
                                                   Deadline deadline) {
  if (!failed_.ok()) co_return failed_;
  auto self = shared_from_this();
  uint32_t id = next_id_++;
  if (next_id_ == 0) next_id_ = 1;
  auto pending = std::make_shared<Pending>(socket_.get_executor());
  pending->sink = received != nullptr;
  pending->head = head;
  pending->body = body;
  pending->received = received;
  pending->wake.expires_at(deadline.when());
  pending_[id] = pending;
  Status sent =
      co_await writer_->Send(type, flags & ~(kRpcResponse | kRpcError), id, pieces, deadline);
  if (!sent.ok() && !pending->result && !pending->filling) {
    pending_.erase(id);
    co_return sent;
  }
  if (!pending->result) co_await pending->wake.async_wait(as_tuple(use_awaitable));
  pending_.erase(id);
  if (pending->filling) {
    // The response is being read into the caller's memory: stop the connection (the read fails
    // at once on the closed socket) and wait until the reader has let go of the memory.
    pending->result = DeadlineExceeded("call of type " + std::to_string(type) + " to " + peer_ +
                                       ": response still arriving at the deadline");
    FailAll(pending->result->status());
    const Deadline bound = Deadline::AfterMs(10'000);
    while (pending->filling && !bound.Expired()) {
      pending->wake.expires_at(bound.when());
      co_await pending->wake.async_wait(as_tuple(use_awaitable));
    }
    if (pending->filling) {
      // Unreachable with Asio's close semantics; returning would let the read write freed memory.
      LOG_ERROR("rpc client to {}: a read into a finished call's buffer did not stop", peer_);
      std::abort();
    }
  }
  if (pending->result) co_return std::move(*pending->result);
  co_return DeadlineExceeded("call of type " + std::to_string(type) + " to " + peer_ +
                             ": no response before the deadline");
}

asio::awaitable<Status> RpcClient::ReadResponse(const FrameHeader& header,
                                                std::shared_ptr<Pending> pending) {
  const bool error = header.flags & kRpcError;
  const bool checked = !(header.flags & kFrameUncheckedPayload);
  if (pending && pending->sink && !pending->result && !error &&
      header.length <= pending->head.size() + pending->body.size()) {
    const size_t in_head = std::min<size_t>(header.length, pending->head.size());
    const size_t in_body = header.length - in_head;
    pending->filling = true;
    Status s = co_await ReadExactly(stream(), pending->head.first(in_head), Forever(), peer_);
    if (s.ok()) s = co_await ReadExactly(stream(), pending->body.first(in_body), Forever(), peer_);
    if (s.ok() && checked &&
        Crc32cExtend(Crc32c(pending->head.data(), in_head), pending->body.data(), in_body) !=
            header.crc)
      s = Corruption("frame from " + peer_ + ": payload checksum mismatch");
    pending->filling = false;
    if (!pending->result) {
      if (s.ok()) {
        *pending->received = header.length;
        pending->result = Frame{header, {}};
      } else {
        pending->result = s;
      }
    }
    pending->wake.cancel();
    co_return s;
  }
  Frame frame{header, std::vector<std::byte>(header.length)};
  CO_RETURN_IF_ERROR(co_await ReadExactly(stream(), frame.payload, Forever(), peer_));
  if (checked)
    CO_RETURN_IF_ERROR(
        VerifyFramePayload(header, frame.payload).WithContext("frame from " + peer_));
  if (!pending || pending->result) co_return Status();  // the call gave up: drop the late answer
  if (error)
    pending->result = DecodeRpcError(frame.payload, peer_);
  else if (pending->sink)
    pending->result =
        Status(StatusCode::kProtocolError,
               peer_ + ": response of " + std::to_string(header.length) + " bytes exceeds the " +
                   std::to_string(pending->head.size() + pending->body.size()) + "-byte buffer");
  else
    pending->result = std::move(frame);
  pending->wake.cancel();
  co_return Status();
}

asio::awaitable<void> RpcClient::ReadLoop() {
  auto self = shared_from_this();
  while (true) {
    Result<FrameHeader> header =
        co_await ReadFrameHeader(stream(), options_.max_payload, Forever(), peer_);
    if (!header.ok()) {
      FailAll(header.status());
      co_return;
    }
    if (!(header->flags & kRpcResponse)) {
      FailAll(Status(StatusCode::kProtocolError, peer_ + " sent a request frame to a client"));
      co_return;
    }
    std::shared_ptr<Pending> pending;
    if (auto it = pending_.find(header->request_id); it != pending_.end()) pending = it->second;
    Status read = co_await ReadResponse(*header, pending);
    if (!read.ok()) {
      FailAll(read);
      co_return;
    }
    if (auto it = pending_.find(header->request_id); it != pending_.end() && it->second == pending)
      pending_.erase(it);
  }
}

void RpcClient::FailAll(const Status& why) {
  if (failed_.ok()) failed_ = why;
  broken_ = true;
  writer_->Fail(failed_);
  for (auto& [id, pending] : pending_) {
    if (!pending->result) pending->result = failed_;
    pending->wake.cancel();
  }
  pending_.clear();
}

std::string RpcClient::LocalName() const {
  ErrorCode ec;
  auto ep = socket_.local_endpoint(ec);
  if (ec) return "unconnected";
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

void RpcClient::Close() {
  broken_ = true;
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    self->FailAll(Aborted("client to " + self->peer_ + " closed"));
  });
}

}  // namespace rt::net
