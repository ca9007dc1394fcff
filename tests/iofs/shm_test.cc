// The shared-memory data path (iofs/net/shm.h): a client on the server's host maps a region
// shared with ringfsd and its file data never crosses the socket; without the server's socket,
// or for a remote server, everything goes over TCP; a region serves only its own connection and
// only a sealed memfd is accepted.
#include "iofs/net/shm.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include <gtest/gtest.h>

#include "base/bytes.h"
#include "base/net/rpc.h"
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

using testing::ConnectOrDie;
using testing::Content;
using testing::Io;
using testing::TempDir;

Deadline Secs(int s) { return Deadline::After(std::chrono::seconds(s)); }

std::unique_ptr<Server> StartServer(
    const std::string& dir, bool shared_memory,
    ServerOptions::ReadPath read_path = ServerOptions::ReadPath::kPoolDirect) {
  ServerOptions o = EmbeddedServerOptions(dir, 0);
  o.shared_memory = shared_memory;
  o.read_path = read_path;
  auto s = Server::Start(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) std::abort();
  return std::move(*s);
}

TEST(SharedMemory, LocalClientMovesDataThroughTheSharedRegion) {
  TempDir dir("shm-local");
  auto server = StartServer(dir.path() + "/state", true);
  Io io;
  auto client = ConnectOrDie(io, server->port());
  const size_t n = 9 * (1 << 20) + 12345;  // several chunks and a tail
  ASSERT_TRUE(io.Run(client->MapShared(2 * n, Secs(10))).ok());
  ASSERT_EQ(client->shared().size(), 2 * n);
  std::span<std::byte> in = client->shared().first(n), out = client->shared().subspan(n, n);
  const std::vector<std::byte> want = Content(3, 1, n);
  std::memcpy(in.data(), want.data(), n);

  ASSERT_TRUE(io.Run(client->Create("/shm", Secs(10))).ok());
  ASSERT_TRUE(io.Run(client->WriteParallel("/shm", 0, in, 4, Secs(30))).ok());
  EXPECT_GE(client->shared_requests(), 3u);
  // Read back over TCP (a buffer outside the region) and through the region: the same bytes.
  std::vector<std::byte> tcp;
  const uint64_t before = client->shared_requests();
  ASSERT_TRUE(io.Run(client->ReadParallel("/shm", 0, UINT64_MAX, 4, &tcp, Secs(30))).ok());
  EXPECT_EQ(client->shared_requests(), before);
  EXPECT_EQ(tcp, want);
  auto got = io.Run(client->ReadParallelInto("/shm", 0, out, 4, Secs(30)));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, n);
  EXPECT_GT(client->shared_requests(), before);
  EXPECT_EQ(std::memcmp(out.data(), want.data(), n), 0);
  // A partial read at an unaligned offset through the region.
  auto part = io.Run(client->ReadInto("/shm", 70001, out.first(5000), Secs(10)));
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(*part, 5000u);
  EXPECT_EQ(std::memcmp(out.data(), want.data() + 70001, 5000), 0);
  EXPECT_TRUE(server->Shutdown(Secs(10)).ok());
}

// Reads through the region into 4096-aligned memory at 64 KiB-aligned file offsets go straight
// from the disk into the region, on the server's I/O thread (its own io_uring) or on a pool thread
// (one pread), by the read path; the rest through the engine's ring. Every path gives the
// reference bytes: whole chunks, 64 KiB pieces, reads across chunks, a hole, the short last
// chunk, past the end.
class SharedMemoryReadPath : public ::testing::TestWithParam<ServerOptions::ReadPath> {};

