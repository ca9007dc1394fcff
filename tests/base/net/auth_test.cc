// The cluster-secret handshake (base/net/auth.h) on real loopback sockets, alone and inside the
// RPC server and client: right secret, wrong secret, no secret on either side, a replayed
// handshake, a silent client, and the secret file's checks.
#include "base/net/auth.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include <gtest/gtest.h>

#include "base/net/rpc.h"
#include "tests/base/net/loop.h"

namespace rt::net {
namespace {

constexpr uint16_t kEcho = 1;

std::shared_ptr<const ClusterSecret> Secret(std::string key) {
  return ClusterSecret::FromKey(std::move(key));
}

const auto kGood = Secret("0123456789abcdef0123456789abcdef");
const auto kOther = Secret("fedcba9876543210fedcba9876543210");

std::shared_ptr<RpcServer> EchoServer(
    Loop& loop, std::shared_ptr<const ClusterSecret> secret,
    std::chrono::milliseconds auth_timeout = std::chrono::seconds(5)) {
  RpcServerOptions o;
  o.name = "echo";
  o.secret = std::move(secret);
  o.auth_timeout = auth_timeout;
  auto server = RpcServer::Create(loop.io().get_executor(), o);
  server->Handle(kEcho, [](RpcRequest req) -> asio::awaitable<Result<Bytes>> {
    co_return Bytes(req.payload.begin(), req.payload.end());
  });
  return server;
}

// Connects with `secret` and makes one echo call of `payload`.
Result<std::string> Echo(Loop& loop, uint16_t port, std::shared_ptr<const ClusterSecret> secret,
                         const std::string& payload = "ping") {
  return loop.Run<Result<std::string>>([&]() -> asio::awaitable<Result<std::string>> {
    RpcClientOptions o;
    o.secret = secret;
    CO_ASSIGN_OR_RETURN(auto client,
                        co_await RpcClient::Connect("127.0.0.1", port, Deadline::AfterMs(3000), o));
    CO_ASSIGN_OR_RETURN(Frame reply,
                        co_await client->Call(kEcho, Keep(B(payload)), Deadline::AfterMs(3000)));
    co_return S(reply.payload);
  });
}

TEST(Auth, RightSecretServesCalls) {
  Loop loop;
  auto server = EchoServer(loop, kGood);
  const uint16_t port = *server->Start();
  Result<std::string> r = Echo(loop, port, kGood);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "ping");
  server->Abort();
}

TEST(Auth, WrongSecretIsRefusedOnBothSides) {
  Loop loop;
  auto server = EchoServer(loop, kGood);
  const uint16_t port = *server->Start();
  Result<std::string> r = Echo(loop, port, kOther);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated) << r.status().ToString();
  EXPECT_NE(r.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << r.status().ToString();
  server->Abort();
}

TEST(Auth, ClientWithoutSecretGetsAnAuthenticationError) {
  Loop loop;
  auto server = EchoServer(loop, kGood);
  const uint16_t port = *server->Start();
  Result<std::string> r = Echo(loop, port, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated) << r.status().ToString();
  EXPECT_NE(r.status().message().find("requires the cluster secret"), std::string::npos)
      << r.status().ToString();
  server->Abort();
}

// The refused first frame is read whole before the refusal: closing on its unread bytes would
// reset the connection, and the client could lose the error.
TEST(Auth, ClientWithoutSecretGetsTheErrorAfterALargeFirstFrame) {
  Loop loop;
  auto server = EchoServer(loop, kGood);
  const uint16_t port = *server->Start();
  for (int i = 0; i < 5; ++i) {
    Result<std::string> r = Echo(loop, port, nullptr, std::string(512 << 10, 'x'));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated) << r.status().ToString();
    EXPECT_NE(r.status().message().find("requires the cluster secret"), std::string::npos)
        << r.status().ToString();
  }
  server->Abort();
}

TEST(Auth, ServerWithoutSecretIsNamedByTheClient) {
  Loop loop;
  auto server = EchoServer(loop, nullptr);
  const uint16_t port = *server->Start();
  Result<std::string> r = Echo(loop, port, kGood);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated) << r.status().ToString();
  EXPECT_NE(r.status().message().find("no cluster secret"), std::string::npos)
      << r.status().ToString();
  EXPECT_TRUE(Echo(loop, port, nullptr).ok());  // both without: loopback service as before
  server->Abort();
}

