// The memory tier on a local cluster of real ringtraind processes (docs/daemon.md "Memory
// tier"): kill -9 of a daemon with a memory snapshot after every step and a durable checkpoint
// every 20 steps loses at most one step; the same without the memory tier goes back to the
// durable checkpoint. Prints both recoveries (seconds, steps lost).
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "ckpt/catalog.h"
#include "tests/daemon/local_cluster.h"

namespace rt::daemon {
namespace {

// What a kill -9 of a daemon cost: the recovery line of rank 0's daemon and what it says.
struct DaemonKillCost {
  double seconds = 0;        // from the kill to the first step of the new generation
  int64_t lost = -1;         // steps lost (from the recovery line)
  std::string recovery;      // the recovery line
  bool from_memory = false;  // rank 0 resumed from a memory snapshot
};

class MemoryTierCluster : public LocalCluster {
 protected:
  // The job: config tiny, tp=2, a checkpoint every 20 steps, then `extra` lines of [ckpt].
  std::string JobFile(const std::string& extra) {
    const std::string path = (dir_ / "job.toml").string();
    std::ofstream(path) << "[job]\nname = \"tiny\"\n[elastic]\ntp = 2\nmin_nodes = 1\n"
                        << "[model]\nn_layer = 2\nn_embd = 64\nn_head = 4\nseq_len = 32\n"
                        << "[train]\nbatch_size = 12\nsteps = 1000000\nlog_every = 1000\n"
                        << "[data]\ndir = \"" << (dir_ / "data").string() << "\"\n"
                        << "[eval]\nevery = 0\n"
                        << "[ckpt]\ndir = \"" << (dir_ / "ckpt").string()
                        << "\"\nevery = 20\nasync = true\n" << extra;
    return path;
  }

