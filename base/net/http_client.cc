#include "base/net/http_client.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "base/net/frame_io.h"

namespace rt::net {
namespace {
namespace beast = boost::beast;
namespace http = beast::http;
using asio::as_tuple;
using asio::use_awaitable;

Status CallError(const boost::system::error_code& ec, const std::string& what) {
  if (ec == beast::error::timeout) return DeadlineExceeded(what + ": timed out");
  if (ec == http::error::body_limit || ec == http::error::header_limit)
    return Status(StatusCode::kProtocolError, what + ": response too large: " + ec.message());
  const auto& http_errors = boost::system::error_code(http::error::bad_version).category();
  if (ec.category() == http_errors && ec != http::error::end_of_stream &&
      ec != http::error::partial_message)
    return Status(StatusCode::kProtocolError, what + ": malformed response: " + ec.message());
  return Status(StatusCode::kUnavailable, what + ": " + ec.message(), true);
}
}  // namespace

asio::awaitable<Result<HttpResponse>> HttpCall(HttpCallRequest request, Deadline deadline) {
  const std::string what = request.method + " http://" + request.host + ":" +
                           std::to_string(request.port) + request.target;
  Result<tcp::socket> socket = co_await Connect(request.host, request.port, deadline);
  if (!socket.ok()) co_return socket.status().WithContext(what);
  beast::tcp_stream stream(std::move(*socket));
  stream.expires_at(deadline.when());

  http::request<http::string_body> out{http::string_to_verb(request.method), request.target, 11};
  out.set(http::field::host, request.host + ":" + std::to_string(request.port));
  out.set(http::field::user_agent, "ringtrain");
  if (!request.body.empty() || request.method == "POST") {
    out.set(http::field::content_type, request.content_type);
    out.body() = std::move(request.body);
  }
  out.keep_alive(false);
  out.prepare_payload();
  auto [write_error, written] = co_await http::async_write(stream, out, as_tuple(use_awaitable));
  if (write_error) co_return CallError(write_error, what);

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(request.max_body_bytes);
  auto [read_error, read] =
      co_await http::async_read(stream, buffer, parser, as_tuple(use_awaitable));
  if (read_error) co_return CallError(read_error, what);
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);

  auto& message = parser.get();
  HttpResponse response;
  response.status = static_cast<int>(message.result_int());
  response.content_type = std::string(message[http::field::content_type]);
  for (const auto& field : message)
    response.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  response.body = std::move(message.body());
  co_return response;
}

}  // namespace rt::net
