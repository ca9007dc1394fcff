// base/net bulk path: frames without a payload CRC (header still checked), gathered writes,
// bulk replies and zero-copy receive into the caller's buffers.
#include <sys/socket.h>

#include <array>
#include <cstring>
#include <functional>

#include <gtest/gtest.h>

#include "base/crc32c.h"
#include "base/net/rpc.h"
#include "tests/base/net/loop.h"

namespace rt::net {
namespace {

constexpr uint16_t kEcho = 1, kBulk = 2, kFail = 3;

// A pair of connected sockets on `loop`.
asio::awaitable<Result<std::pair<tcp::socket, tcp::socket>>> Pair(tcp::acceptor& acceptor) {
  auto accepted = acceptor.async_accept(asio::use_awaitable);
  CO_ASSIGN_OR_RETURN(
      tcp::socket client,
      co_await Connect("127.0.0.1", acceptor.local_endpoint().port(), Deadline::AfterMs(2000)));
  tcp::socket server = co_await std::move(accepted);
  co_return std::make_pair(std::move(client), std::move(server));
}

// Runs `body` on a loop with a connected pair of sockets and expects it to return OK.
void WithSocketPair(
    const std::function<asio::awaitable<Status>(tcp::socket& client, tcp::socket& server)>& body) {
  Loop loop;
  tcp::acceptor acceptor(loop.io(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  auto result = loop.Run<Status>([&]() -> asio::awaitable<Status> {
    CO_ASSIGN_OR_RETURN(auto sockets, co_await Pair(acceptor));
    co_return co_await body(sockets.first, sockets.second);
  });
  EXPECT_TRUE(result.ok()) << result.ToString();
}

TEST(BulkFrame, GatheredUncheckedFrameRoundTripsAndItsHeaderIsChecked) {
  WithSocketPair([&](tcp::socket& client, tcp::socket& server) -> asio::awaitable<Status> {
    const Bytes a = B("head|"), b = B("body bytes"), c = B("|tail");
    const std::span<const std::byte> pieces[] = {a, b, c};
    for (uint32_t flags : {0u, kFrameUncheckedPayload}) {
      CO_RETURN_IF_ERROR(co_await WriteFrame(client, 7, flags | 3, 41, Pieces(pieces),
                                             Deadline::AfterMs(1000), "s"));
      CO_ASSIGN_OR_RETURN(Frame f, co_await ReadFrame(server, 1024, Deadline::AfterMs(1000), "c"));
      EXPECT_EQ(S(f.payload), "head|body bytes|tail");
      EXPECT_EQ(f.header.flags, flags | 3);
      EXPECT_EQ(f.header.request_id, 41u);
      // The header's crc field: the payload's CRC32C, or the header's own for unchecked frames.
      auto header = EncodeGatherHeader(7, flags | 3, 41, Pieces(pieces));
      EXPECT_EQ(f.header.crc,
                flags ? Crc32c(header.data(), 20) : Crc32c(f.payload.data(), f.payload.size()));
    }
    // A flipped bit in an unchecked frame's header (here the request id) is Corruption.
    auto header = EncodeGatherHeader(7, kFrameUncheckedPayload, 41, Pieces(pieces));
    header[12] ^= std::byte{1};
    EXPECT_EQ(DecodeCheckedHeader(header, 1024).status().code(), StatusCode::kCorruption);
    CO_RETURN_IF_ERROR(co_await WriteAll(client, header, Deadline::AfterMs(1000), "s"));
    Result<Frame> bad = co_await ReadFrame(server, 1024, Deadline::AfterMs(1000), "c");
    EXPECT_EQ(bad.status().code(), StatusCode::kCorruption) << bad.status().ToString();
    co_return Status();
  });
}

TEST(BulkFrame, CheckedFrameWithCorruptedPayloadIsRejected) {
  WithSocketPair([&](tcp::socket& client, tcp::socket& server) -> asio::awaitable<Status> {
    Bytes payload = B("payload");
    const std::span<const std::byte> one[] = {payload};
    auto header = EncodeGatherHeader(7, 0, 1, Pieces(one));
    payload[0] = std::byte{'P'};  // changed after the CRC was taken
    CO_RETURN_IF_ERROR(co_await WriteAll(client, header, Deadline::AfterMs(1000), "s"));
    CO_RETURN_IF_ERROR(co_await WriteAll(client, payload, Deadline::AfterMs(1000), "s"));
    Result<Frame> bad = co_await ReadFrame(server, 1024, Deadline::AfterMs(1000), "c");
    EXPECT_EQ(bad.status().code(), StatusCode::kCorruption) << bad.status().ToString();
    co_return Status();
  });
}

// The socket's receive low-water mark (SO_RCVLOWAT).
int LowWater(tcp::socket& socket) {
  int mark = -1;
  socklen_t len = sizeof mark;
  getsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVLOWAT, &mark, &len);
  return mark;
}

TEST(BulkFrame, BatchedReadReceivesEveryByteAndLeavesTheLowMarkAtOneByte) {
  WithSocketPair([&](tcp::socket& client, tcp::socket& server) -> asio::awaitable<Status> {
    auto ex = co_await asio::this_coro::executor;
    // Sizes that end in a partial batch, and one below the batch (a plain read).
    for (size_t size : {size_t{(5 << 20) + 123}, size_t{3 << 20}, size_t{1000}}) {
      Bytes sent(size);
      for (size_t i = 0; i < size; ++i) sent[i] = static_cast<std::byte>(i * 7 + (i >> 16));
      asio::co_spawn(
          ex,
          [&]() -> asio::awaitable<void> {
            (void)co_await WriteAll(client, sent, Deadline::AfterMs(5000), "server");
          },
          asio::detached);
      Bytes got(size, std::byte{0});
      CO_RETURN_IF_ERROR(
          co_await ReadExactlyBatched(server, got, 1 << 20, Deadline::AfterMs(5000), "client"));
      EXPECT_TRUE(got == sent) << size;
      EXPECT_EQ(LowWater(server), 1) << size;
    }
    // A few bytes right after: a mark left high would keep them waiting until the deadline.
    const Bytes small = B("after");
    CO_RETURN_IF_ERROR(co_await WriteAll(client, small, Deadline::AfterMs(1000), "server"));
    Bytes got(small.size());
    CO_RETURN_IF_ERROR(co_await ReadExactly(server, got, Deadline::AfterMs(1000), "client"));
    EXPECT_EQ(S(got), "after");
    // A peer that closes in the middle of a batch: an error at once, not a wait for the deadline.
    const Bytes part(300 << 10, std::byte{3});
    CO_RETURN_IF_ERROR(co_await WriteAll(client, part, Deadline::AfterMs(1000), "server"));
    client.close();
    Bytes whole(4 << 20);
    const auto t0 = MonoClock::now();
    Status cut =
        co_await ReadExactlyBatched(server, whole, 1 << 20, Deadline::AfterMs(5000), "client");
    EXPECT_EQ(cut.code(), StatusCode::kUnavailable) << cut.ToString();
    EXPECT_LT(MonoClock::now() - t0, std::chrono::milliseconds(2000));
    co_return Status();
  });
}

std::shared_ptr<RpcServer> BulkServer(Loop& loop, uint32_t payload_read_batch = 0) {
  auto server = RpcServer::Create(loop.io().get_executor(),
                                  {.name = "bulk", .payload_read_batch = payload_read_batch});
  server->Handle(kEcho, [](RpcRequest req) -> asio::awaitable<Result<Bytes>> {
    co_return Bytes(req.payload.begin(), req.payload.end());
  });
  // Answers head "H" + the request's bytes as the body.
  server->HandleBulk(kBulk, [](RpcRequest req) -> asio::awaitable<Result<RpcBulkReply>> {
    EXPECT_TRUE(req.header.flags & kFrameUncheckedPayload);
    co_return RpcBulkReply{B("H"), Bytes(req.payload.begin(), req.payload.end())};
  });
  server->HandleBulk(kFail, [](RpcRequest) -> asio::awaitable<Result<RpcBulkReply>> {
    co_return Status(StatusCode::kNotFound, "nothing here", false);
  });
  return server;
}

class BulkRpcReads : public ::testing::TestWithParam<uint32_t> {};

// Every case with request payloads read as they arrive and in batches of 1 MiB.
INSTANTIATE_TEST_SUITE_P(PayloadReadBatch, BulkRpcReads, ::testing::Values(0u, 1u << 20));

TEST_P(BulkRpcReads, ZeroCopyReceiveIntoCallerBuffers) {
  Loop loop;
  auto server = BulkServer(loop, GetParam());
  ASSERT_TRUE(server->Start().ok());
  auto s = loop.Run<Status>([&]() -> asio::awaitable<Status> {
    CO_ASSIGN_OR_RETURN(auto client, co_await RpcClient::Connect("127.0.0.1", server->port(),
                                                                 Deadline::AfterMs(2000)));
    Bytes data(3 << 20);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 131 + (i >> 12));
    const Bytes prefix = B("pre");
    const std::span<const std::byte> pieces[] = {prefix, data};
    std::array<std::byte, 1> head{};
    Bytes body(4 << 20, std::byte{0x5a});
    size_t received = 0;
    CO_ASSIGN_OR_RETURN(
        Frame f, co_await client->CallInto(kBulk, Pieces(pieces), kFrameUncheckedPayload, head,
                                           body, &received, Deadline::AfterMs(5000)));
    EXPECT_TRUE(f.payload.empty());
    EXPECT_TRUE(f.header.flags & kFrameUncheckedPayload);
    EXPECT_EQ(received, 1 + prefix.size() + data.size());
    EXPECT_EQ(head[0], std::byte{'H'});
    EXPECT_EQ(std::memcmp(body.data(), prefix.data(), prefix.size()), 0);
    EXPECT_EQ(std::memcmp(body.data() + prefix.size(), data.data(), data.size()), 0);
    EXPECT_EQ(body[prefix.size() + data.size()],
              std::byte{0x5a});  // nothing written past the payload
    // A checked (ordinary) response is verified and lands in the buffers too.
    CO_ASSIGN_OR_RETURN(f, co_await client->CallInto(kEcho, Pieces(pieces), 0, head, body,
                                                     &received, Deadline::AfterMs(5000)));
    EXPECT_EQ(received, prefix.size() + data.size());
    EXPECT_EQ(head[0], std::byte{'p'});
    // A response larger than the buffers fails the call, not the connection.
    std::array<std::byte, 8> small{};
    Result<Frame> over = co_await client->CallInto(kBulk, Pieces(pieces), kFrameUncheckedPayload,
                                                   head, small, &received, Deadline::AfterMs(5000));
    EXPECT_EQ(over.status().code(), StatusCode::kProtocolError) << over.status().ToString();
    // An error response is the call's error.
    Result<Frame> err =
        co_await client->CallInto(kFail, {}, 0, head, body, &received, Deadline::AfterMs(5000));
    EXPECT_EQ(err.status().code(), StatusCode::kNotFound);
    EXPECT_TRUE(client->connected());
    CO_ASSIGN_OR_RETURN(f, co_await client->Call(kEcho, B("still up"), Deadline::AfterMs(1000)));
    EXPECT_EQ(S(f.payload), "still up");
    co_return Status();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// Waits until `server` keeps `bytes` of spare payload buffers (it recycles a request's buffer
// after its response is sent, which may be after the client has the response).
bool SpareBytesBecome(RpcServer& server, size_t bytes) {
  const Deadline deadline = Deadline::AfterMs(2000);
  while (server.spare_payload_bytes() != bytes && !deadline.Expired())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return server.spare_payload_bytes() == bytes;
}

TEST(BulkRpc, LargePayloadBuffersAreReusedWithinTheirBound) {
  Loop loop;
  auto server = RpcServer::Create(loop.io().get_executor(),
                                  {.name = "spare", .spare_payload_bytes = 8 << 20});
  server->Handle(kEcho, [](RpcRequest req) -> asio::awaitable<Result<Bytes>> {
    co_return Bytes(req.payload.begin(), req.payload.end());
  });
  ASSERT_TRUE(server->Start().ok());
  auto client = loop.Run<Result<std::shared_ptr<RpcClient>>>(
      [&] { return RpcClient::Connect("127.0.0.1", server->port(), Deadline::AfterMs(2000)); });
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  // Each payload differs from the one before, so a reused buffer must be filled anew.
  auto echo = [&](size_t size, int seed) {
    Bytes sent(size);
    for (size_t i = 0; i < size; ++i) sent[i] = static_cast<std::byte>(i * 13 + seed);
    auto got = loop.Run<Result<Frame>>(
        [&] { return (*client)->Call(kEcho, sent, Deadline::AfterMs(5000)); });
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(got.ok() && got->payload == sent) << size;
  };
  echo(1000, 1);  // small payloads are not kept
  EXPECT_TRUE(SpareBytesBecome(*server, 0));
  echo(3 << 20, 2);
  EXPECT_TRUE(SpareBytesBecome(*server, 3 << 20));
  echo(2 << 20, 3);  // reuses the 3 MiB buffer
  EXPECT_TRUE(SpareBytesBecome(*server, 3 << 20));
  echo((3 << 20) + 1, 4);  // does not fit it: a new one of 3 MiB + 64 KiB, both kept
  EXPECT_TRUE(SpareBytesBecome(*server, (6 << 20) + (64 << 10)));
  echo(4 << 20, 5);  // a new one that would pass the 8 MiB bound: not kept
  EXPECT_TRUE(SpareBytesBecome(*server, (6 << 20) + (64 << 10)));
  (*client)->Close();
}

TEST(BulkRpc, DeadlineDuringZeroCopyReceiveClosesTheConnectionAndReleasesTheBuffer) {
  Loop loop;
  tcp::acceptor acceptor(loop.io(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const uint16_t port = acceptor.local_endpoint().port();
  auto s = loop.Run<Status>([&]() -> asio::awaitable<Status> {
    auto accepted = acceptor.async_accept(asio::use_awaitable);
    CO_ASSIGN_OR_RETURN(auto client,
                        co_await RpcClient::Connect("127.0.0.1", port, Deadline::AfterMs(2000)));
    tcp::socket server = co_await std::move(accepted);
    std::array<std::byte, 4> head{};
    Bytes body(1024, std::byte{0});
    size_t received = 0;
    auto ex = co_await asio::this_coro::executor;
    // A peer that answers half a response and then stalls.
    asio::co_spawn(
        ex,
        [&]() -> asio::awaitable<void> {
          auto request = co_await ReadFrame(server, 1024, Deadline::AfterMs(2000), "client");
          if (!request.ok()) co_return;
          Bytes payload(1000, std::byte{1});
          const std::span<const std::byte> one[] = {payload};
          auto header =
              EncodeGatherHeader(kEcho, kRpcResponse, request->header.request_id, Pieces(one));
          (void)co_await WriteAll(server, header, Deadline::AfterMs(1000), "client");
          (void)co_await WriteAll(server, std::span(payload).first(500), Deadline::AfterMs(1000),
                                  "client");
        },
        asio::detached);
    const auto t0 = MonoClock::now();
    Result<Frame> r =
        co_await client->CallInto(kEcho, {}, 0, head, body, &received, Deadline::AfterMs(200));
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(MonoClock::now() - t0).count();
    EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
    EXPECT_LT(ms, 1500);
    EXPECT_FALSE(client->connected());
    EXPECT_EQ(received, 0u);
    co_return Status();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
}

}  // namespace
}  // namespace rt::net
