// ringfsd and ringfs as real processes: the embedded default driven through the CLI, a 3-node
// RF=3 cluster that loses a replica (kill -9, and a crash at the fault point in the middle of a
// chain forward) during a write stream and resyncs it, and a corrupt replica served from another.
#include <cstdlib>
#include <fstream>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "base/bytes.h"
#include "base/crc32c.h"
#include "base/fault.h"
#include "base/net/rpc.h"
#include "iofs/client.h"
#include "iofs/net/wire.h"
#include "tests/iofs/io_util.h"
#include "tests/iofs/process_util.h"
#include "tests/iofs/ringfsd_cluster.h"

namespace rt::iofs {
namespace {

using testing::Content;
using testing::FreePort;
using testing::Io;
using testing::Process;
using testing::RawCall;
using testing::TempDir;

Deadline Secs(int s) { return Deadline::After(std::chrono::seconds(s)); }

using Cluster = testing::RingfsdCluster;
using testing::GetFile;
using testing::PutFile;
using testing::WaitConverged;

void WriteStreamWithFailure(const std::string& faults_on_2, bool kill_3) {
  TempDir dir(kill_3 ? "srv-kill" : "srv-fault");
  Cluster cluster(dir.path(), 3, 3);
  ASSERT_TRUE(cluster.Start(1));
  ASSERT_TRUE(cluster.Start(2, faults_on_2));
  ASSERT_TRUE(cluster.Start(3));
  Io io;
  auto client =
      io.Run(Client::Connect("127.0.0.1", cluster.port(2), Secs(10)));  // any node will do
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  constexpr int kFiles = 24;
  for (int i = 0; i < kFiles; ++i) {
    if (kill_3 && i == 6) cluster.proc(3).Kill();  // a replica dies mid-stream
    if (i == 16) {
      if (kill_3) {
        ASSERT_TRUE(cluster.Start(3));  // and comes back while the stream goes on
      } else {
        const int status = cluster.proc(2).WaitExit(std::chrono::seconds(10));
        ASSERT_TRUE(status != -1 && WIFSIGNALED(status)) << "the fault point never fired";
        ASSERT_TRUE(cluster.Start(2));  // restarted without the fault
      }
    }
    Status s =
        PutFile(io, **client, "/stream/f" + std::to_string(i), Content(i, 1, 300000 + 1000 * i));
    ASSERT_TRUE(s.ok()) << "file " << i << ": " << s.ToString() << "\n" << cluster.Logs();
  }
  const int returning = kill_3 ? 3 : 2;
  ASSERT_TRUE(WaitConverged(io, cluster, returning, 60))
      << "node " << returning << " did not resync\n"
      << cluster.Logs();
  for (int i = 0; i < kFiles; ++i) {
    auto got = GetFile(io, **client, "/stream/f" + std::to_string(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, Content(i, 1, 300000 + 1000 * i)) << i;
  }
  auto report = io.Run((*client)->Fsck(false, Secs(60)));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->problems.empty()) << report->problems[0];
  EXPECT_EQ(report->orphan_chunks, 0u);
  EXPECT_EQ(report->files, static_cast<uint64_t>(kFiles));
}

TEST(ServerTest, ThreeNodeRf3StreamSurvivesAReplicaKilledAndResyncsIt) {
  WriteStreamWithFailure("", true);
}

TEST(ServerTest, CrashInTheMiddleOfAChainForwardLosesNothing) {
  if (!fault::Enabled()) GTEST_SKIP() << "built without RINGTRAIN_FAULT_INJECTION";
  WriteStreamWithFailure("iofs.chain.before_forward=crash@5", false);
}

// A chain head that stops answering (SIGSTOP: its connections stay open, calls to it just wait)
// holds the writes sent to it only until the metadata node takes it out of its chains (10 missed
// 100 ms pings here): then their calls are failed and the writes go to the new head, instead of
// each waiting out its 10 s try (ChainStoreOptions::write_try_ms) — in a partition, the metadata
// node's namespace writes, and with them every file operation, waited that long.
TEST(ServerTest, WritesWaitingOnAStoppedHeadGoOnWhenItLeavesItsChains) {
  TempDir dir("srv-stopped-head");
  Cluster cluster(dir.path(), 3, 3);
  for (int n = 1; n <= 3; ++n) ASSERT_TRUE(cluster.Start(n));
  Io io;
  auto client = io.Run(Client::Connect("127.0.0.1", cluster.port(1), Secs(10)));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ASSERT_TRUE(PutFile(io, **client, "/before", Content(1, 1, 100000)).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.proc(2).Signal(SIGSTOP));
  // 12 chunks of 256 KiB over 3 chains (and the namespace object): node 2 heads one of them.
  const std::vector<std::byte> data = Content(2, 1, 12 * 262144);
  const MonoTime start = MonoClock::now();
  const Status put = PutFile(io, **client, "/during", data);
  const double seconds = std::chrono::duration<double>(MonoClock::now() - start).count();
  ASSERT_TRUE(cluster.proc(2).Signal(SIGCONT));
  ASSERT_TRUE(put.ok()) << put.ToString() << "\n" << cluster.Logs();
  EXPECT_LT(seconds, 6.0) << cluster.Logs();
  auto got = GetFile(io, **client, "/during");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data);
  ASSERT_TRUE(WaitConverged(io, cluster, 2, 60)) << "node 2 did not resync\n" << cluster.Logs();
}

void FlipBitsInDataFiles(const std::string& node_dir) {
  for (const auto& e : std::filesystem::directory_iterator(node_dir + "/engine/data")) {
    int fd = open(e.path().c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    for (off_t at = 1000; at < (32 << 20); at += 65536) {
      unsigned char b = 0;
      if (pread(fd, &b, 1, at) != 1) break;
      b ^= 0x40;
      ASSERT_EQ(pwrite(fd, &b, 1, at), 1);
    }
    fsync(fd);
    close(fd);
  }
}

TEST(ServerTest, CorruptReplicaIsServedFromAnotherAndFsckReportsIt) {
  TempDir dir("srv-corrupt");
  Cluster cluster(dir.path(), 2, 2);
  ASSERT_TRUE(cluster.Start(1));
  ASSERT_TRUE(cluster.Start(2));
  Io io;
  auto client = io.Run(Client::Connect("127.0.0.1", cluster.port(1), Secs(10)));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto data = Content(3, 3, 1000000);
  Status put = PutFile(io, **client, "/c/file", data);
  ASSERT_TRUE(put.ok()) << put.ToString() << "\n" << cluster.Logs();
  FlipBitsInDataFiles(dir.path() + "/node1");  // node 1 serves file reads and reads itself first
  auto got = GetFile(io, **client, "/c/file");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, data);
  auto report = io.Run((*client)->Fsck(false, Secs(60)));
  ASSERT_TRUE(report.ok());
  ASSERT_FALSE(report->problems.empty());
  EXPECT_NE(report->problems[0].find("ChecksumMismatch"), std::string::npos) << report->problems[0];
}

// Runs a shell command; returns its exit code and output.
std::pair<int, std::string> Shell(const std::string& command, const std::string& out_file) {
  const int rc = std::system((command + " > " + out_file + " 2>&1").c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, testing::ReadText(out_file)};
}

TEST(ServerTest, EmbeddedServerAndCliRoundTrip) {
  TempDir dir("srv-embedded");
  const uint16_t port = FreePort();
  Process server;
  ASSERT_TRUE(
      server.Start({RINGFSD, "--state", dir.path() + "/state", "--port", std::to_string(port)}, {},
                   dir.path() + "/server.log"));
  const std::string cli = std::string(RINGFS) + " --server 127.0.0.1:" + std::to_string(port) + " ";
  const std::string out = dir.path() + "/out.txt";
  auto data = Content(1, 1, 9 << 20);  // spans three 4 MiB chunks
  {
    std::ofstream f(dir.path() + "/in.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  }
  auto [rc, text] = Shell(cli + "put " + dir.path() + "/in.bin /data/in.bin", out);
  // The server may still be starting: the client's connect retries for 5 s.
  ASSERT_EQ(rc, 0) << text << testing::ReadText(dir.path() + "/server.log");
  std::tie(rc, text) = Shell(cli + "ls /data", out);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(text.find("9437184\t/data/in.bin"), std::string::npos) << text;
  std::tie(rc, text) = Shell(cli + "mv /data/in.bin /data/moved.bin", out);
  EXPECT_EQ(rc, 0) << text;
  std::tie(rc, text) = Shell(cli + "cat /data/moved.bin | cmp - " + dir.path() + "/in.bin", out);
  EXPECT_EQ(rc, 0) << text;
  std::tie(rc, text) = Shell(cli + "get /data/moved.bin " + dir.path() + "/back.bin && cmp " +
                                 dir.path() + "/back.bin " + dir.path() + "/in.bin",
                             out);
  EXPECT_EQ(rc, 0) << text;
  std::tie(rc, text) = Shell(cli + "stat /data/../x", out);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(text.find("invalid path"), std::string::npos) << text;
  std::tie(rc, text) = Shell(cli + "stat /nope", out);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(text.find("NotFound"), std::string::npos) << text;
  std::tie(rc, text) = Shell(cli + "fsck", out);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("files 1, folders 1, chunks 3"), std::string::npos) << text;
  // rm of a folder with a file in it is refused; rm -r takes it and everything under it.
  std::tie(rc, text) = Shell(cli + "put " + dir.path() + "/in.bin /data/sub/copy.bin", out);
  ASSERT_EQ(rc, 0) << text;
  std::tie(rc, text) = Shell(cli + "rm /data", out);
  EXPECT_EQ(rc, 1) << text;
  EXPECT_NE(text.find("not empty"), std::string::npos) << text;
  std::tie(rc, text) = Shell(cli + "rm -r /data", out);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("removed 4 files and folders"), std::string::npos) << text;
  std::tie(rc, text) = Shell(cli + "fsck", out);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("files 0, folders 0, chunks 0, orphan chunks 0"), std::string::npos) << text;
  // A chunk write larger than a chunk is refused, and the server keeps serving.
  Io io;
  ByteWriter w;
  w.Put<uint64_t>(42);
  w.Put<uint64_t>(0);  // chain version: unchecked
  w.Put<uint8_t>(0);
  std::vector<std::byte> big(5 << 20);
  w.Put<uint32_t>(Crc32c(big.data(), big.size()));
  w.PutBytes(big.data(), big.size());
  auto refused = RawCall(io, port, wire::kChunkWrite, w.Take());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status().ToString();
  std::tie(rc, text) = Shell(cli + "ls /", out);
  EXPECT_EQ(rc, 0) << text;
  const int status = server.Stop(std::chrono::seconds(15));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace rt::iofs

namespace rt::iofs {
namespace {

// kill -9 of the embedded server at each engine fault point in the middle of a stream of file
// writes: after a restart every acknowledged file reads back whole, fsck --repair removes what the
// crash left half-done, and a second fsck is clean.
class ServerCrashTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ServerCrashTest, Kill9AtEngineFaultPointThenFsckClean) {
  if (!fault::Enabled()) GTEST_SKIP() << "built without RINGTRAIN_FAULT_INJECTION";
  TempDir dir("srv-crash");
  const uint16_t port = FreePort();
  const std::string state = dir.path() + "/state";
  Process server;
  // The 40th hit: a few files in, the server dies between two steps of a chunk write.
  ASSERT_TRUE(server.Start({RINGFSD, "--state", state, "--port", std::to_string(port)},
                           {std::string("RINGTRAIN_FAULTS=") + GetParam() + "=crash@40"},
                           dir.path() + "/server.log"));
  Io io;
  std::vector<int> acknowledged;
  {
    auto client = io.Run(Client::Connect("127.0.0.1", port, Secs(10)));
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    for (int i = 0; i < 40; ++i) {
      if (!PutFile(io, **client, "/crash/f" + std::to_string(i), Content(i, 5, 5 << 20)).ok())
        break;
      acknowledged.push_back(i);
    }
  }
  EXPECT_FALSE(acknowledged.empty());
  // The client saw the connection drop; the process is dying of its own SIGKILL.
  const int status = server.WaitExit(std::chrono::seconds(10));
  ASSERT_TRUE(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the fault point never fired (status " << status << ")";
  ASSERT_TRUE(server.Start({RINGFSD, "--state", state, "--port", std::to_string(port)}, {},
                           dir.path() + "/server.log"));
  auto client = io.Run(Client::Connect("127.0.0.1", port, Secs(10)));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  for (int i : acknowledged) {
    auto got = GetFile(io, **client, "/crash/f" + std::to_string(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, Content(i, 5, 5 << 20)) << i;
  }
  auto repaired = io.Run((*client)->Fsck(true, Secs(60)));
  ASSERT_TRUE(repaired.ok()) << repaired.status().ToString();
  EXPECT_TRUE(repaired->problems.empty()) << repaired->problems[0];
  auto report = io.Run((*client)->Fsck(false, Secs(60)));
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->problems.empty());
  EXPECT_EQ(report->orphan_chunks, 0u);
  EXPECT_GE(report->files, acknowledged.size());
  server.Stop(std::chrono::seconds(15));
}

INSTANTIATE_TEST_SUITE_P(EngineFaultPoints, ServerCrashTest,
                         ::testing::Values("iofs.chunk.after_data_write",
                                           "iofs.chunk.after_data_sync",
                                           "iofs.chunk.after_meta_commit"),
                         [](const auto& info) {
                           std::string name = info.param;
                           return name.substr(name.rfind('.') + 1);
                         });

}  // namespace
}  // namespace rt::iofs