// Records what a real client sends during a successful handshake, then replays those bytes on
// a new connection: the server chose a new nonce, so the replayed proof must fail.
TEST(Auth, ReplayedHandshakeFails) {
  Loop loop;
  const auto result = loop.Run<Status>([&]() -> asio::awaitable<Status> {
    auto executor = co_await asio::this_coro::executor;
    tcp::acceptor acceptor(executor, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    const uint16_t port = acceptor.local_endpoint().port();
    // A relay that records the client's frames on their way to a real server.
    auto server = EchoServer(loop, kGood);
    const uint16_t server_port = *server->Start();
    std::vector<Frame> recorded;
    auto relay = [&]() -> asio::awaitable<Status> {
      tcp::socket from = co_await acceptor.async_accept(asio::use_awaitable);
      CO_ASSIGN_OR_RETURN(tcp::socket to,
                          co_await Connect("127.0.0.1", server_port, Deadline::AfterMs(2000)));
      for (int i = 0; i < 2; ++i) {  // hello → challenge, proof → accepted
        CO_ASSIGN_OR_RETURN(Frame f, co_await ReadFrame(from, 4096, Deadline::AfterMs(2000), "c"));
        recorded.push_back(f);
        CO_RETURN_IF_ERROR(co_await WriteFrame(to, f.header.type, f.header.flags,
                                               f.header.request_id, f.payload,
                                               Deadline::AfterMs(2000), "s"));
        CO_ASSIGN_OR_RETURN(Frame g, co_await ReadFrame(to, 4096, Deadline::AfterMs(2000), "s"));
        CO_RETURN_IF_ERROR(co_await WriteFrame(from, g.header.type, g.header.flags,
                                               g.header.request_id, g.payload,
                                               Deadline::AfterMs(2000), "c"));
      }
      co_return Status();
    };
    std::optional<Status> relayed;
    asio::co_spawn(executor, relay(), [&](std::exception_ptr, Status s) { relayed = s; });
    CO_ASSIGN_OR_RETURN(tcp::socket client,
                        co_await Connect("127.0.0.1", port, Deadline::AfterMs(2000)));
    CO_RETURN_IF_ERROR(
        co_await AuthenticateClient(client, kGood.get(), Deadline::AfterMs(2000), "relay"));
    for (int i = 0; i < 200 && !relayed; ++i) co_await SleepUntil(Deadline::AfterMs(10));
    EXPECT_TRUE(relayed.has_value());
    if (relayed) CO_RETURN_IF_ERROR(*relayed);
    EXPECT_EQ(recorded.size(), 2u);
    // The replay: the recorded hello, then the recorded proof, to a fresh connection.
    CO_ASSIGN_OR_RETURN(tcp::socket replay,
                        co_await Connect("127.0.0.1", server_port, Deadline::AfterMs(2000)));
    for (const Frame& f : recorded) {
      CO_RETURN_IF_ERROR(co_await WriteFrame(replay, f.header.type, f.header.flags,
                                             f.header.request_id, f.payload,
                                             Deadline::AfterMs(2000), "server"));
      CO_ASSIGN_OR_RETURN(Frame answer,
                          co_await ReadFrame(replay, 4096, Deadline::AfterMs(2000), "server"));
      if (f.header.type == kAuthProof) {
        EXPECT_TRUE(answer.header.flags & kRpcError) << "a replayed proof was accepted";
        EXPECT_EQ(DecodeRpcError(answer.payload, "server").code(), StatusCode::kUnauthenticated);
      }
    }
    server->Abort();
    co_return Status();
  });
  EXPECT_TRUE(result.ok()) << result.ToString();
}

TEST(Auth, SilentClientIsDroppedAtTheDeadline) {
  Loop loop;
  auto server = EchoServer(loop, kGood, std::chrono::milliseconds(200));
  const uint16_t port = *server->Start();
  const auto result = loop.Run<Status>([&]() -> asio::awaitable<Status> {
    CO_ASSIGN_OR_RETURN(tcp::socket s,
                        co_await Connect("127.0.0.1", port, Deadline::AfterMs(2000)));
    const double start = MonoSeconds();
    Result<Frame> f = co_await ReadFrame(s, 4096, Deadline::AfterMs(3000), "server");
    EXPECT_EQ(f.status().code(), StatusCode::kUnavailable) << f.status().ToString();
    EXPECT_LT(MonoSeconds() - start, 2.0);
    co_return Status();
  });
  EXPECT_TRUE(result.ok()) << result.ToString();
  server->Abort();
}

TEST(Auth, NoSecretMeansLoopbackOnly) {
  Loop loop;
  RpcServerOptions o;
  o.bind_address = "0.0.0.0";
  auto server = RpcServer::Create(loop.io().get_executor(), o);
  Result<uint16_t> port = server->Start();
  ASSERT_FALSE(port.ok());
  EXPECT_EQ(port.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(port.status().message().find("without a cluster secret"), std::string::npos);
  o.secret = kGood;
  auto with_secret = RpcServer::Create(loop.io().get_executor(), o);
  EXPECT_TRUE(with_secret->Start().ok());
  with_secret->Abort();
}

TEST(ClusterSecret, FileChecks) {
  const std::string dir = ::testing::TempDir() + "/auth_secret";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/secret";
  EXPECT_EQ(ClusterSecret::Load(path).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(ClusterSecret::Create(path).ok());
  EXPECT_EQ(ClusterSecret::Create(path).code(), StatusCode::kAlreadyExists);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Result<std::shared_ptr<const ClusterSecret>> loaded = ClusterSecret::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  chmod(path.c_str(), 0644);
  Result<std::shared_ptr<const ClusterSecret>> open = ClusterSecret::Load(path);
  EXPECT_EQ(open.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(open.status().message().find("chmod 600"), std::string::npos);
  const std::string short_path = dir + "/short";
  std::ofstream(short_path) << "tooshort\n";
  chmod(short_path.c_str(), 0600);
  EXPECT_EQ(ClusterSecret::Load(short_path).status().code(), StatusCode::kInvalidArgument);
  // Two secrets created apart differ; the same key gives the same MAC, another key another.
  ASSERT_TRUE(ClusterSecret::Create(dir + "/second").ok());
  auto second = ClusterSecret::Load(dir + "/second");
  ASSERT_TRUE(second.ok());
  const std::byte a[] = {std::byte{1}}, b[] = {std::byte{2}};
  EXPECT_EQ((*loaded)->Mac("x", a, b), (*loaded)->Mac("x", a, b));
  EXPECT_NE((*loaded)->Mac("x", a, b), (*second)->Mac("x", a, b));
  EXPECT_NE((*loaded)->Mac("x", a, b), (*loaded)->Mac("y", a, b));
}

}  // namespace
}  // namespace rt::net
