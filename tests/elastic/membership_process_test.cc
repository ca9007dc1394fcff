// The membership service with real processes on loopback (tests/elastic/membership_node.cc):
// nodes form a view; kill -9 of one, SIGSTOP of one, a restart, a minority, a graceful Leave.
// Each node's events are read from its output ("view GENERATION IDS" lines). The times printed
// are from the signal to the moment every survivor has installed the new view (polled every
// 10 ms); the bounds asserted are several times the targets, so a loaded machine passes.
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/iofs/process_util.h"

namespace rt::elastic {
namespace {

using iofs::testing::Process;
using iofs::testing::ReadText;
using iofs::testing::TempDir;
using Clock = std::chrono::steady_clock;

class Cluster {
 public:
  explicit Cluster(int nodes) : dir_("membership"), ports_(nodes, 0), procs_(nodes) {}
  ~Cluster() {
    for (int id = 1; id <= static_cast<int>(procs_.size()); ++id) Signal(id, SIGCONT);
  }

  // Sends `signal` to node `id` (if it runs).
  void Signal(int id, int signal) {
    if (procs_[id - 1] && procs_[id - 1]->pid() > 0) kill(procs_[id - 1]->pid(), signal);
  }

  std::string Address(int id) const { return "127.0.0.1:" + std::to_string(ports_[id - 1]); }
  std::string Log(int id) const { return dir_.path() + "/node" + std::to_string(id) + ".log"; }

  // Starts node `id` (again, on the port it had): node 1 is the seed and bootstraps. A first
  // start binds port 0 and the node's log names the port it got (no race with other tests).
  // `env`: extra environment entries (RINGTRAIN_FAULTS).
  void Start(int id, std::vector<std::string> env = {}) {
    const std::string seeds = id == 1 && ports_[0] == 0 ? "" : Address(1);
    const size_t log_size = ReadText(Log(id)).size();
    procs_[id - 1] = std::make_unique<Process>();
    ASSERT_TRUE(procs_[id - 1]->Start({MEMBERSHIP_NODE, std::to_string(id), Address(id),
                                       dir_.path() + "/state" + std::to_string(id), seeds},
                                      env, Log(id)));
    const std::string marker = "node " + std::to_string(id) + " at 127.0.0.1:";
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (true) {
      const std::string log = ReadText(Log(id)).substr(log_size);
      const size_t at = log.find(marker);
      if (at != std::string::npos && log.find(" starting", at) != std::string::npos) {
        ports_[id - 1] = static_cast<uint16_t>(std::stoi(log.substr(at + marker.size())));
        break;
      }
      ASSERT_TRUE(procs_[id - 1]->Running()) << "node " << id << " exited:\n" << log;
      ASSERT_LT(Clock::now(), deadline) << "node " << id << " did not start:\n" << log;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
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

  // Waits until some node in `nodes` printed a line starting with `prefix`; returns the seconds
  // since `start`, or -1 at `timeout_s`.
  double WaitLine(std::vector<int> nodes, const std::string& prefix, Clock::time_point start,
                  double timeout_s) {
    while (true) {
      for (int id : nodes) {
        if (ReadText(Log(id)).find("\n" + prefix) != std::string::npos)
          return std::chrono::duration<double>(Clock::now() - start).count();
      }
      if (Clock::now() - start > std::chrono::duration<double>(timeout_s)) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  // Waits until every node in `nodes` shows the view `ids`; returns the seconds it took, or
  // -1 at `timeout_s` (and prints the logs).
  double WaitView(std::vector<int> nodes, const std::string& ids, double timeout_s,
                  Clock::time_point start = Clock::now()) {
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
  for (int id = 1; id <= nodes; ++id) ASSERT_NO_FATAL_FAILURE(cluster.Start(id));
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
  const auto killed = Clock::now();
  cluster.proc(3).Kill();
  const double suspected = cluster.WaitLine({2}, "suspect 3 ", killed, 20);
  const double took = cluster.WaitView({1, 2, 4}, "1,2,4", 20, killed);
  ASSERT_GE(suspected, 0);
  ASSERT_GE(took, 0);
  std::printf(
      "kill -9 of node 3: suspected by its predecessor after %.0f ms, 3-node view "
      "installed on every survivor after %.0f ms\n",
      suspected * 1000, took * 1000);
  EXPECT_LT(took, 5.0);
}

TEST(MembershipProcessTest, StoppedNodeIsRemovedAfterMissedHeartbeatsAndRejoins) {
  Cluster cluster(4);
  ASSERT_NO_FATAL_FAILURE(StartAll(cluster, 4));
  const auto stopped = Clock::now();
  cluster.Signal(2, SIGSTOP);
  const double took = cluster.WaitView({1, 3, 4}, "1,3,4", 20, stopped);
  ASSERT_GE(took, 0);
  std::printf("SIGSTOP of node 2: removed on every other node after %.0f ms\n", took * 1000);
  EXPECT_GT(took, 0.5);  // a hang is noticed by missed heartbeats, not a broken connection
  EXPECT_LT(took, 8.0);
  cluster.Signal(2, SIGCONT);
  const double back = cluster.WaitView({1, 2, 3, 4}, "1,2,3,4", 20);
  ASSERT_GE(back, 0);
  std::printf("SIGCONT of node 2: rejoined after %.0f ms\n", back * 1000);
}

TEST(MembershipProcessTest, RestartedNodeRejoinsWithItsState) {
  Cluster cluster(4);
  ASSERT_NO_FATAL_FAILURE(StartAll(cluster, 4));
  cluster.proc(4).Kill();
  ASSERT_GE(cluster.WaitView({1, 2, 3}, "1,2,3", 20), 0);
  ASSERT_NO_FATAL_FAILURE(cluster.Start(4));
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
  ASSERT_NO_FATAL_FAILURE(cluster.Start(2));
  ASSERT_GE(cluster.WaitView({1, 2}, "1,2", 20), 0);
}

TEST(MembershipProcessTest, CrashBetweenPersistAndSendLosesNothing) {
  Cluster cluster(4);
  for (int id = 1; id <= 3; ++id) ASSERT_NO_FATAL_FAILURE(cluster.Start(id));
  ASSERT_GE(cluster.WaitView({1, 2, 3}, "1,2,3", 30), 0);
  // Node 4 dies (SIGKILL) right after its third durable write, before sending what followed it.
  ASSERT_NO_FATAL_FAILURE(cluster.Start(4, {"RINGTRAIN_FAULTS=membership.after_persist=crash@3"}));
  const int status = cluster.proc(4).WaitExit(std::chrono::seconds(20));
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << ReadText(cluster.Log(4));
  ASSERT_GE(cluster.WaitView({1, 2, 3}, "1,2,3", 20), 0);
  ASSERT_NO_FATAL_FAILURE(cluster.Start(4));
  ASSERT_GE(cluster.WaitView({1, 2, 3, 4}, "1,2,3,4", 20), 0);
}

TEST(MembershipProcessTest, LeaveRemovesTheNodeAtOnce) {
  Cluster cluster(4);
  ASSERT_NO_FATAL_FAILURE(StartAll(cluster, 4));
  cluster.Signal(2, SIGTERM);
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
