// End-to-end integrity of the bulk data path: write and read payloads travel in frames without a
// frame CRC, covered instead by a CRC32C of the data that the receiver checks. A payload corrupted
// between client and server is detected in both directions, and nothing corrupt is stored.
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "base/bytes.h"
#include "base/crc32c.h"
#include "base/net/rpc.h"
#include "iofs/chain/codec.h"
#include "iofs/client.h"
#include "iofs/net/wire.h"
#include "iofs/server.h"
#include "tests/iofs/io_util.h"
#include "tests/iofs/process_util.h"

// GCC 12 false positives inside std::vector::resize inlined into ByteWriter::Put.
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"

namespace rt::iofs {
namespace {

namespace asio = boost::asio;
using testing::ConnectOrDie;
using testing::Content;
using testing::Io;
using testing::RawCall;
using testing::TempDir;

Deadline Secs(int s) { return Deadline::After(std::chrono::seconds(s)); }

TEST(WireIntegrity, WriteWhosePayloadDoesNotMatchItsCrcIsRefusedAndNotStored) {
  TempDir dir("wire-write");
  auto server = Server::Start(EmbeddedServerOptions(dir.path() + "/state", 0));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Io io;
  auto client = ConnectOrDie(io, (*server)->port());
  const std::vector<std::byte> good = Content(1, 1, 300000);
  ASSERT_TRUE(io.Run(client->Create("/f", Secs(10))).ok());
  ASSERT_TRUE(io.Run(client->Write("/f", 0, good, Secs(10))).ok());

  // The same request as Client::Write, but one byte of the data changes after its CRC was taken
  // (what a fault on the wire would do), in a frame without a payload CRC.
  std::vector<std::byte> bad = Content(1, 2, 300000);
  ByteWriter w;
  w.PutString("/f");
  w.Put<uint64_t>(0);
  w.Put<uint32_t>(Crc32c(bad.data(), bad.size()));
  bad[123456] ^= std::byte{0x10};
  const std::vector<std::byte> head = w.Take();
  Status refused = io.Run([](uint16_t port, std::vector<std::byte> head,
                             std::vector<std::byte> bad) -> asio::awaitable<Status> {
    auto rpc = co_await net::RpcClient::Connect("127.0.0.1", port, Secs(5));
    if (!rpc.ok()) co_return rpc.status();
    const std::span<const std::byte> pieces[] = {head, bad};
    auto reply = co_await (*rpc)->Call(wire::kFsWrite, net::Pieces(pieces),
                                       net::kFrameUncheckedPayload, Secs(10));
    (*rpc)->Close();
    co_return reply.status();
  }((*server)->port(), head, bad));
  EXPECT_EQ(refused.code(), StatusCode::kChecksumMismatch) << refused.ToString();
  EXPECT_NE(refused.message().find("corrupted in transit"), std::string_view::npos)
      << refused.ToString();

  // The file still holds the good bytes, read back through the zero-copy path.
  std::vector<std::byte> back;
  ASSERT_TRUE(io.Run(client->ReadParallel("/f", 0, UINT64_MAX, 4, &back, Secs(10))).ok());
  EXPECT_EQ(back, good);
  std::vector<std::byte> part(1000);
  auto n = io.Run(client->ReadInto("/f", 70000, part, Secs(10)));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ(*n, part.size());
  EXPECT_TRUE(std::equal(part.begin(), part.end(), good.begin() + 70000));
  EXPECT_TRUE((*server)->Shutdown(Secs(10)).ok());
}

// A stand-in for ringfsd whose read replies are corrupted after their CRC was taken.
std::shared_ptr<net::RpcServer> CorruptingServer(Io& io, const std::vector<std::byte>& data) {
  auto server = net::RpcServer::Create(io.io().get_executor(), {.name = "corrupting"});
  server->Handle(wire::kInfo,
                 [](net::RpcRequest) -> asio::awaitable<Result<std::vector<std::byte>>> {
                   wire::ClusterInfo info;
                   info.self = info.meta_node = 1;
                   info.replication = 1;
                   info.chains = 1;
                   info.chunk_size = 1 << 20;
                   co_return wire::EncodeInfo(info);
                 });
  server->Handle(wire::kFsStat,
                 [&data](net::RpcRequest) -> asio::awaitable<Result<std::vector<std::byte>>> {
                   ByteWriter w;
                   wire::PutStat(w, FileStat{"/f", 2, false, data.size(), true, 1 << 20, 0});
                   co_return w.Take();
                 });
  server->HandleBulk(
      wire::kFsRead, [&data](net::RpcRequest req) -> asio::awaitable<Result<net::RpcBulkReply>> {
        ByteReader r(req.payload, "read");
        (void)r.GetString(wire::kMaxPath);
        const uint64_t offset = r.Get<uint64_t>().value();
        const uint64_t length = std::min<uint64_t>(r.Get<uint64_t>().value(), data.size() - offset);
        net::RpcBulkReply reply;
        reply.body.assign(data.begin() + offset, data.begin() + offset + length);
        ByteWriter w;
        w.Put<uint32_t>(Crc32c(reply.body.data(), reply.body.size()));
        reply.head = w.Take();
        reply.body[length / 2] ^= std::byte{1};
        co_return reply;
      });
  return server;
}

TEST(WireIntegrity, ReadCorruptedOnTheWayIsDetectedByTheClient) {
  Io io;
  const std::vector<std::byte> data = Content(2, 1, 3 << 20);
  auto server = CorruptingServer(io, data);
  auto port = server->Start();
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  auto client = ConnectOrDie(io, *port);
  std::vector<std::byte> part(65536);
  auto n = io.Run(client->ReadInto("/f", 65536, part, Secs(10)));
  EXPECT_EQ(n.status().code(), StatusCode::kChecksumMismatch) << n.status().ToString();
  std::vector<std::byte> all;
  Status s = io.Run(client->ReadParallel("/f", 0, UINT64_MAX, 2, &all, Secs(10)));
  EXPECT_EQ(s.code(), StatusCode::kChecksumMismatch) << s.ToString();
  auto small = io.Run(client->Read("/f", 10, 100, Secs(10)));
  EXPECT_EQ(small.status().code(), StatusCode::kChecksumMismatch) << small.status().ToString();
  server->Abort();
}

// A chunk write between nodes is checked against its CRC32C as the head copies it: a payload
// changed after its CRC was taken is refused and nothing is stored, and a staged forward (one
// that names bytes the receiver should hold) is refused where they are not held.
TEST(WireIntegrity, ChunkWriteCorruptedOnTheWayIsRefusedAndAStagedForwardNeedsItsBytes) {
  TempDir dir("wire-chunk");
  auto server = Server::Start(EmbeddedServerOptions(dir.path() + "/state", 0));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint16_t port = (*server)->port();
  Io io;
  std::vector<std::byte> data = Content(4, 1, 1 << 20);
  for (const bool staged_at_sender : {false, true}) {
    ByteWriter w;
    w.Put<uint64_t>(42);
    w.Put<uint64_t>(0);  // chain version: unchecked
    w.Put<uint8_t>(staged_at_sender ? 2 : 0);
    w.Put<uint32_t>(Crc32c(data.data(), data.size()));
    if (staged_at_sender) {
      w.Put<uint32_t>(7);  // the sender's node id and staged copy
      w.Put<uint64_t>(1);
    }
    std::vector<std::byte> bad = data;
    bad[654321] ^= std::byte{0x02};
    w.PutBytes(bad.data(), bad.size());
    auto refused = RawCall(io, port, wire::kChunkWrite, w.Take());
    EXPECT_EQ(refused.status().code(), StatusCode::kChecksumMismatch)
        << refused.status().ToString();
    EXPECT_NE(refused.status().message().find("corrupted in transit"), std::string_view::npos)
        << refused.status().ToString();
  }
  ByteWriter read;
  read.Put<uint64_t>(42);
  read.Put<uint64_t>(0);
  read.Put<uint64_t>(data.size());
  EXPECT_EQ(RawCall(io, port, wire::kChunkRead, read.Take()).status().code(),
            StatusCode::kNotFound);

  chain::Message forward;
  forward.kind = chain::Message::Kind::kForward;
  forward.chain = chain::ChainOf(42, 8);
  forward.chain_version = 1;
  forward.from = 2;
  forward.to = 1;
  forward.key = 42;
  forward.version = 1;
  forward.value.data =
      std::make_shared<const std::string>(reinterpret_cast<const char*>(data.data()), data.size());
  auto missing = RawCall(io, port, wire::kChainMessage, chain::EncodeStagedMessage(forward));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
  EXPECT_TRUE((*server)->Shutdown(Secs(10)).ok());
}

}  // namespace
}  // namespace rt::iofs
