// A small HTTP/1.1 server on Boost.Beast and Asio C++20 coroutines, for the daemon's read-mostly
// web face: Prometheus' /metrics, the status page and its JSON (docs/formats/status_api.md).
//
// Every connection is bounded (a slow or hostile client cannot hold the server): the request
// head may be at most `max_header_bytes`, the body at most `max_body_bytes` (431 and 413 answers,
// then close), a whole request must arrive within `read_timeout` of the first wait for it (a
// client dribbling bytes — slowloris — is closed at the deadline), a response must be written
// within `write_timeout`, and at most `max_connections` connections are served at once (the next
// one gets 503 and is closed). Keep-alive is supported; an idle kept-alive connection is closed
// after `read_timeout` too.
//
// There is no authentication: put only read-only pages on it (metrics, status), and bind it to
// loopback unless they may be seen from the network.
//
// Threading: an HttpServer lives on one executor (an io_context run by one thread, or a strand);
// its handlers run there and must not block it. Start() before the executor runs or on it;
// Shutdown() and Abort() from any thread (Shutdown() not from the executor's own thread).
//
// Example:
//     auto server = HttpServer::Create(io.get_executor(), {.port = 9100});
//     server->Route("GET", "/healthz", [](HttpRequest) -> asio::awaitable<HttpResponse> {
//       co_return HttpResponse::Text(200, "ok\n");
//     });
//     ASSIGN_OR_RETURN(uint16_t port, server->Start());
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "base/deadline.h"
#include "base/status.h"

namespace rt::net {

namespace asio = boost::asio;

// One request as a handler sees it.
struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: "/api/status?x=1"
  std::string path;    // the target without its query: "/api/status"
  std::string query;   // after '?', undecoded; empty when none
  std::vector<std::pair<std::string, std::string>> headers;  // in arrival order
  std::string body;
  std::string peer;  // "host:port" of the client

  // The first header named `name` (case-insensitive), or "" when absent.
  std::string Header(std::string_view name) const;
};

// A response a handler returns.
struct HttpResponse {
  int status = 200;                                          // HTTP status code
  std::string content_type = "text/plain; charset=utf-8";    // the Content-Type header
  std::string body;                                          // sent as is, with Content-Length
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers

  // A response with `body` as `content_type`.
  static HttpResponse Of(int status, std::string content_type, std::string body);
  // A plain-text response.
  static HttpResponse Text(int status, std::string body);
};

// A route's handler. Runs on the server's executor; may co_await but must not block it. An
// exception escaping it becomes a 500 answer (and a log line), never a crash.
using HttpHandler = std::function<asio::awaitable<HttpResponse>(HttpRequest request)>;

// Server settings.
struct HttpServerOptions {
  // Address to bind (default loopback; "0.0.0.0" for every interface).
  std::string bind_address = "127.0.0.1";
  // Port to bind; 0 picks a free port (Start returns it).
  uint16_t port = 0;
  // Largest request head (request line and headers), bytes; larger gets 431 and a close.
  uint32_t max_header_bytes = 8 << 10;
  // Largest request body, bytes; larger gets 413 and a close.
  uint64_t max_body_bytes = 1 << 20;
  // Most connections served at once; one more gets 503 and is closed.
  int max_connections = 64;
  // How long one request (head and body) may take to arrive, counted from when the server starts
  // waiting for it; also how long a kept-alive connection may sit idle.
  std::chrono::milliseconds read_timeout{10'000};
  // How long writing one response may take.
  std::chrono::milliseconds write_timeout{10'000};
  // A name for log lines and errors ("http", "metrics").
  std::string name = "http server";
};

// Accepts connections and serves each in its own coroutine: read a request, find the route by
// exact (method, path) — 404 when the path is unknown, 405 when only the method is wrong —, run
// its handler, write the answer. Create with Create(); owned by shared_ptr (its coroutines hold
// it).
class HttpServer : public std::enable_shared_from_this<HttpServer> {
 public:
  // A server that will run on `executor`; nothing is bound until Start().
  static std::shared_ptr<HttpServer> Create(asio::any_io_executor executor,
                                            HttpServerOptions options);
  ~HttpServer();

  // Registers `handler` for `method` on the exact `path` ("/metrics"). A later registration of
  // the same pair replaces the earlier one. Call before Start().
  void Route(std::string method, std::string path, HttpHandler handler);

  // Binds, listens and starts accepting. Returns the bound port. Errors: InvalidArgument for a
  // bad address, IoError naming the address when bind or listen fails. Call once.
  Result<uint16_t> Start();

  // Graceful stop: refuses new connections, lets requests being handled finish until `deadline`,
  // then closes every connection. Returns DeadlineExceeded naming how many requests were still
  // running. Not from the executor's own thread (it blocks).
  Status Shutdown(Deadline deadline);

  // Immediate stop: closes the acceptor and every connection. Thread-safe, idempotent.
  void Abort();

  // The bound port (0 before Start()).
  uint16_t port() const { return port_; }
  // Connections open now.
  int open_connections() const { return open_.load(); }
  // Requests being handled now.
  int active_requests() const { return active_.load(); }

 private:
  struct Connection;
  HttpServer(asio::any_io_executor executor, HttpServerOptions options);
  asio::awaitable<void> AcceptLoop();
  asio::awaitable<void> Serve(std::shared_ptr<Connection> connection);
  asio::awaitable<void> Refuse(std::shared_ptr<Connection> connection);
  asio::awaitable<HttpResponse> Dispatch(HttpRequest request);
  void CloseAll();

  asio::any_io_executor executor_;
  HttpServerOptions options_;
  // Routes by path, then by method.
  std::map<std::string, std::map<std::string, HttpHandler>> routes_;
  std::unique_ptr<asio::ip::tcp::acceptor> acceptor_;
  std::set<std::shared_ptr<Connection>> connections_;  // on the executor only
  std::atomic<uint16_t> port_{0};
  std::atomic<int> open_{0};
  std::atomic<int> active_{0};
  std::atomic<bool> stopping_{false};
};

// The reason phrase of an HTTP status code ("Not Found").
std::string_view HttpReason(int status);

}  // namespace rt::net