TEST_P(SharedMemoryReadPath, ReadsGiveTheReferenceBytes) {
  TempDir dir("shm-read-path");
  const ServerOptions::ReadPath path = GetParam();
  auto server = StartServer(dir.path() + "/state", true, path);
  Io io;
  auto client = ConnectOrDie(io, server->port());
  constexpr size_t kChunk = 4 << 20;
  const size_t n = 3 * kChunk + 100000;  // chunk 1 stays a hole, chunk 3 is short
  ASSERT_TRUE(io.Run(client->MapShared(2 * n + kChunk, Secs(10))).ok());
  std::vector<std::byte> want = Content(5, 1, n);
  std::fill(want.begin() + kChunk, want.begin() + 2 * kChunk, std::byte{0});
  const std::span<std::byte> in = client->shared().first(n);
  std::memcpy(in.data(), want.data(), n);
  ASSERT_TRUE(io.Run(client->Create("/io", Secs(10))).ok());
  ASSERT_TRUE(io.Run(client->Write("/io", 0, in.first(kChunk), Secs(30))).ok());
  ASSERT_TRUE(io.Run(client->Write("/io", 2 * kChunk, in.subspan(2 * kChunk), Secs(30))).ok());
  const std::span<std::byte> out =
      client->shared().subspan(n + 4096 - n % 4096, n);  // 4096-aligned
  auto check = [&](uint64_t offset, size_t length, size_t expect) {
    std::memset(out.data(), 0xEE, length);
    auto got = io.Run(client->ReadInto("/io", offset, out.first(length), Secs(30)));
    ASSERT_TRUE(got.ok()) << offset << ": " << got.status().ToString();
    ASSERT_EQ(*got, expect) << offset;
    EXPECT_EQ(std::memcmp(out.data(), want.data() + offset, expect), 0) << offset << " +" << length;
  };
  auto straight = [&] {
    const ServerStats stats = server->Stats();
    return stats.reads_on_io_thread + stats.reads_direct;
  };
  const uint64_t before = straight();
  check(0, kChunk, kChunk);           // a whole chunk
  check(2 * kChunk, kChunk, kChunk);  // the chunk after the hole
  for (uint64_t off :
       {uint64_t{0}, uint64_t{65536}, uint64_t{kChunk - 65536}, uint64_t{2 * kChunk + 131072}})
    check(off, 65536, 65536);                 // 64 KiB pieces
  check(kChunk - 65536, 131072, 131072);      // across a chunk boundary into the hole
  check(kChunk + 65536, 65536, 65536);        // inside the hole
  check(kChunk / 2, 2 * kChunk, 2 * kChunk);  // three chunks
  const uint64_t served = straight() - before;
  if (path == ServerOptions::ReadPath::kPoolEngine) {
    EXPECT_EQ(served, 0u);
  } else {
    EXPECT_GE(served, 9u) << "the aligned reads did not go straight into the region";
  }
  EXPECT_EQ(server->Stats().reads_on_io_thread > 0, path == ServerOptions::ReadPath::kIoThread);
  check(3 * kChunk, 100000, 100000);                 // the short last chunk (an unaligned length)
  check(3 * kChunk + 65536, 65536, 100000 - 65536);  // clamped at the end of the file
  check(n, 65536, 0);                                // past the end
  check(70001, 5000, 5000);                          // an unaligned offset (the pool)
  EXPECT_TRUE(server->Shutdown(Secs(10)).ok());
}

INSTANTIATE_TEST_SUITE_P(Paths, SharedMemoryReadPath,
                         ::testing::Values(ServerOptions::ReadPath::kPoolDirect,
                                           ServerOptions::ReadPath::kIoThread,
                                           ServerOptions::ReadPath::kPoolEngine),
                         [](const auto& info) {
                           switch (info.param) {
                             case ServerOptions::ReadPath::kPoolDirect:
                               return std::string("PoolDirect");
                             case ServerOptions::ReadPath::kIoThread:
                               return std::string("IoThread");
                             default:
                               return std::string("PoolEngine");
                           }
                         });

