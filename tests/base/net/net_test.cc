// base/net/: frame I/O and the RPC skeleton on loopback.
#include <optional>
#include <thread>

#include <gtest/gtest.h>

#include "base/net/rpc.h"
#include "tests/base/net/loop.h"

namespace rt::net {
namespace {

constexpr uint16_t kEcho = 1, kSlow = 2, kFail = 3, kBig = 4;

std::shared_ptr<RpcServer> EchoServer(Loop& loop, uint32_t max_payload = kDefaultMaxFramePayload) {
  auto server =
      RpcServer::Create(loop.io().get_executor(), {.max_payload = max_payload, .name = "echo"});
  server->Handle(kEcho, [](RpcRequest req) -> asio::awaitable<Result<Bytes>> {
    co_return Bytes(req.payload.begin(), req.payload.end());
  });
  server->Handle(kSlow, [](RpcRequest req) -> asio::awaitable<Result<Bytes>> {
    co_await SleepUntil(Deadline::AfterMs(1000));
    co_return Bytes(req.payload.begin(), req.payload.end());
  });
  server->Handle(kFail, [](RpcRequest) -> asio::awaitable<Result<Bytes>> {
    co_return Status(StatusCode::kNotFound, "no such key", false);
  });
  return server;
}

TEST(FrameIo, ReadWriteRoundTripAndOversizeRejected) {
  Loop loop;
  tcp::acceptor acceptor(loop.io(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  uint16_t port = acceptor.local_endpoint().port();
  auto result = loop.Run<Status>([&]() -> asio::awaitable<Status> {
    auto accepted = acceptor.async_accept(asio::use_awaitable);
    CO_ASSIGN_OR_RETURN(tcp::socket client,
                        co_await Connect("127.0.0.1", port, Deadline::AfterMs(2000)));
    tcp::socket server = co_await std::move(accepted);
    CO_RETURN_IF_ERROR(
        co_await WriteFrame(client, 9, 5, 77, B("hello"), Deadline::AfterMs(1000), "server"));
    CO_ASSIGN_OR_RETURN(Frame f,
                        co_await ReadFrame(server, 1024, Deadline::AfterMs(1000), "client"));
    EXPECT_EQ(f.header.type, 9);
    EXPECT_EQ(f.header.flags, 5u);
    EXPECT_EQ(f.header.request_id, 77u);
    EXPECT_EQ(S(f.payload), "hello");
    // A frame larger than the reader's limit is a ProtocolError, without reading the payload.
    Bytes big(2000, std::byte{1});
    CO_RETURN_IF_ERROR(
        co_await WriteFrame(client, 9, 0, 1, big, Deadline::AfterMs(1000), "server"));
    Result<Frame> over = co_await ReadFrame(server, 1024, Deadline::AfterMs(1000), "client 7");
    EXPECT_EQ(over.status().code(), StatusCode::kProtocolError);
    EXPECT_NE(over.status().message().find("client 7"), std::string_view::npos);
    // A read with nothing arriving times out.
    Result<Frame> late = co_await ReadFrame(client, 1024, Deadline::AfterMs(50), "server");
    EXPECT_EQ(late.status().code(), StatusCode::kDeadlineExceeded);
    // Peer close: EOF names the peer.
    server.close();
    Result<Frame> eof = co_await ReadFrame(client, 1024, Deadline::AfterMs(1000), "rank 3");
    EXPECT_EQ(eof.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(eof.status().message().find("rank 3"), std::string_view::npos)
        << eof.status().ToString();
    co_return Status();
  });
  EXPECT_TRUE(result.ok()) << result.ToString();
}

// A frame the writer refuses at once (deadline already passed) must still complete its Send, not
// leave it waiting for a wake-up that came first.
TEST(FrameIo, FrameRefusedAtOnceCompletesItsSend) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const uint16_t port = acceptor.local_endpoint().port();
  std::optional<Status> sent;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto accepted = acceptor.async_accept(asio::use_awaitable);
        Result<tcp::socket> client = co_await Connect("127.0.0.1", port, Deadline::AfterMs(2000));
        if (!client.ok()) {
          sent = client.status();
          co_return;
        }
        tcp::socket server = co_await std::move(accepted);
        auto writer = std::make_shared<FrameWriter>(*client, "server");
        const Bytes payload = B("late");
        sent = co_await writer->Send(1, 0, 1, payload,
                                     Deadline::At(MonoClock::now() - std::chrono::milliseconds(1)));
      },
      asio::detached);
  io.run_for(std::chrono::seconds(5));
  ASSERT_TRUE(sent.has_value()) << "Send of a frame whose deadline had passed never returned";
  EXPECT_EQ(sent->code(), StatusCode::kDeadlineExceeded) << sent->ToString();
}

// Frames queued in the same turn go out in gathered writes (at most kMaxFramesPerWrite frames and
// kMaxBytesPerWrite bytes each): all arrive intact and in Send() order, and a frame whose deadline
// passed while queued fails alone without costing the frames around it.
TEST(FrameIo, FramesQueuedTogetherArriveInOrder) {
  Loop loop;
  tcp::acceptor acceptor(loop.io(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const uint16_t port = acceptor.local_endpoint().port();
  constexpr int kFrames = 2 * FrameWriter::kMaxFramesPerWrite + 5;
  constexpr int kExpired = 7, kLarge = 20;
  auto result = loop.Run<Status>([&]() -> asio::awaitable<Status> {
    auto accepted = acceptor.async_accept(asio::use_awaitable);
    CO_ASSIGN_OR_RETURN(tcp::socket client,
                        co_await Connect("127.0.0.1", port, Deadline::AfterMs(2000)));
    tcp::socket server = co_await std::move(accepted);
    auto writer = std::make_shared<FrameWriter>(client, "server");
    std::vector<Bytes> payloads(kFrames);
    std::vector<std::optional<Status>> sent(kFrames);
    for (int i = 0; i < kFrames; ++i) {
      payloads[i] = i == kLarge ? Bytes(FrameWriter::kMaxBytesPerWrite + 1, std::byte{0x5a})
                                : B("frame " + std::to_string(i));
      const Deadline deadline = i == kExpired
                                    ? Deadline::At(MonoClock::now() - std::chrono::milliseconds(1))
                                    : Deadline::AfterMs(5000);
      asio::co_spawn(
          co_await asio::this_coro::executor,
          [&, i, deadline]() -> asio::awaitable<void> {
            sent[i] = co_await writer->Send(1, 0, static_cast<uint32_t>(i), payloads[i], deadline);
          },
          asio::detached);
    }
    for (int i = 0; i < kFrames; ++i) {
      if (i == kExpired) continue;
      CO_ASSIGN_OR_RETURN(Frame f,
                          co_await ReadFrame(server, 1 << 20, Deadline::AfterMs(5000), "client"));
      EXPECT_EQ(f.header.request_id, static_cast<uint32_t>(i));
      EXPECT_TRUE(f.payload == payloads[i]) << "frame " << i;
    }
    co_await SleepUntil(Deadline::AfterMs(50));  // the last Send() returns after its write
    for (int i = 0; i < kFrames; ++i) {
      EXPECT_TRUE(sent[i].has_value()) << "Send " << i << " never returned";
      if (!sent[i]) continue;
      if (i == kExpired) {
        EXPECT_EQ(sent[i]->code(), StatusCode::kDeadlineExceeded) << sent[i]->ToString();
      } else {
        EXPECT_TRUE(sent[i]->ok()) << i << ": " << sent[i]->ToString();
      }
    }
    co_return Status();
  });
  EXPECT_TRUE(result.ok()) << result.ToString();
}

TEST(FrameIo, ConnectRefusedHonoursDeadline) {
  Loop loop;
  // Find a port nobody listens on.
  uint16_t port;
  {
    tcp::acceptor a(loop.io(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port = a.local_endpoint().port();
  }
  auto start = MonoClock::now();
  auto r = loop.Run<Status>([&]() -> asio::awaitable<Status> {
    auto s = co_await Connect("127.0.0.1", port, Deadline::AfterMs(200));
    co_return s.status();
  });
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(MonoClock::now() - start).count();
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.message().find(std::to_string(port)), std::string_view::npos) << r.ToString();
  EXPECT_GE(ms, 150);
  EXPECT_LT(ms, 1500);
}

TEST(Rpc, RoundTripPipelinedAndErrors) {
  Loop loop;
  auto server = EchoServer(loop);
  ASSERT_TRUE(server->Start().ok());
  auto s = loop.Run<Status>([&]() -> asio::awaitable<Status> {
    CO_ASSIGN_OR_RETURN(auto client, co_await RpcClient::Connect("127.0.0.1", server->port(),
                                                                 Deadline::AfterMs(2000)));
    CO_ASSIGN_OR_RETURN(Frame r, co_await client->Call(kEcho, B("ping"), Deadline::AfterMs(1000)));
    EXPECT_EQ(S(r.payload), "ping");
    EXPECT_TRUE(r.header.flags & kRpcResponse);
    // A handler's error comes back as the same code, naming the server.
    Result<Frame> err = co_await client->Call(kFail, {}, Deadline::AfterMs(1000));
    EXPECT_EQ(err.status().code(), StatusCode::kNotFound);
    EXPECT_NE(err.status().message().find("no such key"), std::string_view::npos);
    // Unknown type → Unimplemented.
    Result<Frame> unknown = co_await client->Call(99, {}, Deadline::AfterMs(1000));
    EXPECT_EQ(unknown.status().code(), StatusCode::kUnimplemented);
    co_return Status();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(Rpc, PipelinedCallsMatchByRequestId) {
  Loop loop;
  auto server = EchoServer(loop);
  ASSERT_TRUE(server->Start().ok());
  // A slow call first, then a fast one on the same connection: the fast one must not wait.
  std::shared_ptr<RpcClient> client =
      loop.Run<Result<std::shared_ptr<RpcClient>>>([&] {
            return RpcClient::Connect("127.0.0.1", server->port(), Deadline::AfterMs(2000));
          })
          .value();
  auto t0 = MonoClock::now();
  auto slow = loop.Start(client->Call(kSlow, Keep(B("slow")), Deadline::AfterMs(5000)));
  auto fast = loop.Start(client->Call(kEcho, Keep(B("fast")), Deadline::AfterMs(2000)));
  auto f = fast.get();
  auto fast_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(MonoClock::now() - t0).count();
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(S(f->payload), "fast");
  EXPECT_LT(fast_ms, 250);
  auto sl = slow.get();
  ASSERT_TRUE(sl.ok());
  EXPECT_EQ(S(sl->payload), "slow");
}

TEST(Rpc, CallDeadlineExpires) {
  Loop loop;
  auto server = EchoServer(loop);
  ASSERT_TRUE(server->Start().ok());
  auto client =
      loop.Run<Result<std::shared_ptr<RpcClient>>>([&] {
            return RpcClient::Connect("127.0.0.1", server->port(), Deadline::AfterMs(2000));
          })
          .value();
  auto t0 = MonoClock::now();
  // The deadline ends while the server sleeps, well after the request was sent: a request still
  // unsent at its deadline closes the connection (a partial frame), which a 50 ms deadline did
  // under an ASan build on a loaded machine.
  auto r = loop.Start(client->Call(kSlow, Keep(B("x")), Deadline::AfterMs(400))).get();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(MonoClock::now() - t0).count();
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(ms, 900);
  // The connection stays usable; the late answer is dropped.
  auto again = loop.Start(client->Call(kEcho, Keep(B("y")), Deadline::AfterMs(1000))).get();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(S(again->payload), "y");
}

TEST(Rpc, ServerAbortFailsPendingCallsNamingTheServer) {
  Loop loop;
  auto server = EchoServer(loop);
  ASSERT_TRUE(server->Start().ok());
  RpcClientOptions opts;
  opts.peer_name = "echo server";
  auto client =
      loop.Run<Result<std::shared_ptr<RpcClient>>>([&] {
            return RpcClient::Connect("127.0.0.1", server->port(), Deadline::AfterMs(2000), opts);
          })
          .value();
  auto pending = loop.Start(client->Call(kSlow, Keep(B("x")), Deadline::AfterMs(5000)));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto t0 = MonoClock::now();
  server->Abort();
  auto r = pending.get();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(MonoClock::now() - t0).count();
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("echo server"), std::string_view::npos)
      << r.status().ToString();
  EXPECT_LT(ms, 200);
  EXPECT_FALSE(client->connected());
}

TEST(Rpc, OversizedRequestDropsConnection) {
  Loop loop;
  auto server = EchoServer(loop, /*max_payload=*/1024);
  ASSERT_TRUE(server->Start().ok());
  auto client =
      loop.Run<Result<std::shared_ptr<RpcClient>>>([&] {
            return RpcClient::Connect("127.0.0.1", server->port(), Deadline::AfterMs(2000));
          })
          .value();
  Bytes big(4096, std::byte{7});
  auto r = loop.Start(client->Call(kEcho, Keep(big), Deadline::AfterMs(2000))).get();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
}

TEST(Rpc, GracefulShutdownWaitsForRunningHandlers) {
  Loop loop;
  auto server = EchoServer(loop);
  ASSERT_TRUE(server->Start().ok());
  auto client =
      loop.Run<Result<std::shared_ptr<RpcClient>>>([&] {
            return RpcClient::Connect("127.0.0.1", server->port(), Deadline::AfterMs(2000));
          })
          .value();
  auto pending = loop.Start(client->Call(kSlow, Keep(B("done")), Deadline::AfterMs(5000)));
  while (server->active_requests() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  Status s = server->Shutdown(Deadline::AfterMs(3000));
  EXPECT_TRUE(s.ok()) << s.ToString();
  auto r = pending.get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(S(r->payload), "done");
  // New connections are refused after shutdown.
  auto again = loop.Run<Result<std::shared_ptr<RpcClient>>>(
      [&] { return RpcClient::Connect("127.0.0.1", server->port(), Deadline::AfterMs(100)); });
  EXPECT_FALSE(again.ok());
}

}  // namespace
}  // namespace rt::net
