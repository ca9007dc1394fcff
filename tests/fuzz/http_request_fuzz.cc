// Fuzz target: any bytes a client sends to base/net's HTTP server get a well-formed HTTP answer
// or a closed connection — never a crash, a hang or a garbled reply. Runs the real server on
// loopback (one for the whole run) and sends each input on a fresh connection.
#include <sys/socket.h>
#include <sys/time.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/write.hpp>

#include "base/net/http_server.h"

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// The server, started once, on its own thread.
struct Server {
  asio::io_context io;
  std::shared_ptr<rt::net::HttpServer> server;
  std::thread thread;
  uint16_t port = 0;
  Server() {
    server = rt::net::HttpServer::Create(io.get_executor(),
                                         {.max_header_bytes = 1024,
                                          .max_body_bytes = 256,
                                          .read_timeout = std::chrono::milliseconds(2000),
                                          .name = "fuzz"});
    server->Route("GET", "/", [](rt::net::HttpRequest) -> asio::awaitable<rt::net::HttpResponse> {
      co_return rt::net::HttpResponse::Text(200, "ok");
    });
    server->Route("POST", "/echo",
                  [](rt::net::HttpRequest r) -> asio::awaitable<rt::net::HttpResponse> {
                    co_return rt::net::HttpResponse::Text(200, r.body);
                  });
    auto started = server->Start();
    if (!started.ok()) __builtin_trap();
    port = *started;
    thread = std::thread([this] { io.run(); });
    thread.detach();
  }
};

// Says which property failed, then traps (libFuzzer keeps the input).
[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "http_request fuzz target: %s\n", what.c_str());
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Server* server = new Server();  // lives for the process
  asio::io_context io;
  tcp::socket socket(io);
  boost::system::error_code ec;
  // A refused connect after hundreds of thousands of them (ports in TIME_WAIT) is the
  // harness's, not the server's: try again a few times before calling it a failure.
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20 * attempt));
    if (socket.is_open()) socket.close(ec);
    socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server->port), ec);
    if (!ec) break;
  }
  if (ec) Fail("connect to the server: " + ec.message());
  timeval tv{10, 0};  // far beyond the server's read deadline: a hang is a failure
  setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  asio::write(socket, asio::buffer(data, size), ec);
  socket.shutdown(tcp::socket::shutdown_send, ec);
  std::string reply;
  char chunk[4096];
  for (;;) {
    const size_t n = socket.read_some(asio::buffer(chunk), ec);
    reply.append(chunk, n);
    if (ec) break;
  }
  if (ec == asio::error::would_block || ec == asio::error::try_again)
    Fail("no reply and no close within 10 s (hung)");
  // Every answer the server wrote is an HTTP/1.x status line first.
  if (!reply.empty() && reply.rfind("HTTP/1.", 0) != 0)
    Fail("a reply that is not HTTP/1.x: '" + reply.substr(0, 64) + "'");
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  std::vector<std::vector<uint8_t>> seeds;
  for (const char* request :
       {"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
        "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        "5\r\nhello\r\n0\r\n\r\n",
        "GET /missing?x=1 HTTP/1.0\r\n\r\nGET / HTTP/1.1\r\nConnection: close\r\n\r\n"})
    seeds.emplace_back(request, request + std::strlen(request));
  return seeds;
}
