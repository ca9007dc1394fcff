// The RpcServer's limits (base/net/rpc.h) against hostile clients on real loopback sockets: a
// client dribbling a frame (slowloris), an oversized frame, a silent client, floods of
// connections from one address and from many, and a client pipelining more requests than one
// connection may run. Each test checks that a well-behaved client is still served afterwards.
// Floods are bounded loops on loopback addresses only (127.0.0.2.. stand for other hosts).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "base/frame.h"
#include "base/net/rpc.h"
#include "tests/base/net/loop.h"

namespace rt::net {
namespace {

constexpr uint16_t kEcho = 1;
constexpr uint16_t kHold = 2;  // runs until the test releases it

// A blocking POSIX socket for playing a misbehaving client; closed on destruction.
class RawClient {
 public:
  // Connects from `source` (any port) to 127.0.0.1:`port`; reads wait at most 5 s.
  RawClient(uint16_t port, const char* source = "127.0.0.1") {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    timeval timeout{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source, &from.sin_addr);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from), 0) << source;
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0;
    EXPECT_TRUE(connected_) << "connect from " << source << ": " << strerror(errno);
  }
  ~RawClient() { close(fd_); }

  // Sends bytes; false once the server has closed the connection.
  bool Send(std::span<const std::byte> bytes) {
    return send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Waits (≤ 5 s) for the server to close the connection; true when it did.
  bool ClosedByServer() {
    char buffer[256];
    while (true) {
      const ssize_t n = recv(fd_, buffer, sizeof buffer, 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
      if (n < 0) return false;  // timed out with the connection open
    }
  }
  // Sends one echo request and reads the answer: true when it came back, false when the server
  // closed the connection instead.
  bool EchoServed() {
    const Bytes payload = B("raw");
    const auto header = EncodeFrameHeader(kEcho, 0, 7, payload);
    if (!Send(header) || !Send(payload)) return false;
    std::byte answer[kFrameHeaderSize + 3];
    size_t got = 0;
    while (got < sizeof answer) {
      const ssize_t n = recv(fd_, answer + got, sizeof answer - got, 0);
      if (n <= 0) return false;
      got += n;
    }
    return S(std::span(answer + kFrameHeaderSize, 3)) == "raw";
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

// An echo server with `options`, plus a kHold method that waits for `release` (≤ 10 s) and
// records the most holds running at once in `most_held`.
struct TestServer {
  TestServer(Loop& loop, RpcServerOptions options) {
    options.name = "limits test";
    server = RpcServer::Create(loop.io().get_executor(), options);
    server->Handle(kEcho, [](RpcRequest req) -> asio::awaitable<Result<Bytes>> {
      co_return Bytes(req.payload.begin(), req.payload.end());
    });
    server->Handle(kHold, [this](RpcRequest) -> asio::awaitable<Result<Bytes>> {
      const int now = ++held;
      int seen = most_held.load();
      while (now > seen && !most_held.compare_exchange_weak(seen, now)) {
      }
      const Deadline bound = Deadline::AfterMs(10'000);
      while (!release && !bound.Expired()) co_await SleepUntil(Deadline::AfterMs(5));
      --held;
      co_return Bytes{};
    });
    port = *server->Start();
  }
  ~TestServer() { server->Abort(); }
  std::shared_ptr<RpcServer> server;
  uint16_t port = 0;
  std::atomic<int> held{0};
  std::atomic<int> most_held{0};
  std::atomic<bool> release{false};
};

// One echo call from a well-behaved RpcClient (from 127.0.0.1).
Status WellBehavedEcho(Loop& loop, uint16_t port, size_t payload_bytes = 4) {
  return loop.Run<Status>([&]() -> asio::awaitable<Status> {
    CO_ASSIGN_OR_RETURN(auto client,
                        co_await RpcClient::Connect("127.0.0.1", port, Deadline::AfterMs(3000)));
    const Bytes payload(payload_bytes, std::byte{0x5a});
    CO_ASSIGN_OR_RETURN(Frame reply,
                        co_await client->Call(kEcho, payload, Deadline::AfterMs(3000)));
    if (reply.payload != payload) co_return Internal("echo returned other bytes");
    co_return Status();
  });
}

// Repeats WellBehavedEcho until it succeeds (the server frees a closed connection's slot when it
// notices the close), at most 50 times 100 ms.
Status EventuallyServed(Loop& loop, uint16_t port) {
  Status last;
  for (int i = 0; i < 50; ++i) {
    last = WellBehavedEcho(loop, port);
    if (last.ok()) return last;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return last;
}

TEST(RpcLimits, SlowlorisClientIsDroppedAtTheFrameDeadline) {
  Loop loop;
  RpcServerOptions o;
  o.frame_timeout = std::chrono::milliseconds(300);
  TestServer t(loop, o);
  RawClient slow(t.port);
  // A valid frame, sent one byte every 50 ms and never finished: 27 bytes would take 1.35 s.
  const Bytes payload = B("ping");
  const auto header = EncodeFrameHeader(kEcho, 0, 1, payload);
  Bytes frame(header.begin(), header.end());
  frame.insert(frame.end(), payload.begin(), payload.end());
  frame.pop_back();
  bool closed_while_sending = false;
  for (size_t i = 0; i < frame.size(); ++i) {
    if (!slow.Send(std::span(frame).subspan(i, 1))) {
      closed_while_sending = true;
      break;
    }
    if (i == 5) {
      EXPECT_TRUE(WellBehavedEcho(loop, t.port).ok());  // served meanwhile
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(closed_while_sending || slow.ClosedByServer());
  Status after = WellBehavedEcho(loop, t.port);
  EXPECT_TRUE(after.ok()) << after.ToString();
}

TEST(RpcLimits, FramesOfAWellBehavedClientMeetTheFrameDeadline) {
  Loop loop;
  RpcServerOptions o;
  o.frame_timeout = std::chrono::milliseconds(300);
  TestServer t(loop, o);
  // A connection that waits longer than frame_timeout between whole frames is not dropped:
  // the deadline counts from a frame's first byte.
  RawClient patient(t.port);
  EXPECT_TRUE(patient.EchoServed());
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_TRUE(patient.EchoServed());
}

TEST(RpcLimits, OversizedFrameClosesOnlyThatConnection) {
  Loop loop;
  RpcServerOptions o;
  o.max_payload = 1024;
  TestServer t(loop, o);
  RawClient big(t.port);
  const Bytes payload(4096, std::byte{1});
  EXPECT_TRUE(big.Send(EncodeFrameHeader(kEcho, 0, 1, payload)));
  EXPECT_TRUE(big.ClosedByServer());
  Status at_limit = WellBehavedEcho(loop, t.port, 1024);
  EXPECT_TRUE(at_limit.ok()) << at_limit.ToString();
}

TEST(RpcLimits, SilentConnectionIsDroppedAtTheIdleDeadline) {
  Loop loop;
  RpcServerOptions o;
  o.idle_timeout = std::chrono::milliseconds(300);
  TestServer t(loop, o);
  RawClient silent(t.port);
  EXPECT_TRUE(silent.ClosedByServer());
  // A client whose request runs longer than idle_timeout is not idle: it gets its answer.
  Result<Frame> held = loop.Run<Result<Frame>>([&]() -> asio::awaitable<Result<Frame>> {
    CO_ASSIGN_OR_RETURN(auto client,
                        co_await RpcClient::Connect("127.0.0.1", t.port, Deadline::AfterMs(3000)));
    auto release = [&]() -> asio::awaitable<void> {
      co_await SleepUntil(Deadline::AfterMs(900));
      t.release = true;
    };
    asio::co_spawn(co_await asio::this_coro::executor, release(), asio::detached);
    co_return co_await client->Call(kHold, {}, Deadline::AfterMs(5000));
  });
  EXPECT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_TRUE(WellBehavedEcho(loop, t.port).ok());
}

TEST(RpcLimits, FloodFromOneAddressIsCappedPerPeer) {
  Loop loop;
  RpcServerOptions o;
  o.max_connections_per_peer = 4;
  TestServer t(loop, o);
  int served = 0, refused = 0;
  {
    std::vector<std::unique_ptr<RawClient>> flood;
    for (int i = 0; i < 40; ++i) flood.push_back(std::make_unique<RawClient>(t.port, "127.0.0.2"));
    for (auto& c : flood) (c->EchoServed() ? served : refused)++;
    // Another address is not affected by 127.0.0.2's connections.
    Status other = WellBehavedEcho(loop, t.port);
    EXPECT_TRUE(other.ok()) << other.ToString();
  }
  EXPECT_EQ(served, 4);
  EXPECT_EQ(refused, 36);
  // The flood's connections are closed: 127.0.0.2 may connect again.
  bool again = false;
  for (int i = 0; i < 50 && !again; ++i) {
    again = RawClient(t.port, "127.0.0.2").EchoServed();
    if (!again) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(again);
}

TEST(RpcLimits, FloodFromManyAddressesIsCappedInAll) {
  Loop loop;
  RpcServerOptions o;
  o.max_connections = 6;
  TestServer t(loop, o);
  int served = 0, refused = 0;
  {
    std::vector<std::unique_ptr<RawClient>> flood;
    const char* sources[] = {"127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7"};
    for (int i = 0; i < 20; ++i)
      flood.push_back(std::make_unique<RawClient>(t.port, sources[i % 5]));
    for (auto& c : flood) (c->EchoServed() ? served : refused)++;
  }
  EXPECT_EQ(served, 6);
  EXPECT_EQ(refused, 14);
  Status after = EventuallyServed(loop, t.port);
  EXPECT_TRUE(after.ok()) << after.ToString();
}

// Pipelines 12 holds on one connection; returns the most that ran at once once all are answered.
int MostHeldOfTwelve(int max_requests_per_connection) {
  Loop loop;
  RpcServerOptions o;
  o.max_requests_per_connection = max_requests_per_connection;
  TestServer t(loop, o);
  auto client = *loop.Run<Result<std::shared_ptr<RpcClient>>>(
      [&] { return RpcClient::Connect("127.0.0.1", t.port, Deadline::AfterMs(3000)); });
  std::vector<std::future<Result<Frame>>> calls;
  for (int i = 0; i < 12; ++i)
    calls.push_back(loop.Start(client->Call(kHold, {}, Deadline::AfterMs(10'000))));
  // Wait (≤ 5 s) until the server runs as many holds as it will, then let it settle.
  const int expected = std::min(12, max_requests_per_connection);
  for (int i = 0; i < 500 && t.held.load() < expected; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  t.release = true;
  for (auto& call : calls) {
    Result<Frame> r = call.get();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
  }
  EXPECT_TRUE(WellBehavedEcho(loop, t.port).ok());
  return t.most_held.load();
}

TEST(RpcLimits, RequestsInFlightPerConnectionAreBounded) {
  EXPECT_EQ(MostHeldOfTwelve(3), 3);
  EXPECT_EQ(MostHeldOfTwelve(256), 12);  // the reference: without the bound all 12 run at once
}

}  // namespace
}  // namespace rt::net
