// Ranks as separate processes (tests/comm/comm_test_worker.cc) with the TCP store: the
// collective table over TCP and shared memory, and kill -9 of one rank in the middle of an
// all-reduce.
#include <signal.h>
#include <unistd.h>

#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "base/fault.h"
#include "base/subprocess.h"
#include "comm/communicator.h"

namespace rt::comm {
namespace {

// One rank's process (base/subprocess.h), with this process's environment; null when it could
// not be started.
using Rank = std::unique_ptr<SyncChild>;

Rank Spawn(const std::vector<std::string>& args) {
  SpawnOptions options;
  options.argv = args;
  options.env = EnvironmentWithout({});
  options.stdout_path = "/dev/stderr";
  Result<Rank> child = SyncChild::Start(options);
  return child.ok() ? std::move(*child) : nullptr;
}

// Waits for the rank until the deadline; kills it if it is still running then. Returns the exit
// code, -signal, or -1000 when the deadline passed.
int WaitExit(const Rank& rank, Deadline deadline) {
  const std::optional<ChildExit> exit = rank->WaitExit(deadline);
  if (!exit) {
    rank->Kill();
    return -1000;
  }
  return exit->exited ? exit->exit_code : -exit->signal;
}

std::vector<Rank> StartRanks(const std::string& mode, uint16_t port, int n,
                             const std::string& transport) {
  std::vector<Rank> ranks;
  for (int r = 0; r < n; ++r)
    ranks.push_back(Spawn({COMM_TEST_WORKER, mode, std::to_string(port), std::to_string(r),
                           std::to_string(n), transport}));
  return ranks;
}

class ProcessTest : public ::testing::TestWithParam<std::string> {};

// Single copy needs every rank to read every peer's memory; a rank that cannot (here: it runs
// as another user) turns it off on every rank, and the large all-reduces still agree.
TEST(ProcessSingleCopyTest, RankThatCannotReadPeersTurnsSingleCopyOff) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to drop one rank to user nobody";
  auto server = TcpStoreServer::Start({}).value();
  const int n = 3;
  auto ranks = StartRanks("table-nobody", server->port(), n, "shm");
  for (int r = 0; r < n; ++r) {
    ASSERT_NE(ranks[r], nullptr);
    EXPECT_EQ(WaitExit(ranks[r], Deadline::AfterMs(60'000)), 0) << "rank " << r;
  }
}

// Two ranks split a single-copy all-reduce's blocks where they meet: when the host slows one
// (here a 20 ms delay at every block rank 1 claims), the other reduces most of the buffer, and
// every result is still exact.
TEST(ProcessSingleCopyTest, SlowRankLeavesItsBlocksToTheOther) {
  if (!fault::Enabled()) GTEST_SKIP() << "needs fault points";
  auto server = TcpStoreServer::Start({}).value();
  auto store = ConnectTcpStore("127.0.0.1", server->port(), Deadline::AfterMs(2000)).value();
  auto ranks = StartRanks("skew", server->port(), 2, "shm");
  for (int r = 0; r < 2; ++r) {
    ASSERT_NE(ranks[r], nullptr);
    ASSERT_EQ(WaitExit(ranks[r], Deadline::AfterMs(60'000)), 0) << "rank " << r;
  }
  uint64_t reduced[2];
  for (int r = 0; r < 2; ++r)
    reduced[r] = std::stoull(
        ToString(store->Get("reduced/" + std::to_string(r), Deadline::AfterMs(2000)).value()));
  const uint64_t total = 4 * (uint64_t{(1u << 20) + 3} * sizeof(float));  // four all-reduces
  EXPECT_EQ(reduced[0] + reduced[1], total);  // every block reduced once
  EXPECT_GT(reduced[0], total * 3 / 4)
      << "rank 0 reduced " << reduced[0] << ", rank 1 " << reduced[1];
}

TEST_P(ProcessTest, CollectiveTableAcrossProcesses) {
  auto server = TcpStoreServer::Start({}).value();
  const int n = 3;
  auto ranks = StartRanks("table", server->port(), n, GetParam());
  for (int r = 0; r < n; ++r) {
    ASSERT_NE(ranks[r], nullptr);
    EXPECT_EQ(WaitExit(ranks[r], Deadline::AfterMs(60'000)), 0) << "rank " << r;
  }
}

// Starts n workers in `mode` (kill or spin), kill -9's `victim` once every rank has made
// progress, and checks that every survivor names the victim within 2 s and then completes an
// all-reduce in generation 2.
void KillOneRankAndCheckSurvivors(const std::string& mode, const std::string& transport, int n,
                                  int victim) {
  auto server = TcpStoreServer::Start({}).value();
  auto store = ConnectTcpStore("127.0.0.1", server->port(), Deadline::AfterMs(2000)).value();
  auto ranks = StartRanks(mode, server->port(), n, transport);
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back("progress/" + std::to_string(r));
  ASSERT_TRUE(store->Wait(keys, Deadline::AfterMs(30'000)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const int64_t killed_ns = MonoClock::now().time_since_epoch().count();
  ASSERT_TRUE(ranks[victim]->Signal(SIGKILL).ok());
  EXPECT_EQ(WaitExit(ranks[victim], Deadline::AfterMs(5000)), -SIGKILL);
  const std::string victim_name = "rank " + std::to_string(victim);
  int next_rank = 0;
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    auto failed = store->Get("failed/" + std::to_string(r), Deadline::AfterMs(5000));
    ASSERT_TRUE(failed.ok()) << "rank " << r << " never reported the failure";
    std::string text = ToString(*failed);
    int64_t seen_ns = std::stoll(text.substr(0, text.find('\n')));
    std::string error = text.substr(text.find('\n') + 1);
    double after_ms = (seen_ns - killed_ns) / 1e6;
    EXPECT_LT(after_ms, 2000) << "rank " << r << ": " << error;
    EXPECT_NE(error.find(victim_name), std::string::npos) << "rank " << r << ": " << error;
    EXPECT_TRUE(error.find("PeerFailed") != std::string::npos) << error;
    ASSERT_TRUE(store
                    ->Set("gen2/rank/" + std::to_string(r), ToBytes(std::to_string(next_rank++)),
                          Deadline::AfterMs(1000))
                    .ok());
  }
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    EXPECT_EQ(WaitExit(ranks[r], Deadline::AfterMs(30'000)), 0) << "rank " << r;
    EXPECT_TRUE(
        store->TryGet("gen2/ok/" + std::to_string(r), Deadline::AfterMs(1000)).value().has_value());
  }
}

TEST_P(ProcessTest, KillOneRankMidAllReduce) {
  // Every rank finishes a couple of 16 MiB all-reduces, then rank 2 of 4 is killed mid-loop.
  KillOneRankAndCheckSurvivors("kill", GetParam(), 4, 2);
}

TEST(ProcessSingleCopyTest, KillRankZeroMidTwoRankSingleCopy) {
  // Two ranks split 16 MiB all-reduces through rank 0's claim word; rank 0 is killed mid-loop:
  // rank 1 (which may be claiming in the dead rank's arena) must fail naming it within 2 s.
  KillOneRankAndCheckSurvivors("kill", "shm", 2, 0);
}

TEST(ProcessSpinTest, KillPeerWhileTheSurvivorPollsSharedMemory) {
  // Two ranks run 8-byte all-reduces through the shared arena with a 30 s yield window, so the
  // survivor is polling (CPU pauses, no futex sleep) when its peer is killed: it must still
  // notice within 2 s (it checks the control sockets every millisecond while polling).
  KillOneRankAndCheckSurvivors("spin", "shm", 2, 1);
}

INSTANTIATE_TEST_SUITE_P(Transports, ProcessTest, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param == "tcp" ? "Tcp" : "Shm"; });

}  // namespace
}  // namespace rt::comm
