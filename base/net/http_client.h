// A one-shot HTTP/1.1 client on Boost.Beast and Asio coroutines: one request per connection,
// with a deadline. For tools and tests that talk to HTTP services (the daemon's /metrics and
// /api/status, a WebDriver).
//
// Thread safety: a coroutine; call it on any executor. Nothing is shared between calls.
#pragma once

#include <cstdint>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "base/deadline.h"
#include "base/net/http_server.h"
#include "base/status.h"

namespace rt::net {

// One request to send.
struct HttpCallRequest {
  std::string method = "GET";
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string target = "/";  // path and query
  std::string body = {};     // sent when not empty (or when method is POST)
  std::string content_type = "application/json";
  // Largest response body accepted, bytes.
  uint64_t max_body_bytes = 64ull << 20;
};

// Connects (retrying refused connects until `deadline`), sends the request and reads the whole
// response. Any HTTP status is a successful call: the caller checks response.status. Errors:
// Unavailable when the server cannot be reached or closes early, DeadlineExceeded when
// `deadline` passes, ProtocolError for a malformed or oversized response; each names
// "host:port" and the target.
asio::awaitable<Result<HttpResponse>> HttpCall(HttpCallRequest request, Deadline deadline);

}  // namespace rt::net
