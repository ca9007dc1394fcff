// A small request/response RPC over base/frame.h frames (Boost.Asio, C++20 coroutines).
//
// Wire (docs/formats/frame.md, "RPC convention"): a request is a frame whose `type` names the
// method and whose `request_id` the client picks; the response is a frame with the same type and
// request id and the kRpcResponse flag; a failed call answers with kRpcResponse|kRpcError and a
// payload holding the Status (u16 code, u8 retryable, u32 length + message). Requests on one
// connection are pipelined: the server runs one coroutine per request, so responses may come
// back in any order and the client matches them by request id.
//
// Limits (RpcServerOptions): a server serves at most max_connections connections, at most
// max_connections_per_peer from one address (one more is closed at once), and runs at most
// max_requests_per_connection requests of one connection at a time (it stops reading that
// connection until one finishes); a frame must arrive whole within frame_timeout of its first
// byte, and a connection silent for idle_timeout with nothing running is closed. Every refusal
// or drop is logged naming the client's address; the other connections are served on.
//
// Threading: an RpcServer or RpcClient lives on one executor (an io_context run by one thread,
// or a strand) and its coroutines must be awaited there. Shutdown(), Abort() and Close() are
// the exceptions: they may be called from any thread.
//
// Example (server):
//     auto server = RpcServer::Create(io.get_executor(), {.port = 0});
//     server->Handle(kPing, [](RpcRequest req) -> asio::awaitable<Result<std::vector<std::byte>>> {
//       co_return std::vector<std::byte>(req.payload.begin(), req.payload.end());
//     });
//     ASSIGN_OR_RETURN(uint16_t port, server->Start());
// Example (client, inside a coroutine on the same or another io_context):
//     CO_ASSIGN_OR_RETURN(auto client, co_await RpcClient::Connect("127.0.0.1", port, deadline));
//     CO_ASSIGN_OR_RETURN(Frame reply, co_await client->Call(kPing, payload, deadline));
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include "base/net/frame_io.h"
#include "base/net/tls.h"

namespace rt::net {
class ClusterSecret;
}

