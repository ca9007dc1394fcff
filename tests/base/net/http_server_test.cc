// base/net/http_server + http_client on loopback: routes, limits, slow clients, shutdown.
#include "base/net/http_server.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <stdexcept>
#include <thread>

#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include "base/net/http_client.h"
#include "tests/base/net/loop.h"

namespace rt::net {
namespace {

HttpResponse Get(Loop& loop, uint16_t port, std::string target, std::string method = "GET",
                 std::string body = "") {
  auto reply = loop.Run<Result<HttpResponse>>([&]() {
    return HttpCall({.method = method, .port = port, .target = target, .body = body},
                    Deadline::AfterMs(10'000));
  });
  EXPECT_TRUE(reply.ok()) << reply.status().ToString();
  return reply.ok() ? *reply : HttpResponse::Text(0, "");
}

std::shared_ptr<HttpServer> TestServer(Loop& loop, HttpServerOptions options = {}) {
  auto server = HttpServer::Create(loop.io().get_executor(), options);
  server->Route("GET", "/hello", [](HttpRequest req) -> asio::awaitable<HttpResponse> {
    co_return HttpResponse::Text(200, "hello " + req.query + " from " + req.Header("user-agent"));
  });
  server->Route("POST", "/echo", [](HttpRequest req) -> asio::awaitable<HttpResponse> {
    co_return HttpResponse::Of(201, "application/json", req.body);
  });
  server->Route("GET", "/throw", [](HttpRequest) -> asio::awaitable<HttpResponse> {
    throw std::runtime_error("handler bug");
    co_return HttpResponse::Text(200, "unreachable");
  });
  server->Route("GET", "/slow", [](HttpRequest) -> asio::awaitable<HttpResponse> {
    co_await SleepUntil(Deadline::AfterMs(300));
    co_return HttpResponse::Text(200, "slow done");
  });
  return server;
}

// A blocking client socket with a receive timeout, for sending raw bytes.
struct RawClient {
  asio::io_context io;
  tcp::socket socket{io};
  explicit RawClient(uint16_t port, int receive_timeout_ms = 10'000) {
    socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    timeval tv{receive_timeout_ms / 1000, (receive_timeout_ms % 1000) * 1000};
    setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  void Send(std::string_view bytes) { asio::write(socket, asio::buffer(bytes)); }
  // Reads until the peer closes (or the receive timeout); returns what arrived.
  std::string ReadToClose(boost::system::error_code* last = nullptr) {
    std::string got;
    char chunk[4096];
    boost::system::error_code ec;
    for (;;) {
      size_t n = socket.read_some(asio::buffer(chunk), ec);
      got.append(chunk, n);
      if (ec) break;
    }
    if (last) *last = ec;
    return got;
  }
};

TEST(HttpServer, RoutesMethodsAndErrors) {
  Loop loop;
  auto server = TestServer(loop);
  ASSERT_TRUE(server->Start().ok());
  const uint16_t port = server->port();

  HttpResponse hello = Get(loop, port, "/hello?x=1");
  EXPECT_EQ(hello.status, 200);
  EXPECT_EQ(hello.body, "hello x=1 from ringtrain");
  EXPECT_EQ(hello.content_type, "text/plain; charset=utf-8");

  HttpResponse echo = Get(loop, port, "/echo", "POST", R"({"a":1})");
  EXPECT_EQ(echo.status, 201);
  EXPECT_EQ(echo.body, R"({"a":1})");
  EXPECT_EQ(echo.content_type, "application/json");

  EXPECT_EQ(Get(loop, port, "/nothing").status, 404);
  HttpResponse wrong_method = Get(loop, port, "/echo");
  EXPECT_EQ(wrong_method.status, 405);
  bool allow_named = false;
  for (const auto& [name, value] : wrong_method.headers)
    if (name == "Allow") allow_named = value == "POST";
  EXPECT_TRUE(allow_named);
  EXPECT_EQ(Get(loop, port, "/throw").status, 500);
  // The server still serves after a throwing handler.
  EXPECT_EQ(Get(loop, port, "/hello").status, 200);
  server->Abort();
}

TEST(HttpServer, KeepAliveServesSeveralRequestsOnOneConnection) {
  Loop loop;
  auto server = TestServer(loop);
  ASSERT_TRUE(server->Start().ok());
  RawClient client(server->port());
  client.Send(
      "GET /hello?a HTTP/1.1\r\nHost: x\r\n\r\nGET /hello?b HTTP/1.1\r\nHost: x\r\n"
      "Connection: close\r\n\r\n");
  std::string got = client.ReadToClose();
  EXPECT_NE(got.find("hello a from"), std::string::npos) << got;
  EXPECT_NE(got.find("hello b from"), std::string::npos) << got;
  server->Abort();
}

TEST(HttpServer, OversizedHeadAndBodyAreRefused) {
  Loop loop;
  auto server = TestServer(loop, {.max_header_bytes = 512, .max_body_bytes = 100});
  ASSERT_TRUE(server->Start().ok());
  {
    RawClient client(server->port());
    client.Send("GET /hello HTTP/1.1\r\nHost: x\r\nX-Filler: " + std::string(2000, 'a') +
                "\r\n\r\n");
    std::string got = client.ReadToClose();
    EXPECT_EQ(got.rfind("HTTP/1.1 431", 0), 0u) << got;
  }
  HttpResponse big = Get(loop, server->port(), "/echo", "POST", std::string(101, 'b'));
  EXPECT_EQ(big.status, 413);
  HttpResponse fits = Get(loop, server->port(), "/echo", "POST", std::string(100, 'b'));
  EXPECT_EQ(fits.status, 201);
  {
    RawClient client(server->port());
    client.Send("THIS IS NOT HTTP\r\n\r\n");
    std::string got = client.ReadToClose();
    EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << got;
  }
  server->Abort();
}

// Slowloris: a client that sends its request a byte at a time is closed at the read deadline,
// long before its request would be complete, and other clients are served meanwhile.
TEST(HttpServer, SlowClientIsClosedAtTheReadDeadline) {
  Loop loop;
  auto server = TestServer(loop, {.read_timeout = std::chrono::milliseconds(400)});
  ASSERT_TRUE(server->Start().ok());
  RawClient slow(server->port());
  const std::string request =
      "GET /hello HTTP/1.1\r\nHost: x\r\nX-Pad: " + std::string(200, 'p') + "\r\n\r\n";
  const auto start = MonoClock::now();
  bool closed = false;
  size_t sent = 0;
  for (; sent < request.size(); ++sent) {
    boost::system::error_code ec;
    asio::write(slow.socket, asio::buffer(&request[sent], 1), ec);
    if (ec) {
      closed = true;
      break;
    }
    // Peek without blocking for long: has the server closed?
    if (slow.socket.available(ec) == 0 && !ec) {
      char byte;
      ::timeval tv{0, 1000};
      setsockopt(slow.socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      ssize_t n = ::recv(slow.socket.native_handle(), &byte, 1, MSG_PEEK);
      if (n == 0) {
        closed = true;
        break;
      }
    }
    if (sent == 5) {
      EXPECT_EQ(Get(loop, server->port(), "/hello").status, 200);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
  }
  const auto elapsed = MonoClock::now() - start;
  EXPECT_TRUE(closed) << "the server let a " << request.size() << "-byte request dribble in";
  EXPECT_LT(sent, request.size());
  // It is not closed before its deadline.
  EXPECT_GE(elapsed, std::chrono::milliseconds(400));
  server->Abort();
}

TEST(HttpServer, ConnectionsOverTheLimitGet503) {
  Loop loop;
  auto server = TestServer(loop, {.max_connections = 2});
  ASSERT_TRUE(server->Start().ok());
  auto idle1 = std::make_unique<RawClient>(server->port());
  auto idle2 = std::make_unique<RawClient>(server->port());
  const Deadline deadline = Deadline::AfterMs(10'000);
  while (server->open_connections() < 2 && !deadline.Expired())
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(server->open_connections(), 2);
  EXPECT_EQ(Get(loop, server->port(), "/hello").status, 503);
  idle1.reset();
  while (server->open_connections() > 1 && !deadline.Expired())
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(Get(loop, server->port(), "/hello").status, 200);
  server->Abort();
}

TEST(HttpServer, ShutdownLetsRunningRequestsFinish) {
  Loop loop;
  auto server = TestServer(loop);
  ASSERT_TRUE(server->Start().ok());
  auto slow =
      loop.Start(HttpCall({.port = server->port(), .target = "/slow"}, Deadline::AfterMs(10'000)));
  const Deadline deadline = Deadline::AfterMs(10'000);
  while (server->active_requests() == 0 && !deadline.Expired())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(server->Shutdown(Deadline::AfterMs(10'000)).ok());
  Result<HttpResponse> done = slow.get();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->body, "slow done");
  // Nothing listens any more.
  auto refused = loop.Run<Result<HttpResponse>>([&]() {
    return HttpCall({.port = server->port(), .target = "/hello"}, Deadline::AfterMs(200));
  });
  EXPECT_FALSE(refused.ok());
}

TEST(HttpClient, UnreachableServerIsAnError) {
  Loop loop;
  uint16_t port;
  {
    tcp::acceptor probe(loop.io(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port = probe.local_endpoint().port();
  }
  auto reply = loop.Run<Result<HttpResponse>>(
      [&]() { return HttpCall({.port = port, .target = "/x"}, Deadline::AfterMs(200)); });
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find("/x"), std::string_view::npos)
      << reply.status().ToString();
}

}  // namespace
}  // namespace rt::net
