// Authentication of the training links (CommOptions::secret, TcpStoreServerOptions::secret): a
// process without the secret that connects to the TCP store or to a rank's mesh port gets an
// authentication error, and the store and the communicator work on unaffected.
#include "base/net/auth.h"

#include <sstream>

#include <gtest/gtest.h>

#include "base/net/frame_io.h"
#include "base/net/rpc.h"
#include "comm/communicator.h"
#include "comm/store.h"
#include "tests/base/net/loop.h"

namespace rt::comm {
namespace {

const auto kSecret = net::ClusterSecret::FromKey("0123456789abcdef0123456789abcdef");
const auto kOther = net::ClusterSecret::FromKey("fedcba9876543210fedcba9876543210");

TEST(StoreAuth, ClientsWithoutTheSecretGetAnAuthenticationError) {
  TcpStoreServerOptions so;
  so.secret = kSecret;
  auto server = TcpStoreServer::Start(so).value();
  TcpStoreClientOptions good;
  good.secret = kSecret;
  auto store = ConnectTcpStore("127.0.0.1", server->port(), Deadline::AfterMs(3000), good).value();
  ASSERT_TRUE(store->Set("k", ToBytes("v"), Deadline::AfterMs(3000)).ok());

  // No secret: the connection opens, its first request is answered with the error.
  auto bare = ConnectTcpStore("127.0.0.1", server->port(), Deadline::AfterMs(3000));
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  Status set = (*bare)->Set("k", ToBytes("intruder"), Deadline::AfterMs(3000));
  EXPECT_EQ(set.code(), StatusCode::kUnauthenticated) << set.ToString();
  // The wrong secret: the connect itself fails.
  TcpStoreClientOptions wrong;
  wrong.secret = kOther;
  auto bad = ConnectTcpStore("127.0.0.1", server->port(), Deadline::AfterMs(3000), wrong);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnauthenticated) << bad.status().ToString();

  // The store is unaffected: same value, served to the client that holds the secret.
  EXPECT_EQ(ToString(store->Get("k", Deadline::AfterMs(3000)).value()), "v");
  EXPECT_EQ(server->size(), 1u);
}

// Where rank 0 of the two-rank communicator built by TwoRanks listens.
std::pair<std::string, uint16_t> MeshAddressOfRankZero(Store& store, const CommOptions& o) {
  const std::string key = StoreScope(o.job, o.generation) + "comm/" + o.name + "/addr/0";
  auto v = store.Get(key, Deadline::AfterMs(10'000));
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  if (!v.ok()) return {"", 0};
  std::istringstream in(ToString(*v));
  std::string host, port;
  std::getline(in, host);
  std::getline(in, port);
  return {host, static_cast<uint16_t>(std::stoi(port))};
}

TEST(MeshAuth, PeersWithoutTheSecretAreRefusedAndTheRanksStillConnect) {
  auto store = NewMemoryStore();
  CommOptions o;
  o.store = store;
  o.size = 2;
  o.secret = kSecret;
  o.transport = Transport::kTcp;  // control and data connections, all over TCP
  o.bootstrap_timeout = std::chrono::milliseconds(30'000);
  o.rank = 0;
  // Rank 0 reads every address before it accepts connections: publish a stand-in for rank 1's
  // (under kTcp rank 0 uses it for nothing else), so that it accepts while the intruders try;
  // the real rank 1 replaces it later.
  ASSERT_TRUE(store
                  ->Set(StoreScope(o.job, o.generation) + "comm/" + o.name + "/addr/1",
                        ToBytes("127.0.0.1\n1\nelsewhere\n"), Deadline::AfterMs(1000))
                  .ok());
  auto rank0 = NewCpuCommunicator(o).value();
  const auto [host, port] = MeshAddressOfRankZero(*store, o);
  ASSERT_NE(port, 0);

  net::Loop loop;
  // A silent connection held open through the whole bootstrap delays nobody.
  auto silent = loop.Run<Result<net::tcp::socket>>(
      [&] { return net::Connect(host, port, Deadline::AfterMs(3000)); });
  ASSERT_TRUE(silent.ok()) << silent.status().ToString();
  // No secret: a frame (here a hello-like one) is answered with the authentication error.
  Status bare = loop.Run<Status>([&]() -> net::asio::awaitable<Status> {
    CO_ASSIGN_OR_RETURN(auto s, co_await net::Connect(host, port, Deadline::AfterMs(3000)));
    const std::vector<std::byte> hello(13, std::byte{0});
    CO_RETURN_IF_ERROR(co_await net::WriteFrame(s, 1, 0, 0, hello, Deadline::AfterMs(3000), "r0"));
    CO_ASSIGN_OR_RETURN(Frame f, co_await net::ReadFrame(s, 4096, Deadline::AfterMs(3000), "r0"));
    if (!(f.header.flags & net::kRpcError)) co_return Internal("no error frame");
    co_return net::DecodeRpcError(f.payload, "rank 0");
  });
  EXPECT_EQ(bare.code(), StatusCode::kUnauthenticated) << bare.ToString();
  // The wrong secret: the handshake fails on both sides.
  Status wrong = loop.Run<Status>([&]() -> net::asio::awaitable<Status> {
    CO_ASSIGN_OR_RETURN(auto s, co_await net::Connect(host, port, Deadline::AfterMs(3000)));
    co_return co_await net::AuthenticateClient(s, kOther.get(), Deadline::AfterMs(3000), "r0");
  });
  EXPECT_EQ(wrong.code(), StatusCode::kUnauthenticated) << wrong.ToString();

  // The real rank 1 joins; the pair forms and all-reduces correctly.
  o.rank = 1;
  auto rank1 = NewCpuCommunicator(o).value();
  std::vector<Status> ready(2);
  std::thread t([&] { ready[1] = rank1->WaitReady(Deadline::AfterMs(30'000)); });
  ready[0] = rank0->WaitReady(Deadline::AfterMs(30'000));
  t.join();
  ASSERT_TRUE(ready[0].ok()) << ready[0].ToString();
  ASSERT_TRUE(ready[1].ok()) << ready[1].ToString();
  std::vector<float> a{1, 2, 3}, b{10, 20, 30};
  auto wa = rank0->AllReduce(a.data(), a.data(), 3, DType::kF32, ReduceOp::kSum);
  auto wb = rank1->AllReduce(b.data(), b.data(), 3, DType::kF32, ReduceOp::kSum);
  ASSERT_TRUE(wa->Wait(Deadline::AfterMs(10'000)).ok());
  ASSERT_TRUE(wb->Wait(Deadline::AfterMs(10'000)).ok());
  EXPECT_EQ(a, (std::vector<float>{11, 22, 33}));
  EXPECT_EQ(b, a);
}

TEST(MeshAuth, ARankWithTheWrongSecretFailsWithAnAuthenticationError) {
  auto store = NewMemoryStore();
  CommOptions o;
  o.store = store;
  o.size = 2;
  o.bootstrap_timeout = std::chrono::milliseconds(3'000);
  o.rank = 0;
  o.secret = kSecret;
  auto rank0 = NewCpuCommunicator(o).value();
  o.rank = 1;
  o.secret = kOther;
  auto rank1 = NewCpuCommunicator(o).value();
  Status s1 = rank1->WaitReady(Deadline::AfterMs(10'000));
  EXPECT_EQ(s1.code(), StatusCode::kUnauthenticated) << s1.ToString();
  EXPECT_FALSE(rank0->WaitReady(Deadline::AfterMs(10'000)).ok());
}

}  // namespace
}  // namespace rt::comm
