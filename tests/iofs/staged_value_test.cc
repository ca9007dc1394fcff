// Staged values end to end (docs/formats/iofs_wire.md, "Staged values"): two ringfsd servers in
// this process, RF=2 on loopback, written through the metadata node. A write the metadata node
// sends to the other node's chains is staged there, and the head's forward back names the staged
// copy. Here every staged copy is gone when its forward arrives (fault point
// iofs.server.drop_staged), so each such forward is answered NotFound and must be resent in full.
#include <fstream>

#include <gtest/gtest.h>

#include "base/bytes.h"
#include "base/fault.h"
#include "iofs/chain/value_buffer.h"
#include "iofs/client.h"
#include "iofs/net/wire.h"
#include "iofs/server.h"
#include "tests/iofs/io_util.h"
#include "tests/iofs/process_util.h"

namespace rt::iofs {
namespace {

using testing::Content;
using testing::FreePort;
using testing::Io;
using testing::RawCall;
using testing::TempDir;

constexpr char kDropStaged[] = "iofs.server.drop_staged";
constexpr uint64_t kChunk = 256 << 10;

Deadline Secs(int s) { return Deadline::After(std::chrono::seconds(s)); }

// Starts node `self` of a two-node RF=2 cluster on `ports` (chunks of kChunk bytes).
std::unique_ptr<Server> StartNode(const std::string& dir, int self, const uint16_t (&ports)[2]) {
  const std::string config = dir + "/node" + std::to_string(self) + ".toml";
  {
    std::ofstream out(config);
    out << "[node]\nid = " << self << "\nstate = \"" << dir << "/node" << self << "\"\n"
        << "[cluster]\nnodes = \"1@127.0.0.1:" << ports[0] << ",2@127.0.0.1:" << ports[1]
        << "\"\nreplication = 2\nchains = 4\n"
        << "[engine]\nchunk_size = " << kChunk
        << "\nsmall_chunk_size = 65536\nslots_per_file = 64\n"
        << "capacity_gib = 1\nio_buffers = 8\nqueue_depth = 8\n"
        << "[timing]\ntick_ms = 50\nheartbeat_ms = 100\ndown_after = 10\n";
  }
  auto options = LoadServerOptions(config);
  EXPECT_TRUE(options.ok()) << options.status().ToString();
  if (!options.ok()) return nullptr;
  auto server = Server::Start(*options);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return server.ok() ? std::move(*server) : nullptr;
}

// Chunk `key` as the server on `port` holds it (read at that replica only).
Result<std::vector<std::byte>> ReplicaChunk(Io& io, uint16_t port, uint64_t key) {
  ByteWriter w;
  w.Put<uint64_t>(key);
  w.Put<uint64_t>(0);
  w.Put<uint64_t>(UINT64_MAX);
  return RawCall(io, port, wire::kChunkRead, w.Take());
}

// True once neither server holds a chunk value or a staged copy in memory and the value buffers
// in use are back to at most `baseline_buffers` (taken at the start, when a connection's buffer may
// still have been in use; bounded: acknowledgements may still be on their way).
bool ReleasedEverything(Server& a, Server& b, size_t baseline_buffers, std::string* what) {
  const Deadline deadline = Secs(10);
  while (true) {
    const ServerStats sa = a.Stats(), sb = b.Stats();
    const size_t buffers = chain::ValueBuffersInUse();
    *what = "value bytes in memory " + std::to_string(sa.value_bytes_in_memory) + " and " +
            std::to_string(sb.value_bytes_in_memory) + ", staged copies " +
            std::to_string(sa.staged_values) + " and " + std::to_string(sb.staged_values) +
            ", value buffers in use " + std::to_string(buffers) + " (baseline " +
            std::to_string(baseline_buffers) + ")";
    if (sa.value_bytes_in_memory == 0 && sb.value_bytes_in_memory == 0 && sa.staged_values == 0 &&
        sb.staged_values == 0 && buffers <= baseline_buffers)
      return true;
    if (deadline.Expired()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TEST(StagedValueTest, ForwardWhoseStagedCopyIsGoneIsResentInFullAndCommitsOnBothReplicas) {
  if (!fault::Enabled()) GTEST_SKIP() << "built without RINGTRAIN_FAULT_INJECTION";
  TempDir dir("staged-resend");
  const uint16_t ports[2] = {FreePort(), FreePort()};
  std::unique_ptr<Server> node1 = StartNode(dir.path(), 1, ports);
  std::unique_ptr<Server> node2 = StartNode(dir.path(), 2, ports);
  ASSERT_TRUE(node1 && node2);
  Io io;
  auto client = io.Run(Client::Connect("127.0.0.1", ports[0], Secs(10)));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const size_t baseline_buffers = chain::ValueBuffersInUse();

  // Node 1 serves the files; chains 1 and 3 are headed by node 2 with node 1 as their tail, so
  // their chunks are staged at node 1 and every forward of them finds its copy gone.
  fault::Arm(kDropStaged, fault::Spec{});
  constexpr int kFiles = 6;
  std::vector<std::vector<std::byte>> files;
  for (int i = 0; i < kFiles; ++i) {
    files.push_back(Content(i, 7, 5 * kChunk + 1000 * i + 17));
    const std::string path = "/staged/f" + std::to_string(i);
    auto created = io.Run((*client)->Create(path, Secs(20)));
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    Status s = io.Run((*client)->WriteParallel(path, 0, files.back(), 4, Secs(20)));
    ASSERT_TRUE(s.ok()) << "file " << i << ": " << s.ToString();
    ASSERT_TRUE(io.Run((*client)->Seal(path, Secs(20))).ok());
  }
  const int64_t dropped = fault::HitCount(kDropStaged);
  fault::DisarmAll();
  ASSERT_GT(dropped, 0) << "no forward named a staged copy";
  const uint64_t resent = node2->Stats().staged_forwards_resent;
  EXPECT_GT(resent, 0u);
  EXPECT_LE(resent, static_cast<uint64_t>(dropped));
  EXPECT_EQ(node1->Stats().staged_forwards_resent,
            0u);  // node 2 never stages: it is no client of node 1

  // Every chunk of every file, read back from each replica on its own.
  for (int i = 0; i < kFiles; ++i) {
    auto st = io.Run((*client)->Stat("/staged/f" + std::to_string(i), Secs(10)));
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    ASSERT_EQ(st->size, files[i].size());
    for (uint64_t index = 0; index * kChunk < files[i].size(); ++index) {
      const auto begin = files[i].begin() + static_cast<std::ptrdiff_t>(index * kChunk);
      const std::vector<std::byte> expected(
          begin, begin + static_cast<std::ptrdiff_t>(
                             std::min<uint64_t>(kChunk, files[i].size() - index * kChunk)));
      for (int n = 0; n < 2; ++n) {
        auto got = ReplicaChunk(io, ports[n], DataKey(st->ino, index));
        ASSERT_TRUE(got.ok()) << "file " << i << " chunk " << index << " at node " << n + 1 << ": "
                              << got.status().ToString();
        EXPECT_TRUE(*got == expected)
            << "file " << i << " chunk " << index << " differs at node " << n + 1;
      }
    }
  }

  std::string held;
  EXPECT_TRUE(ReleasedEverything(*node1, *node2, baseline_buffers, &held)) << held;
  auto report = io.Run((*client)->Fsck(false, Secs(30)));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->problems.empty()) << report->problems[0];
  EXPECT_EQ(report->orphan_chunks, 0u);
  EXPECT_EQ(report->files, static_cast<uint64_t>(kFiles));
  client->reset();  // closes the connection
  EXPECT_TRUE(node2->Shutdown(Secs(10)).ok());
  EXPECT_TRUE(node1->Shutdown(Secs(10)).ok());
}

}  // namespace
}  // namespace rt::iofs