TEST(SharedMemory, WithoutTheServersSocketEverythingGoesOverTcp) {
  TempDir dir("shm-off");
  auto server = StartServer(dir.path() + "/state", false);
  Io io;
  auto client = ConnectOrDie(io, server->port());
  Status mapped = io.Run(client->MapShared(1 << 20, Secs(10)));
  EXPECT_EQ(mapped.code(), StatusCode::kUnavailable) << mapped.ToString();
  EXPECT_TRUE(client->shared().empty());
  const std::vector<std::byte> want = Content(4, 1, 5 << 20);
  ASSERT_TRUE(io.Run(client->Create("/tcp", Secs(10))).ok());
  ASSERT_TRUE(io.Run(client->WriteParallel("/tcp", 0, want, 4, Secs(30))).ok());
  std::vector<std::byte> back;
  ASSERT_TRUE(io.Run(client->ReadParallel("/tcp", 0, UINT64_MAX, 4, &back, Secs(30))).ok());
  EXPECT_EQ(back, want);
  EXPECT_EQ(client->shared_requests(), 0u);
  EXPECT_TRUE(server->Shutdown(Secs(10)).ok());
}

TEST(SharedMemory, OnlyLoopbackServersAreOnThisHost) {
  for (const char* h : {"127.0.0.1", "127.3.2.1", "localhost", "::1"})
    EXPECT_TRUE(shm::IsLoopbackHost(h)) << h;
  for (const char* h : {"10.0.0.1", "192.168.1.7", "example.com", "", "128.0.0.1"})
    EXPECT_FALSE(shm::IsLoopbackHost(h)) << h;
}

TEST(SharedMemory, ARegionServesOnlyItsConnectionAndOnlyInsideItself) {
  TempDir dir("shm-peer");
  auto server = StartServer(dir.path() + "/state", true);
  Io io;
  auto client = ConnectOrDie(io, server->port());
  ASSERT_TRUE(io.Run(client->MapShared(1 << 20, Secs(10))).ok());
  ASSERT_TRUE(io.Run(client->Create("/p", Secs(10))).ok());
  // Region 1 (the only one) used from another connection, and past its end from any.
  auto raw = [&](uint64_t at, uint64_t length) {
    ByteWriter w;
    w.PutString("/p");
    w.Put<uint64_t>(0);
    w.Put<uint32_t>(1);
    w.Put<uint64_t>(at);
    w.Put<uint64_t>(length);
    return io.Run(
        [](uint16_t port, std::vector<std::byte> payload) -> boost::asio::awaitable<Status> {
          auto rpc = co_await net::RpcClient::Connect("127.0.0.1", port, Secs(5));
          if (!rpc.ok()) co_return rpc.status();
          auto reply = co_await (*rpc)->Call(wire::kFsWriteShm, payload, Secs(10));
          (*rpc)->Close();
          co_return reply.status();
        }(server->port(), w.Take()));
  };
  EXPECT_EQ(raw(0, 4096).code(), StatusCode::kNotFound);
  // The owning connection's own requests work (here: a read of an empty file).
  auto own = io.Run(client->ReadInto("/p", 0, client->shared().first(10), Secs(10)));
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_EQ(*own, 0u);
  // Ranges are checked against the region, overflow included.
  void* base = mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(base, MAP_FAILED);
  shm::Region region(static_cast<std::byte*>(base), 8192);
  EXPECT_TRUE(region.Slice(0, 8192).ok());
  EXPECT_TRUE(region.Slice(8192, 0).ok());
  EXPECT_EQ(region.Slice(8000, 200).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(region.Slice(UINT64_MAX, 2).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(region.Slice(2, UINT64_MAX).status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(server->Shutdown(Secs(10)).ok());
}

TEST(SharedMemory, AnUnsealedMemfdIsRefused) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  const int mfd = memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(mfd, 0);
  ASSERT_EQ(ftruncate(mfd, 1 << 20), 0);
  ASSERT_TRUE(shm::SendWithFd(pair[0], shm::RegistrationMessage(1 << 20, "127.0.0.1:1"), mfd).ok());
  std::string peer;
  auto region = shm::ReceiveRegion(pair[1], &peer);
  EXPECT_EQ(region.status().code(), StatusCode::kInvalidArgument) << region.status().ToString();
  EXPECT_NE(region.status().message().find("sealed"), std::string_view::npos);
  close(mfd);
  close(pair[0]);
  close(pair[1]);
}

}  // namespace
}  // namespace rt::iofs
