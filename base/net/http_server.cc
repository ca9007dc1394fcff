#include "base/net/http_server.h"

#include <strings.h>

#include <exception>
#include <future>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "base/log.h"

namespace rt::net {
namespace {
namespace beast = boost::beast;
namespace http = beast::http;
using asio::as_tuple;
using asio::use_awaitable;
using tcp = asio::ip::tcp;
using ErrorCode = boost::system::error_code;

// How long a refused (over the connection limit) client gets to take its 503.
constexpr std::chrono::milliseconds kRefuseTimeout{1'000};
// How long the accept loop pauses after a failed accept (e.g. out of file descriptors).
constexpr std::chrono::milliseconds kAcceptErrorPause{100};

std::string PeerName(const tcp::socket& socket) {
  ErrorCode ec;
  auto endpoint = socket.remote_endpoint(ec);
  if (ec) return "unconnected";
  return endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
}

http::response<http::string_body> ToBeast(const HttpResponse& response, unsigned version,
                                          bool keep_alive) {
  http::response<http::string_body> out{static_cast<http::status>(response.status), version};
  out.set(http::field::server, "ringtrain");
  out.set(http::field::content_type, response.content_type);
  for (const auto& [name, value] : response.headers) out.set(name, value);
  out.body() = response.body;
  out.keep_alive(keep_alive);
  out.prepare_payload();
  return out;
}
}  // namespace

std::string HttpRequest::Header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (key.size() == name.size() && strncasecmp(key.data(), name.data(), key.size()) == 0)
      return value;
  return "";
}

HttpResponse HttpResponse::Of(int status, std::string content_type, std::string body) {
  return HttpResponse{status, std::move(content_type), std::move(body), {}};
}

HttpResponse HttpResponse::Text(int status, std::string body) {
  return Of(status, "text/plain; charset=utf-8", std::move(body));
}

std::string_view HttpReason(int status) {
  std::string_view reason = http::obsolete_reason(static_cast<http::status>(status));
  return reason.empty() ? "Unknown" : reason;
}

struct HttpServer::Connection {
  explicit Connection(tcp::socket socket) : peer(PeerName(socket)), stream(std::move(socket)) {}
  std::string peer;
  beast::tcp_stream stream;
  bool handling = false;  // a request is being handled (on the executor only)
};

std::shared_ptr<HttpServer> HttpServer::Create(asio::any_io_executor executor,
                                               HttpServerOptions options) {
  return std::shared_ptr<HttpServer>(new HttpServer(std::move(executor), std::move(options)));
}

HttpServer::HttpServer(asio::any_io_executor executor, HttpServerOptions options)
    : executor_(std::move(executor)), options_(std::move(options)) {}

HttpServer::~HttpServer() = default;

void HttpServer::Route(std::string method, std::string path, HttpHandler handler) {
  routes_[std::move(path)][std::move(method)] = std::move(handler);
}

Result<uint16_t> HttpServer::Start() {
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

asio::awaitable<void> HttpServer::AcceptLoop() {
  while (!stopping_) {
    auto [ec, socket] = co_await acceptor_->async_accept(as_tuple(use_awaitable));
    if (ec) {
      if (ec == asio::error::operation_aborted || stopping_) break;
      // Out of descriptors (EMFILE) and the like: pause instead of spinning on the error.
      LOG_WARN("{}: accept failed: {}", options_.name, ec.message());
      asio::steady_timer pause(executor_);
      pause.expires_after(kAcceptErrorPause);
      co_await pause.async_wait(as_tuple(use_awaitable));
      continue;
    }
    auto connection = std::make_shared<Connection>(std::move(socket));
    if (open_.load() >= options_.max_connections) {
      asio::co_spawn(
          executor_, [self = shared_from_this(), connection] { return self->Refuse(connection); },
          asio::detached);
      continue;
    }
    ++open_;
    connections_.insert(connection);
    asio::co_spawn(
        executor_, [self = shared_from_this(), connection] { return self->Serve(connection); },
        asio::detached);
  }
}

asio::awaitable<void> HttpServer::Refuse(std::shared_ptr<Connection> connection) {
  LOG_WARN("{}: {} connections open, refusing {}", options_.name, options_.max_connections,
           connection->peer);
  auto answer = ToBeast(HttpResponse::Text(503, "too many connections\n"), 11, false);
  connection->stream.expires_after(kRefuseTimeout);
  co_await http::async_write(connection->stream, answer, as_tuple(use_awaitable));
  ErrorCode ignored;
  connection->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  connection->stream.close();
}

asio::awaitable<HttpResponse> HttpServer::Dispatch(HttpRequest request) {
  auto path = routes_.find(request.path);
  if (path == routes_.end())
    co_return HttpResponse::Text(404, "no such page: " + request.path + "\n");
  auto handler = path->second.find(request.method);
  if (handler == path->second.end()) {
    std::string allowed;
    for (const auto& [method, unused] : path->second)
      allowed += (allowed.empty() ? "" : ", ") + method;
    HttpResponse answer =
        HttpResponse::Text(405, request.method + " not allowed on " + request.path + "\n");
    answer.headers.emplace_back("Allow", allowed);
    co_return answer;
  }
  try {
    co_return co_await handler->second(std::move(request));
  } catch (const std::exception& e) {
    LOG_ERROR("{}: handler for {} threw: {}", options_.name, path->first, e.what());
  }
  co_return HttpResponse::Text(500, "internal error\n");
}

asio::awaitable<void> HttpServer::Serve(std::shared_ptr<Connection> connection) {
  beast::flat_buffer buffer;
  while (!stopping_) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(options_.max_header_bytes);
    parser.body_limit(options_.max_body_bytes);
    // One deadline for the whole request: a client sending a byte at a time still ends here.
    connection->stream.expires_after(options_.read_timeout);
    auto [read_error, unused] =
        co_await http::async_read(connection->stream, buffer, parser, as_tuple(use_awaitable));
    if (read_error) {
      int refusal = 0;
      if (read_error == http::error::header_limit) refusal = 431;
      if (read_error == http::error::body_limit) refusal = 413;
      if (refusal == 0 && read_error != http::error::end_of_stream &&
          read_error != beast::error::timeout && read_error != asio::error::operation_aborted &&
          read_error != asio::error::connection_reset && read_error != asio::error::eof)
        refusal = 400;
      if (read_error == beast::error::timeout)
        LOG_DEBUG("{}: {} sent no whole request within {} ms, closing", options_.name,
                  connection->peer, options_.read_timeout.count());
      if (refusal != 0) {
        // Debug, not warning: any client can send garbage, and must not fill the log with it.
        LOG_DEBUG("{}: bad request from {}: {}", options_.name, connection->peer,
                  read_error.message());
        auto answer = ToBeast(HttpResponse::Text(refusal, read_error.message() + "\n"), 11, false);
        connection->stream.expires_after(options_.write_timeout);
        co_await http::async_write(connection->stream, answer, as_tuple(use_awaitable));
      }
      break;
    }
    auto& message = parser.get();
    HttpRequest request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    const size_t question = request.target.find('?');
    request.path = request.target.substr(0, question);
    if (question != std::string::npos) request.query = request.target.substr(question + 1);
    for (const auto& field : message)
      request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    request.body = std::move(message.body());
    request.peer = connection->peer;
    const bool keep_alive = message.keep_alive();
    const unsigned version = message.version();

    connection->handling = true;
    ++active_;
    HttpResponse response = co_await Dispatch(std::move(request));
    auto answer = ToBeast(response, version, keep_alive && !stopping_);
    connection->stream.expires_after(options_.write_timeout);
    auto [write_error, written] =
        co_await http::async_write(connection->stream, answer, as_tuple(use_awaitable));
    --active_;
    connection->handling = false;
    if (write_error) {
      LOG_DEBUG("{}: answer to {} not sent: {}", options_.name, connection->peer,
                write_error.message());
      break;
    }
    if (!answer.keep_alive()) break;
  }
  ErrorCode ignored;
  connection->stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  connection->stream.close();
  connections_.erase(connection);
  --open_;
}

void HttpServer::CloseAll() {
  ErrorCode ignored;
  if (acceptor_) acceptor_->close(ignored);
  for (const auto& connection : connections_) connection->stream.socket().close(ignored);
}

Status HttpServer::Shutdown(Deadline deadline) {
  stopping_ = true;
  std::promise<void> stopped;
  asio::post(executor_, [this, self = shared_from_this(), &stopped] {
    ErrorCode ignored;
    if (acceptor_) acceptor_->close(ignored);
    // Idle connections close now; busy ones close after their answer (stopping_ is set).
    for (const auto& connection : connections_)
      if (!connection->handling) connection->stream.socket().close(ignored);
    stopped.set_value();
  });
  if (stopped.get_future().wait_until(deadline.when()) != std::future_status::ready) {
    Abort();
    return DeadlineExceeded(options_.name + ": shutdown: executor did not respond");
  }
  while (active_.load() > 0 && !deadline.Expired())
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const int still_running = active_.load();
  Abort();
  if (still_running > 0)
    return DeadlineExceeded(options_.name + ": shutdown: " + std::to_string(still_running) +
                            " requests still running at the deadline");
  return Status();
}

void HttpServer::Abort() {
  stopping_ = true;
  asio::post(executor_, [self = shared_from_this()] { self->CloseAll(); });
}

}  // namespace rt::net
