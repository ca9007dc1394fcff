// No leaked space, with real processes: `ringfs put` of a large file into a cluster of ringfsd
// processes at RF 1 and RF 3, and kill -9 of the client or of one server in the middle of it (or
// a crash of the metadata node at the fault point between storing chunks and committing the
// size). After the killed server is restarted, `fsck` turns clean without --repair within the
// collector's period (plus slack for a loaded machine), and what the file holds reads back as
// the input (or holes where a write never completed).
#include <fstream>

#include <gtest/gtest.h>

#include "base/fault.h"
#include "iofs/client.h"
#include "tests/iofs/io_util.h"
#include "tests/iofs/process_util.h"
#include "tests/iofs/ringfsd_cluster.h"

namespace rt::iofs {
namespace {

using testing::Content;
using testing::Io;
using testing::Process;
using testing::RingfsdCluster;
using testing::TempDir;

constexpr int kCollectMs = 300;
constexpr size_t kFileBytes = 48u << 20;
constexpr char kRemote[] = "/ckpt/big.bin";

Deadline Secs(int s) { return Deadline::After(std::chrono::seconds(s)); }

// Who dies in the middle of the put.
enum class Victim { kClient, kNode1, kNode2, kNode3, kNode1AtFaultPoint };

struct Case {
  int rf;
  Victim victim;
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  static const char* const names[] = {"Client", "Node1", "Node2", "Node3", "Node1AtFaultPoint"};
  return "Rf" + std::to_string(info.param.rf) + "Kill" + names[static_cast<int>(info.param.victim)];
}

// The size the namespace holds for `path` now (0 while it does not exist or no node answers).
uint64_t SizeOf(Io& io, uint16_t port, const std::string& path) {
  auto client = io.Run(Client::Connect("127.0.0.1", port, Secs(5)));
  if (!client.ok()) return 0;
  auto st = io.Run((*client)->Stat(path, Secs(5)));
  return st.ok() ? st->size : 0;
}

// Polls fsck (no repair) until it is clean; returns the seconds it took, or -1 at the deadline
// (`last` holds the last report or error).
double WaitClean(Io& io, uint16_t port, int timeout_s, std::string* last) {
  const auto start = std::chrono::steady_clock::now();
  const Deadline deadline = Secs(timeout_s);
  while (!deadline.Expired()) {
    auto client = io.Run(Client::Connect("127.0.0.1", port, Secs(5)));
    if (client.ok()) {
      auto report = io.Run((*client)->Fsck(false, Secs(30)));
      if (report.ok()) {
        *last = "orphan chunks " + std::to_string(report->orphan_chunks) + ", problems " +
                std::to_string(report->problems.size()) +
                (report->problems.empty() ? "" : " (" + report->problems[0] + ")");
        if (report->orphan_chunks == 0 && report->problems.empty())
          return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      } else {
        *last = report.status().ToString();
      }
    } else {
      *last = client.status().ToString();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return -1;
}

class ReclaimTest : public ::testing::TestWithParam<Case> {};

TEST_P(ReclaimTest, KillMidPutThenFsckCleanWithoutRepair) {
  const Case c = GetParam();
  if (c.victim == Victim::kNode1AtFaultPoint && !fault::Enabled())
    GTEST_SKIP() << "built without RINGTRAIN_FAULT_INJECTION";
  TempDir dir("reclaim");
  const int nodes = c.rf;
  RingfsdCluster cluster(dir.path(), nodes, c.rf, kCollectMs);
  for (int n = 1; n <= nodes; ++n) {
    // The 20th size commit of the metadata node (the writer of every chunk) never happens.
    const bool fault = n == 1 && c.victim == Victim::kNode1AtFaultPoint;
    ASSERT_TRUE(cluster.Start(n, fault ? "iofs.fs.before_size_commit=crash@20" : ""));
  }
  const auto data = Content(7, 1, kFileBytes);
  const std::string local = dir.path() + "/in.bin";
  {
    std::ofstream f(local, std::ios::binary);
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  }
  Process put;
  ASSERT_TRUE(put.Start({RINGFS, "--server", "127.0.0.1:" + std::to_string(cluster.port(1)),
                         "--parallel", "8", "put", local, kRemote},
                        {}, dir.path() + "/put.log"));
  Io io;
  int victim_node = 0;
  if (c.victim == Victim::kNode1AtFaultPoint) {
    victim_node = 1;
    const int status = cluster.proc(1).WaitExit(std::chrono::seconds(120));
    ASSERT_TRUE(status != -1 && WIFSIGNALED(status)) << "the fault point never fired\n"
                                                     << cluster.Logs();
  } else {
    // Mid-put: once part of the file is committed.
    const Deadline deadline = Secs(120);
    while (SizeOf(io, cluster.port(1), kRemote) < (4u << 20) && put.Running() &&
           !deadline.Expired())
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(put.Running()) << "the put ended before the kill: "
                               << testing::ReadText(dir.path() + "/put.log");
    if (c.victim == Victim::kClient) {
      put.Kill();
    } else {
      victim_node = static_cast<int>(c.victim) - static_cast<int>(Victim::kNode1) + 1;
      cluster.proc(victim_node).Kill();
    }
  }
  // A put that lost its metadata node fails; one that lost another replica goes on.
  const int put_status = c.victim == Victim::kClient ? -1 : put.WaitExit(std::chrono::seconds(300));
  if (victim_node >= 2) {
    EXPECT_TRUE(WIFEXITED(put_status) && WEXITSTATUS(put_status) == 0)
        << testing::ReadText(dir.path() + "/put.log") << cluster.Logs();
  }
  if (victim_node != 0) {
    ASSERT_TRUE(cluster.Start(victim_node));
  }

  std::string last;
  const double seconds = WaitClean(io, cluster.port(1), 120, &last);
  ASSERT_GE(seconds, 0) << "fsck still not clean: " << last << "\n" << cluster.Logs();
  std::printf("fsck clean %.1f s after the restart (collector period %d ms)\n", seconds,
              kCollectMs);
  if (c.victim == Victim::kNode1AtFaultPoint) {
    // There was something to reclaim: the chunks of the write whose size never committed.
    EXPECT_NE(testing::ReadText(cluster.Log(1)).find("orphan collector: reclaimed"),
              std::string::npos)
        << cluster.Logs();
  }
  // What the file holds now (all of it when the put went on).
  auto client = io.Run(Client::Connect("127.0.0.1", cluster.port(1), Secs(10)));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto st = io.Run((*client)->Stat(kRemote, Secs(10)));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_LE(st->size, data.size());
  if (victim_node >= 2) {
    EXPECT_EQ(st->size, data.size());
  }
  std::vector<std::byte> got;
  Status read = io.Run((*client)->ReadParallel(kRemote, 0, st->size, 8, &got, Secs(120)));
  ASSERT_TRUE(read.ok()) << read.ToString();
  ASSERT_EQ(got.size(), st->size);
  // Requests run in parallel: a chunk whose write never completed reads as a hole (zeros) when a
  // later one committed the size past it. Every chunk is the input's or a hole.
  constexpr size_t kChunk = 256 << 10;
  for (size_t at = 0; at < got.size(); at += kChunk) {
    const size_t n = std::min(kChunk, got.size() - at);
    const bool same = std::equal(got.begin() + at, got.begin() + at + n, data.begin() + at);
    const bool hole = std::all_of(got.begin() + at, got.begin() + at + n,
                                  [](std::byte b) { return b == std::byte{0}; });
    EXPECT_TRUE(same || (hole && victim_node != 2 && victim_node != 3)) << "chunk at " << at;
  }
}

INSTANTIATE_TEST_SUITE_P(Kills, ReclaimTest,
                         ::testing::Values(Case{1, Victim::kClient}, Case{1, Victim::kNode1},
                                           Case{1, Victim::kNode1AtFaultPoint},
                                           Case{3, Victim::kClient}, Case{3, Victim::kNode1},
                                           Case{3, Victim::kNode2}, Case{3, Victim::kNode3},
                                           Case{3, Victim::kNode1AtFaultPoint}),
                         Name);

}  // namespace
}  // namespace rt::iofs