namespace rt::net {

// Frame flags used by the RPC convention (the low 16 bits are left to the protocols).
inline constexpr uint32_t kRpcResponse = 1u << 31;
inline constexpr uint32_t kRpcError = 1u << 30;

// Encodes a non-OK Status as an error-response payload; DecodeRpcError is its inverse (a
// malformed payload decodes to a ProtocolError naming `peer`).
std::vector<std::byte> EncodeRpcError(const Status& status);
Status DecodeRpcError(std::span<const std::byte> payload, std::string_view peer);

// One incoming request as a handler sees it. The spans are valid until the handler completes.
struct RpcRequest {
  const FrameHeader& header;
  std::span<const std::byte> payload;
  const std::string& peer;  // "host:port" of the client
};

// A handler returns the response payload, or an error that is sent back as an error response
// (the client's Call returns it, with the server named in its context).
using RpcHandler =
    std::function<asio::awaitable<Result<std::vector<std::byte>>>(RpcRequest request)>;

// A reply sent as [head, body] in one kFrameUncheckedPayload frame (no frame CRC over the
// payload): for bulk data whose integrity the protocol covers itself, e.g. a CRC32C in `head`.
struct RpcBulkReply {
  std::vector<std::byte> head;  // small protocol fields
  std::vector<std::byte> body;  // the bulk bytes, sent without being copied
};
// A handler answering with a bulk reply (errors as RpcHandler).
using RpcBulkHandler = std::function<asio::awaitable<Result<RpcBulkReply>>(RpcRequest request)>;

// Server settings.
struct RpcServerOptions {
  // Address to bind (default loopback; "0.0.0.0" for every interface).
  std::string bind_address = "127.0.0.1";
  // Port to bind; 0 picks a free port (Start returns it).
  uint16_t port = 0;
  // Largest request payload accepted; a bigger frame closes the connection (ProtocolError).
  uint32_t max_payload = kDefaultMaxFramePayload;
  // How long writing one response may take before the connection is dropped.
  std::chrono::milliseconds write_timeout{10'000};
  // A name for log lines and errors ("store", "chunk server").
  std::string name = "rpc server";
  // Request payloads larger than this are read in batches of this many bytes (ReadExactlyBatched:
  // one wake-up per batch instead of one per arriving segment). 0 (default): read as data arrives.
  uint32_t payload_read_batch = 0;
  // Buffers of finished requests with payloads of 1 MiB or more are kept for the next such request,
  // up to this many bytes in all, so megabyte payloads are not read into freshly faulted-in memory
  // every time. 0 (default): every payload gets a fresh buffer.
  size_t spare_payload_bytes = 0;
  // The cluster secret every client must prove it holds (base/net/auth.h) before its first
  // request is read; a client that cannot is logged with its address and dropped. Null
  // (default): no authentication, and Start() refuses a bind address that is not loopback.
  std::shared_ptr<const ClusterSecret> secret = nullptr;
  // Mutual TLS (base/net/tls.h): every connection runs the TLS handshake first, then the secret
  // handshake (if any) and the requests inside TLS; a client without a certificate of the
  // cluster CA is logged and dropped, and a plain-TCP client gets an Unauthenticated error
  // response ("<name> requires TLS ...") for its first frame. With TLS, Start() accepts any
  // bind address even without a secret. Null (default): the secret's (ClusterSecret::tls()),
  // if any, else plain TCP.
  std::shared_ptr<const TlsContext> tls = nullptr;
  // How long a client may take to complete the handshakes (TLS and secret, each).
  std::chrono::milliseconds auth_timeout{5'000};
  // How long one request frame (header and payload) may take to arrive once its first byte has
  // come: a client that dribbles a frame (slowloris) is dropped at this deadline.
  std::chrono::milliseconds frame_timeout{60'000};
  // How long a connection may stay silent while none of its requests is running before it is
  // dropped. 0 (default): no limit, because long-lived clients (workers, membership links, the
  // memory tier) keep a connection open between rare calls and do not reconnect.
  std::chrono::milliseconds idle_timeout{0};
  // Most connections open at once (counted from accept, authenticated or not); one more is
  // closed at once with a log line naming its address.
  int max_connections = 1024;
  // Most connections open at once from one peer address (all of a host's processes share one);
  // one more is closed at once with a log line naming the address.
  int max_connections_per_peer = 256;
  // Most requests of one connection handled at once; with this many running, the server reads
  // nothing more from that connection until one finishes (the client's further requests wait in
  // the socket buffers; its writes are throttled by TCP). Bounds a connection's request memory to
  // this many payloads.
  int max_requests_per_connection = 256;
};

// Accepts connections and runs a coroutine per connection that reads requests and spawns a
// handler coroutine per request. A request whose type has no handler gets an Unimplemented
// error response. Create with Create(); owned by shared_ptr because its coroutines hold it.
class RpcServer : public std::enable_shared_from_this<RpcServer> {
 public:
  static std::shared_ptr<RpcServer> Create(asio::any_io_executor executor,
                                           RpcServerOptions options);
  ~RpcServer();

  // Registers the handler for frame type `type`. Call before Start().
  void Handle(uint16_t type, RpcHandler handler);
  // Registers a handler whose successful replies are bulk replies. Call before Start().
  void HandleBulk(uint16_t type, RpcBulkHandler handler);

  // Binds, listens and starts accepting. Returns the bound port. Errors: IoError or
  // AlreadyExists naming the address when bind fails; FailedPrecondition for an address that is
  // not loopback without a cluster secret or TLS. Call once, from any thread before the
  // executor runs or from the executor.
  Result<uint16_t> Start();

  // Graceful stop: refuses new connections and requests, waits until running handlers finish or
  // `deadline` passes, then closes every connection. Safe from any thread except the executor's
  // own (it blocks); returns DeadlineExceeded if handlers were still running at the deadline
  // (they are then aborted like Abort()).
  Status Shutdown(Deadline deadline);

  // Immediate stop: closes the acceptor and every connection now; running handlers see their
  // writes fail. Thread-safe, non-blocking, idempotent.
  void Abort();

  // The bound port (0 before Start()).
  uint16_t port() const { return port_; }
  // Requests being handled now (for tests and metrics).
  int64_t active_requests() const { return active_.load(); }
  // Bytes of payload buffers kept for reuse now (RpcServerOptions::spare_payload_bytes).
  size_t spare_payload_bytes() const { return spare_bytes_.load(); }

 private:
  struct Connection;
  RpcServer(asio::any_io_executor executor, RpcServerOptions options);
  asio::awaitable<void> AcceptLoop();
  asio::awaitable<void> ServeConnection(std::shared_ptr<Connection> connection);
  // Runs the TLS handshake on a new connection; a plain-TCP client is answered with an
  // Unauthenticated error response first. Errors as TlsHandshake.
  asio::awaitable<Status> AcceptTls(Connection& connection);
  struct Request;
  asio::awaitable<void> ServeRequest(std::shared_ptr<Connection> connection,
                                     std::shared_ptr<Request> request);
  void CloseAll();
  // Admits an accepted connection, or logs and closes it when a connection limit is reached.
  bool Admit(const std::shared_ptr<Connection>& connection);
  // Forgets a finished connection (its slot counts toward the limits no more).
  void Forget(const std::shared_ptr<Connection>& connection);
  // Waits until the next frame of `connection` starts to arrive. Errors: DeadlineExceeded after
  // idle_timeout of silence with no request running; the read error when the socket fails.
  asio::awaitable<Status> AwaitNextFrame(Connection& connection);
  // A buffer for a request payload of `length` bytes (a spare one if it fits); `capacity`
  // receives its size. On the executor only.
  std::unique_ptr<std::byte[]> TakePayload(uint32_t length, size_t* capacity);
  // Keeps a finished request's buffer for reuse if there is room. On the executor only.
  void RecyclePayload(std::unique_ptr<std::byte[]> buffer, size_t capacity);

  asio::any_io_executor executor_;
  RpcServerOptions options_;
  std::map<uint16_t, RpcHandler> handlers_;
  std::map<uint16_t, RpcBulkHandler> bulk_handlers_;
  std::unique_ptr<tcp::acceptor> acceptor_;
  std::set<std::shared_ptr<Connection>> connections_;  // on the executor only
  std::map<std::string, int> connections_per_peer_;    // by address; on the executor only
  std::atomic<uint16_t> port_{0};
  std::atomic<int64_t> active_{0};
  std::atomic<bool> stopping_{false};
  // Payload buffers kept for reuse, with their sizes (on the executor only), and their bytes.
  std::vector<std::pair<size_t, std::unique_ptr<std::byte[]>>> spare_payloads_;
  std::atomic<size_t> spare_bytes_{0};
};

// Client settings.
struct RpcClientOptions {
  // Largest response payload accepted.
  uint32_t max_payload = kDefaultMaxFramePayload;
  // Name of the server for errors ("store at 10.0.0.1:4000"); defaults to "host:port".
  std::string peer_name;
  ConnectOptions connect;
  // The cluster secret to prove to the server right after connecting (base/net/auth.h); null
  // (default) for a server that runs without one.
  std::shared_ptr<const ClusterSecret> secret = nullptr;
  // Mutual TLS with the server (base/net/tls.h), run before the secret handshake; the TLS
  // handshake shares the connect deadline. Null (default): the secret's
  // (ClusterSecret::tls()), if any, else plain TCP.
  std::shared_ptr<const TlsContext> tls = nullptr;
};

// One connection to an RpcServer with pipelined calls. Create with Connect().
class RpcClient : public std::enable_shared_from_this<RpcClient> {
 public:
  // Connects (retrying until `deadline`, see net::Connect), runs the TLS handshake with
  // options.tls and authenticates with options.secret when set (errors: Unauthenticated naming
  // the server; see TlsHandshake and AuthenticateClient), and starts the response reader. Over
  // TLS 1.3 a server that refuses our certificate may say so only at the first call, which then
  // fails with Unauthenticated (with a secret, the secret handshake finds it out here).
  static asio::awaitable<Result<std::shared_ptr<RpcClient>>> Connect(std::string host,
                                                                     uint16_t port,
                                                                     Deadline deadline,
                                                                     RpcClientOptions options);
  // The same with default options. (Not a default argument: GCC 12 miscompiles coroutine
  // parameters initialised from default arguments with non-trivial types.)
  static asio::awaitable<Result<std::shared_ptr<RpcClient>>> Connect(std::string host,
                                                                     uint16_t port,
                                                                     Deadline deadline);
  ~RpcClient();

  // Sends a request and waits for its response until `deadline`. Returns the response frame, or:
  // the handler's error (with the server named), DeadlineExceeded (the call is forgotten; a late
  // response is dropped), Unavailable when the connection breaks (every pending call fails with
  // it, naming the server), Aborted after Close(). Many calls may be outstanding at once.
  // `payload` must stay valid until the returned awaitable completes.
  asio::awaitable<Result<Frame>> Call(uint16_t type, std::span<const std::byte> payload,
                                      Deadline deadline);
  // The same with the request payload gathered from `pieces` (not copied; each valid until
  // completion) and frame `flags` (kFrameUncheckedPayload for bulk data the protocol checks).
  asio::awaitable<Result<Frame>> Call(uint16_t type, Pieces pieces, uint32_t flags,
                                      Deadline deadline);
  // Zero-copy receive: like Call, but a successful response's payload is read from the socket
  // straight into `head` and then `body` (head first; the response returns with an empty
  // payload, and `*received` holds the payload's length). A response larger than head + body
  // fails the call with ProtocolError (the connection stays usable); an error response is
  // returned as the error. If the deadline passes while the payload is being read into the
  // caller's memory, the connection is closed (every pending call fails) and the call returns
  // only once the read has stopped, so the memory is never written after this returns.
  asio::awaitable<Result<Frame>> CallInto(uint16_t type, Pieces pieces, uint32_t flags,
                                          std::span<std::byte> head, std::span<std::byte> body,
                                          size_t* received, Deadline deadline);

  // Closes the connection; pending and later calls fail with Aborted. Thread-safe.
  void Close();

  // False once the connection has failed or been closed.
  bool connected() const { return !broken_.load(); }
  const std::string& peer() const { return peer_; }
  // "host:port" of this end of the connection (as the server's RpcRequest::peer names it).
  std::string LocalName() const;

 private:
  struct Pending;
  RpcClient(tcp::socket socket, RpcClientOptions options);
  // The connection's byte stream (through the TLS session when there is one).
  StreamRef stream() { return StreamRef(socket_, tls_.get()); }
  asio::awaitable<void> ReadLoop();
  // Reads a response payload of `header` into `pending`'s buffers or a new vector.
  asio::awaitable<Status> ReadResponse(const FrameHeader& header, std::shared_ptr<Pending> pending);
  void FailAll(const Status& why);

  tcp::socket socket_;
  TlsSessionPtr tls_;  // on socket_; null for a plain connection
  RpcClientOptions options_;
  std::string peer_;
  std::shared_ptr<FrameWriter> writer_;
  std::map<uint32_t, std::shared_ptr<Pending>> pending_;  // on the executor only
  uint32_t next_id_ = 1;
  Status failed_;
  std::atomic<bool> broken_{false};
};

}  // namespace rt::net