  // Trains with `ckpt_lines` (of [ckpt]) on 3 daemons past step 25, kills daemon 3 with -9 and
  // waits for the first step of the generation on nodes 1 and 2.
  DaemonKillCost KillADaemonAfterStep25(const std::string& ckpt_lines, bool memory_tier);
};

DaemonKillCost MemoryTierCluster::KillADaemonAfterStep25(const std::string& ckpt_lines,
                                                   bool memory_tier) {
  DaemonKillCost cost;
  for (int id = 1; id <= 3; ++id) StartNode(id, 2);
  WaitFor(1, "a view of 3 members", [](const Json& s) { return Members(s) == 3; });
  ProcessOutcome submitted = Ctl({"submit", JobFile(ckpt_lines)});
  EXPECT_EQ(submitted.exit_code, 0) << submitted.output;
  // Past step 25, with the durable checkpoint of step 20 committed (it is written in the
  // background: under load it commits some steps later).
  auto durable = ckpt::OpenStorage((dir_ / "ckpt").string());
  EXPECT_TRUE(durable.ok()) << durable.status().ToString();
  Json s = WaitFor(1, "training on 3 nodes past step 25 with checkpoint 20 committed",
                   [&](const Json& s) {
                     if (Step(s) < 25 || WorkerPids(s, 3).size() != 2) return false;
                     auto committed = ckpt::ListCommitted(**durable);
                     return committed.ok() && !committed->empty() && committed->front() >= 20;
                   });
  for (const Json& n : s["nodes"])
    EXPECT_EQ(n["memory_tier"]["bytes"].get<int64_t>() > 0, memory_tier) << n.dump();
  const std::string gen_before = Generation(s);
  const int64_t step_before = Step(s);
  const auto kill_at = MonoClock::now();
  EXPECT_TRUE(nodes_[3]->Signal(SIGKILL).ok());
  s = WaitFor(1, "training on 2 nodes", [&](const Json& s) {
    return Members(s) == 2 && Generation(s) != gen_before &&
           Step(s) >= 1 &&
           s["progress"]["generation"].get<std::string>().find(
               "." + std::to_string(s["view"]["generation"].get<int64_t>()) + ".") !=
               std::string::npos;
  });
  cost.seconds = std::chrono::duration<double>(MonoClock::now() - kill_at).count();
  for (int id = 1; id <= 2; ++id) {
    // The last recovery after the start (its cause: the view change, or a survivor's worker
    // that failed first when its peers died).
    for (const std::string& line : LogLines(id, "recovery: ")) {
      const size_t at = line.find("steps lost ");
      if (at == std::string::npos || line.find("submitted") != std::string::npos ||
          line.find("registered") != std::string::npos)
        continue;
      cost.recovery = line.substr(line.find("recovery: "));
      cost.lost = std::atoll(line.c_str() + at + 11);
    }
  }
  for (auto& entry : std::filesystem::recursive_directory_iterator(dir_)) {
    if (entry.path().filename() != "rank-0.log") continue;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    cost.from_memory |= text.find("resuming from memory snapshot") != std::string::npos;
  }
  std::printf("%s: kill -9 of a daemon after step %lld: %.2f s until a step of generation %s "
              "was seen; %s\n", memory_tier ? "memory tier" : "durable only",
              static_cast<long long>(step_before), cost.seconds, Generation(s).c_str(),
              cost.recovery.c_str());
  ProcessOutcome stopped = Ctl({"stop"});
  EXPECT_EQ(stopped.exit_code, 0) << stopped.output;
  return cost;
}

// The memory tier (docs/daemon.md): with a snapshot in the daemons' memory after every step and
// a durable checkpoint only every 20, kill -9 of a daemon costs at most one step.
TEST_F(MemoryTierCluster, RecoversFromTheMemoryTierAfterADaemonKill) {
  const DaemonKillCost cost = KillADaemonAfterStep25("memory_every = 1\n", true);
  ASSERT_GE(cost.lost, 0) << "no recovery line\n" << Logs();
  EXPECT_LE(cost.lost, 1) << cost.recovery << "\n" << Logs();
  EXPECT_TRUE(cost.from_memory) << Logs();
}

// The same without the memory tier: the job goes back to the durable checkpoint of step 20.
TEST_F(MemoryTierCluster, RecoversFromTheDurableCheckpointWithoutTheMemoryTier) {
  const DaemonKillCost cost = KillADaemonAfterStep25("", false);
  ASSERT_GE(cost.lost, 0) << "no recovery line\n" << Logs();
  EXPECT_GE(cost.lost, 5) << cost.recovery;  // killed after step 25, resumed at step 20 (or 40)
  EXPECT_FALSE(cost.from_memory);
  const size_t at = cost.recovery.find("resumed at step ");
  ASSERT_NE(at, std::string::npos) << cost.recovery;
  const int64_t resumed = std::atoll(cost.recovery.c_str() + at + 16);  // "resumed at step N,"
  EXPECT_TRUE(resumed == 21 || resumed == 41) << cost.recovery;
}

// Two training nodes and a witness (node.slots = 0: a member that votes and keeps memory-tier
// copies but runs no rank): kill -9 of one training node leaves a majority of the view, and the
// job goes on on the other from the memory tier. The witness never runs a worker.
TEST_F(MemoryTierCluster, TwoNodesAndAWitnessSurviveTheLossOfOne) {
  StartNode(1, 2);
  StartNode(2, 2);
  StartNode(3, 0);
  WaitFor(1, "a view of 3 members", [](const Json& s) { return Members(s) == 3; });
  ProcessOutcome submitted = Ctl({"submit", JobFile("memory_every = 1\n")});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  Json s = WaitFor(1, "training tp=2 dp=2 on nodes 1 and 2 past step 5", [](const Json& s) {
    return Step(s) >= 5 && WorkerPids(s, 1).size() == 2 && WorkerPids(s, 2).size() == 2;
  });
  EXPECT_TRUE(WorkerPids(s, 3).empty()) << s.dump();
  const std::string gen_before = Generation(s);
  ASSERT_TRUE(nodes_[2]->Signal(SIGKILL).ok());
  s = WaitFor(1, "training on node 1 alone in a view with the witness", [&](const Json& s) {
    return Members(s) == 2 && Generation(s) != gen_before && Step(s) >= 1 &&
           Generation(s).find("." + std::to_string(s["view"]["generation"].get<int64_t>()) +
                              ".") != std::string::npos &&
           WorkerPids(s, 1).size() == 2;
  });
  EXPECT_TRUE(WorkerPids(s, 3).empty()) << s.dump();
  bool from_memory = false;
  for (auto& entry : std::filesystem::recursive_directory_iterator(dir_)) {
    if (entry.path().filename() != "rank-0.log") continue;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    from_memory |= text.find("resuming from memory snapshot") != std::string::npos;
  }
  EXPECT_TRUE(from_memory) << Logs();
  ProcessOutcome stopped = Ctl({"stop"});
  EXPECT_EQ(stopped.exit_code, 0) << stopped.output;
}

}  // namespace
}  // namespace rt::daemon
