// The membership service with real processes on loopback (tests/elastic/membership_node.cc):
// nodes form a view; kill -9 of one, SIGSTOP of one, a restart, a minority, a graceful Leave.
// Each node's events are read from its output ("view GENERATION IDS" lines). The times printed
// are from the signal to the moment every survivor has installed the new view (polled every
// 10 ms); the bounds asserted are several times the targets, so a loaded machine passes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include "tests/iofs/process_util.h"

namespace rt::elastic {
namespace {

using iofs::testing::FreePort;
using iofs::testing::Process;
using iofs::testing::ReadText;
using iofs::testing::TempDir;
using Clock = std::chrono::steady_clock;

class Cluster {
 public:
  explicit Cluster(int nodes) : dir_("membership") {
    for (int i = 1; i <= nodes; ++i) ports_.push_back(FreePort());
    procs_.resize(nodes);
  }
  ~Cluster() {
    for (auto& p : procs_) {
      if (p) kill(p->pid(), SIGCONT);
    }
  }

  std::string Address(int id) const { return "127.0.0.1:" + std::to_string(ports_[id - 1]); }
  std::string Log(int id) const { return dir_.path() + "/node" + std::to_string(id) + ".log"; }

  // Starts node `id` (again): node 1 is the first seed and bootstraps; seeds are nodes 1..3.
  void Start(int id) {
    std::string seeds;
    for (int s = 1; s <= std::min<int>(3, ports_.size()); ++s)
      seeds += (seeds.empty() ? "" : ",") + Address(s);
    procs_[id - 1] = std::make_unique<Process>();
    ASSERT_TRUE(procs_[id - 1]->Start({MEMBERSHIP_NODE, std::to_string(id), Address(id),
                                       dir_.path() + "/state" + std::to_string(id), seeds},
                                      {}, Log(id)));
  }
  Process& proc(int id) { return *procs_[id - 1]; }

  // The member ids of the newest view node `id` printed ("" before any).
  std::string LastView(int id) const {
    std::istringstream in(ReadText(Log(id)));
    std::string line, last;
    while (std::getline(in, line)) {
      if (line.rfind("view ", 0) != 0) continue;
      last = line.substr(line.find(' ', 5) + 1);
    }
    return last;
  }
  // Counts the "view" lines node `id` printed.
  int ViewLines(int id) const {
    std::istringstream in(ReadText(Log(id)));
    std::string line;
    int n = 0;
    while (std::getline(in, line)) n += line.rfind("view ", 0) == 0;
    return n;
  }

  // Waits until every node in `nodes` shows the view `ids`; returns the seconds it took, or
  // -1 at `timeout_s` (and prints the logs).
  double WaitView(std::vector<int> nodes, const std::string& ids, double timeout_s) {
    const auto start = Clock::now();
    while (true) {
      bool all = true;
      for (int id : nodes) all = all && LastView(id) == ids;
      const double took = std::chrono::duration<double>(Clock::now() - start).count();
      if (all) return took;
      if (took > timeout_s) {
        for (int id : nodes)
          std::fprintf(stderr, "--- node %d (view '%s'):\n%s\n", id, LastView(id).c_str(),
                       ReadText(Log(id)).c_str());
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

 private:
  TempDir dir_;
  std::vector<uint16_t> ports_;
  std::vector<std::unique_ptr<Process>> procs_;
};

void StartAll(Cluster& cluster, int nodes) {
  for (int id = 1; id <= nodes; ++id) cluster.Start(id);
  std::vector<int> all;
  std::string ids;
  for (int id = 1; id <= nodes; ++id) {
    all.push_back(id);
    ids += (ids.empty() ? "" : ",") + std::to_string(id);
  }
  ASSERT_GE(cluster.WaitView(all, ids, 30), 0) << "the nodes did not form one view";
}

TEST(MembershipProcessTest, Kill9IsDetectedAndTheOthersInstallAView) {
  Cluster cluster(4);
  ASSERT_NO_FATAL_FAILURE(StartAll(cluster, 4));
  cluster.proc(3).Kill();
  const double took = cluster.WaitView({1, 2, 4}, "1,2,4", 20);
  ASSERT_GE(took, 0);
  std::printf("kill -9 of node 3: 3-node view installed on every survivor after %.0f ms\n",
              took * 1000);
  EXPECT_LT(took, 5.0);
}

TEST(MembershipProcessTest, StoppedNodeIsRemovedAfterMissedHeartbeatsAndRejoins) {
  Cluster cluster(4);
  ASSERT_NO_FATAL_FAILURE(StartAll(cluster, 4));
  kill(cluster.proc(2).pid(), SIGSTOP);
  const double took = cluster.WaitView({1, 3, 4}, "1,3,4", 20);
  ASSERT_GE(took, 0);
  std::printf("SIGSTOP of node 2: removed on every other node after %.0f ms\n", took * 1000);
  EXPECT_GT(took, 0.5);  // a hang is noticed by missed heartbeats, not a broken connection
  EXPECT_LT(took, 8.0);
  kill(cluster.proc(2).pid(), SIGCONT);
  const double back = cluster.WaitView({1, 2, 3, 4}, "1,2,3,4", 20);
  ASSERT_GE(back, 0);
  std::printf("SIGCONT of node 2: rejoined after %.0f ms\n", back * 1000);
}

TEST(MembershipProcessTest, RestartedNodeRejoinsWithItsState) {
  Cluster cluster(4);
  ASSERT_NO_FATAL_FAILURE(StartAll(cluster, 4));
  cluster.proc(4).Kill();
  ASSERT_GE(cluster.WaitView({1, 2, 3}, "1,2,3", 20), 0);
  cluster.Start(4);
  const double took = cluster.WaitView({1, 2, 3, 4}, "1,2,3,4", 20);
  ASSERT_GE(took, 0);
  std::printf("restarted node 4 rejoined after %.0f ms\n", took * 1000);
}

TEST(MembershipProcessTest, MinorityInstallsNoView) {
  Cluster cluster(3);
  ASSERT_NO_FATAL_FAILURE(StartAll(cluster, 3));
  const int lines = cluster.ViewLines(1);
  cluster.proc(2).Kill();
  cluster.proc(3).Kill();
  std::this_thread::sleep_for(std::chrono::seconds(4));
  EXPECT_EQ(cluster.ViewLines(1), lines) << ReadText(cluster.Log(1));
  EXPECT_EQ(cluster.LastView(1), "1,2,3");
  // With one of the two back, the majority removes the other.
  cluster.Start(2);
  ASSERT_GE(cluster.WaitView({1, 2}, "1,2", 20), 0);
}

TEST(MembershipProcessTest, LeaveRemovesTheNodeAtOnce) {
  Cluster cluster(4);
  ASSERT_NO_FATAL_FAILURE(StartAll(cluster, 4));
  kill(cluster.proc(2).pid(), SIGTERM);
  const double took = cluster.WaitView({1, 3, 4}, "1,3,4", 20);
  ASSERT_GE(took, 0);
  std::printf("Leave of node 2: removed on every other node after %.0f ms\n", took * 1000);
  EXPECT_LT(took, 2.0);
  const int status = cluster.proc(2).WaitExit(std::chrono::seconds(10));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadText(cluster.Log(2));
  EXPECT_NE(ReadText(cluster.Log(2)).find("left ok"), std::string::npos);
}

}  // namespace
}  // namespace rt::elastic
