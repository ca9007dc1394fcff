// A local cluster of real ringtraind processes on loopback training config tiny: submit through
// ringctl, then real kill -9 of a worker and of a daemon, and SIGTERM of a daemon; after each the
// job goes on in a new generation; the same with membership in etcd; a job that cannot start is
// retried with growing pauses; a checkpoint asked for past the job's last step answers when the
// job finishes. Prints how long each recovery took.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "elastic/membership/local_etcd.h"
#include "tests/daemon/local_cluster.h"

namespace rt::daemon {
namespace {

using std::chrono::milliseconds;

using ClusterTest = LocalCluster;

TEST_F(ClusterTest, TrainsAndRecoversFromKilledWorkersAndDaemons) {
  for (int id = 1; id <= 3; ++id) StartNode(id, 2);
  WaitFor(1, "a view of 3 members", [](const Json& s) { return Members(s) == 3; });

  // A malformed job is refused with file, line and key and changes nothing.
  const std::string bad = (dir_ / "bad.toml").string();
  std::ofstream(bad) << "[job]\nname = \"x\"\n[elastic]\ntp = 2\nbogus = 1\n";
  ProcessOutcome refused = Ctl({"submit", bad});
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find("bad.toml"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("elastic.bogus"), std::string::npos) << refused.output;
  ASSERT_TRUE(Status(1).ok());
  EXPECT_FALSE(Status(1)->contains("job"));

  ProcessOutcome submitted = Ctl({"submit", TinyJobFile()}, 2);
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  Json s = WaitFor(3, "training on 3 nodes past a checkpoint",
                   [](const Json& s) { return Step(s) >= 12; });
  ProcessOutcome text = Ctl({"status"}, 3);
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.output.find("tp=2,pp=1,dp=3"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("membership: ring"), std::string::npos) << text.output;
  std::printf("ringctl status:\n%s", text.output.c_str());

  // kill -9 one worker of node 2: a new epoch, the same view, every node restarts its workers.
  const std::string gen_before = Generation(s);
  std::vector<pid_t> victims = WorkerPids(s, 2);
  ASSERT_FALSE(victims.empty()) << s.dump(2);
  auto kill_at = MonoClock::now();
  ASSERT_EQ(::kill(victims[0], SIGKILL), 0);
  s = WaitFor(1, "a new generation after the worker kill", [&](const Json& s) {
    return !Generation(s).empty() && Generation(s) != gen_before && Step(s) >= 1;
  });
  double seconds = std::chrono::duration<double>(MonoClock::now() - kill_at).count();
  std::printf("recovery after kill -9 of a worker: %.2f s to the first step of generation %s\n",
              seconds, Generation(s).c_str());
  EXPECT_EQ(Members(s), 3u) << "a worker death changes the epoch, not the view";

  // ringctl drain 3: a new epoch whose plan leaves node 3 out; --undo puts it back.
  ProcessOutcome drained = Ctl({"drain", "3"}, 2);
  ASSERT_EQ(drained.exit_code, 0) << drained.output;
  s = WaitFor(1, "a plan without node 3", [](const Json& s) {
    return WorkerPids(s, 3).empty() && WorkerPids(s, 1).size() == 2 &&
           WorkerPids(s, 2).size() == 2 && Step(s) >= 1 &&
           s["nodes"][0]["plan"].get<std::string>().find("dp=2") != std::string::npos;
  });
  EXPECT_EQ(s["drained"], Json::array({3}));
  ProcessOutcome undrained = Ctl({"drain", "3", "--undo"});
  ASSERT_EQ(undrained.exit_code, 0) << undrained.output;

  // kill -9 daemon 3: its workers die with it; the others install a view of 2 and go on.
  s = WaitFor(1, "workers on node 3", [](const Json& s) { return !WorkerPids(s, 3).empty(); });
  const std::vector<pid_t> orphans = WorkerPids(s, 3);
  const std::string gen_before_daemon = Generation(s);
  kill_at = MonoClock::now();
  ASSERT_TRUE(nodes_[3]->Signal(SIGKILL).ok());
  for (pid_t pid : orphans)
    EXPECT_TRUE(ExitsWithin(pid, milliseconds(10'000))) << "worker " << pid << " outlived node 3";
  s = WaitFor(1, "training on 2 nodes", [&](const Json& s) {
    return Members(s) == 2 && Generation(s) != gen_before_daemon && Step(s) >= 1 && OfTheView(s);
  });
  seconds = std::chrono::duration<double>(MonoClock::now() - kill_at).count();
  std::printf("recovery after kill -9 of a daemon: %.2f s to the first step of generation %s\n",
              seconds, Generation(s).c_str());

  // SIGTERM daemon 2: it leaves, stops its workers and exits 0; node 1 trains alone.
  const std::vector<pid_t> leaving = WorkerPids(s, 2);
  ASSERT_FALSE(leaving.empty());
  kill_at = MonoClock::now();
  ASSERT_TRUE(nodes_[2]->Signal(SIGTERM).ok());
  for (pid_t pid : leaving) EXPECT_TRUE(ExitsWithin(pid, milliseconds(20'000)));
  Result<ChildExit> exit = WaitExit(2, milliseconds(30'000));
  ASSERT_TRUE(exit.ok()) << exit.status().ToString();
  EXPECT_TRUE(exit->ok()) << exit->Describe();
  s = WaitFor(1, "training on node 1 alone",
              [&](const Json& s) { return Members(s) == 1 && Step(s) >= 1 && OfTheView(s); });
  seconds = std::chrono::duration<double>(MonoClock::now() - kill_at).count();
  std::printf("after SIGTERM of a daemon: %.2f s to the first step of generation %s\n", seconds,
              Generation(s).c_str());

  // Every recovery after the first generation resumed from a committed checkpoint (saved every
  // 5 steps): the rank-0 daemons' recovery lines say from which step and how many were lost.
  int resumed = 0;
  for (int id = 1; id <= 3; ++id) {
    std::ifstream log(dir_ / ("node" + std::to_string(id)) / "daemon.log");
    for (std::string line; std::getline(log, line);) {
      const size_t at = line.find("resumed at step ");
      if (line.find("recovery: ") == std::string::npos || at == std::string::npos) continue;
      std::printf("node %d: %s\n", id, line.substr(line.find("recovery: ")).c_str());
      const int64_t step = std::atoll(line.c_str() + at + 16);
      if (line.find("submitted") == std::string::npos &&
          line.find("registered") == std::string::npos) {
        EXPECT_GT(step, 1) << line;
        ++resumed;
      }
    }
  }
  EXPECT_GE(resumed, 3) << "worker kill, daemon kill and SIGTERM each resume";

  ProcessOutcome stopped = Ctl({"stop"});
  EXPECT_EQ(stopped.exit_code, 0) << stopped.output;
  WaitFor(1, "no workers after ringctl stop",
          [](const Json& s) { return WorkerPids(s, 1).empty(); });
}

// A job whose workers fail before their first step, time after time (here: its data folder is
// gone), is restarted after growing pauses (1 s, 2 s, 4 s, ...) rather than in a tight loop,
// and trains once the folder is back.
TEST_F(ClusterTest, AJobThatCannotStartIsRetriedWithGrowingPauses) {
  StartNode(1, 2);
  WaitFor(1, "a view of 1 member", [](const Json& s) { return Members(s) == 1; });
  const std::string job = TinyJobFile();
  std::filesystem::rename(dir_ / "data", dir_ / "data.away");
  ProcessOutcome submitted = Ctl({"submit", job});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  Json s = WaitFor(1, "a first failure", [](const Json& s) { return s.value("epoch", 0) >= 2; });
  const uint64_t first = s.value("epoch", 0u);
  std::this_thread::sleep_for(milliseconds(12'000));
  s = *Status(1);
  const uint64_t epochs = s.value("epoch", 0u) - first;
  std::printf("%llu new epochs in 12 s of failing starts\n",
              static_cast<unsigned long long>(epochs));
  EXPECT_GE(epochs, 2u) << "it keeps trying";
  EXPECT_LE(epochs, 6u) << "pauses of 1, 2, 4 and 8 s allow 5 (a tight loop makes ~20)";
  EXPECT_FALSE(LogLines(1, "in a row failed before their first step").empty()) << Logs();
  // The cause says what the worker said last: its error.
  EXPECT_NE(s.value("cause", "").find("no training shards"), std::string::npos) << s.dump(2);
  std::filesystem::rename(dir_ / "data.away", dir_ / "data");
  WaitFor(1, "a step once the data is back", [](const Json& s) { return Step(s) >= 1; });
}

// A worker's watch call (the long poll by which it learns that its generation ended) is held
// for worker.watch_hold_ms and then answered "keep waiting": the worker calls again and trains
// on in the same generation. Until 2026-11-30 a worker exited on any answer, so every job
// restarted all its workers every 5 minutes (seen in a fault-free chaos run).
TEST_F(ClusterTest, WorkersTrainOnPastTheirWatchCallsHold) {
  StartNode(1, 2, "watch_hold_ms = 200\n");
  WaitFor(1, "a view of 1 member", [](const Json& s) { return Members(s) == 1; });
  ProcessOutcome submitted = Ctl({"submit", TinyJobFile()});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  Json s = WaitFor(1, "training", [](const Json& s) { return Step(s) >= 2; });
  const std::string generation = Generation(s);
  const std::vector<pid_t> workers = WorkerPids(s, 1);
  ASSERT_EQ(workers.size(), 2u) << s.dump(2);
  const int64_t step = Step(s);
  std::this_thread::sleep_for(milliseconds(2'000));  // ten holds
  s = *Status(1);
  EXPECT_EQ(Generation(s), generation) << Logs();
  EXPECT_EQ(WorkerPids(s, 1), workers) << s.dump(2);
  EXPECT_GT(Step(s), step);
  EXPECT_TRUE(LogLines(1, "exited").empty()) << Logs();
}

// `ringctl checkpoint` asked for when the step it would stop after (the newest reported + 2)
// lies past the job's last step: here step 19 was reported and step 20, the last, is held back
// 5 s. It answers once the job has finished, saying so, rather than waiting out the planned
// stop's 15 s for a checkpoint that no rank will save.
TEST_F(ClusterTest, ACheckpointAskedForPastTheLastStepAnswersWhenTheJobFinishes) {
  StartNode(1, 2, "", {"RINGTRAIN_FAULTS=parallel.train.before_step=delay:5000@20"});
  WaitFor(1, "a view of 1 member", [](const Json& s) { return Members(s) == 1; });
  TinyJob job;
  job.steps = 20;
  ProcessOutcome submitted = Ctl({"submit", TinyJobFile(job)});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  WaitFor(1, "step 19 reported", [](const Json& s) { return Step(s) >= 19; });
  const auto asked = MonoClock::now();
  ProcessOutcome saved = Ctl({"checkpoint"});
  const double seconds = std::chrono::duration<double>(MonoClock::now() - asked).count();
  std::printf("ringctl checkpoint answered in %.2f s: %s", seconds, saved.output.c_str());
  EXPECT_NE(saved.exit_code, 0) << saved.output;
  EXPECT_NE(saved.output.find("finished after step 20 before the planned stop after step 21"),
            std::string::npos)
      << saved.output;
  EXPECT_LT(seconds, 10.0) << "the stop's own deadline is 15 s";
}

// `ringctl status` asks the other members in parallel: with four of five daemons stopped
// (SIGSTOP: connections open, no answers) it answers within one peer-call timeout (1.5 s), not
// four, so a client with a 5 s deadline gets every member's entry, the stopped ones as errors.
TEST_F(ClusterTest, StatusAsksTheMembersInParallel) {
  for (int id = 1; id <= 5; ++id) StartNode(id, 0);
  WaitFor(1, "a view of 5 members", [](const Json& s) { return Members(s) == 5; });
  for (int id = 2; id <= 5; ++id) ASSERT_TRUE(nodes_[id]->Signal(SIGSTOP).ok());
  for (int id = 2; id <= 5; ++id)
    ASSERT_TRUE(StopsWithin(nodes_[id]->pid(), std::chrono::milliseconds(10'000))) << id;
  Result<Json> s = Status(1);  // deadline 5 s
  for (int id = 2; id <= 5; ++id) ASSERT_TRUE(nodes_[id]->Signal(SIGCONT).ok());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const Json& nodes = (*s)["nodes"];
  ASSERT_EQ(nodes.size(), 5u) << s->dump();
  EXPECT_EQ(nodes[0]["node"], 1);
  EXPECT_FALSE(nodes[0].contains("error")) << nodes[0].dump();
  for (int i = 1; i < 5; ++i) {
    EXPECT_EQ(nodes[i]["node"], i + 1) << nodes[i].dump();
    EXPECT_TRUE(nodes[i].contains("error")) << nodes[i].dump();
  }
}

// Membership in a real etcd ([cluster] etcd): three daemons form a view through their leases,
// train, lose one to kill -9 (its lease expires and the other two go on in a new generation) and
// get it back when it restarts.
TEST_F(ClusterTest, MembershipInEtcdRecoversFromAKilledDaemon) {
  if (elastic::LocalEtcd::Binary().empty())
    GTEST_SKIP() << "etcd is not installed (Debian's etcd-server; tools/run setup installs it)";
  auto etcd = elastic::LocalEtcd::Start((dir_ / "etcd").string());
  ASSERT_TRUE(etcd.ok()) << etcd.status().ToString();
  cluster_keys_ = "etcd = \"" + (*etcd)->endpoint() + "\"\netcd_prefix = \"/cluster-test\"\n";
  for (int id = 1; id <= 3; ++id) StartNode(id, 2);
  const Json formed =
      WaitFor(3, "a view of 3 members", [](const Json& s) { return Members(s) == 3; });
  EXPECT_EQ(formed.value("membership", ""), "etcd " + (*etcd)->endpoint() + "/cluster-test");
  // Each daemon learns the view from its own etcd watch: node 2 may not have it yet when node 3
  // does, and refuses a submit until it is a member.
  WaitFor(2, "a view of 3 members", [](const Json& s) { return Members(s) == 3; });
  ProcessOutcome submitted = Ctl({"submit", TinyJobFile()}, 2);
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  Json s = WaitFor(1, "training on 3 nodes", [](const Json& s) {
    return Members(s) == 3 && Step(s) >= 6 && !WorkerPids(s, 3).empty();
  });
  const std::string before = Generation(s);
  const auto kill_at = MonoClock::now();
  ASSERT_TRUE(nodes_[3]->Signal(SIGKILL).ok());
  s = WaitFor(1, "training on 2 nodes", [&](const Json& s) {
    return Members(s) == 2 && Generation(s) != before && Step(s) >= 1 && OfTheView(s);
  });
  std::printf("etcd membership: kill -9 of a daemon, %.2f s to the first step of generation %s\n",
              std::chrono::duration<double>(MonoClock::now() - kill_at).count(),
              Generation(s).c_str());
  ASSERT_TRUE(WaitExit(3, milliseconds(10'000)).ok());
  StartNode(3, 2);
  s = WaitFor(1, "training on 3 nodes again",
              [](const Json& s) { return Members(s) == 3 && !WorkerPids(s, 3).empty(); });

  // kill -9 of node 2 and a restart within its lease: no view ever lacks it, but its new
  // incarnation ends the generation (its workers are gone) at once, not at a rendezvous timeout.
  const std::string before_restart = Generation(s);
  ASSERT_TRUE(nodes_[2]->Signal(SIGKILL).ok());
  ASSERT_TRUE(WaitExit(2, milliseconds(10'000)).ok());
  const auto restart_at = MonoClock::now();
  StartNode(2, 2);
  s = WaitFor(
      1, "training again after node 2's restart",
      [&](const Json& s) {
        return Members(s) == 3 && Generation(s) != before_restart && Step(s) >= 1 &&
               !WorkerPids(s, 2).empty();
      },
      milliseconds(30'000));
  std::printf("etcd membership: a daemon restarted within its lease, %.2f s to generation %s\n",
              std::chrono::duration<double>(MonoClock::now() - restart_at).count(),
              Generation(s).c_str());
  ProcessOutcome stopped = Ctl({"stop"});
  EXPECT_EQ(stopped.exit_code, 0) << stopped.output;
}

}  // namespace
}  // namespace rt::daemon
