// The memory tier on a local cluster of real ringtraind processes (docs/daemon.md "Memory
// tier"): kill -9 of a daemon with a memory snapshot after every step and a durable checkpoint
// every 20 steps loses at most one step; the same without the memory tier goes back to the
// durable checkpoint. Prints both recoveries (seconds, steps lost).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

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
  // The most steps any new generation trained again, from rank 0's metrics file: a
  // generation's last step minus the step before the next generation's first (-1: no
  // generation followed another).
  int64_t metrics_lost = -1;
};

class MemoryTierCluster : public LocalCluster {
 protected:
  // The job: config tiny, tp=2, `steps` steps, a checkpoint every 20, then `extra` lines of
  // [ckpt].
  std::string JobFile(const std::string& extra, int64_t steps = 1000000) {
    TinyJob job;
    job.steps = steps;
    job.ckpt_every = 20;
    job.metrics = true;
    job.ckpt_extra = extra;
    return TinyJobFile(job);
  }

  // Trains with `ckpt_lines` (of [ckpt]) on 3 daemons past step 25, kills daemon `victim` (2
  // or 3) with -9 and waits for the first step of the generation on the other two. `env` holds
  // extra environment entries of some daemons (by id).
  DaemonKillCost KillADaemonAfterStep25(const std::string& ckpt_lines, bool memory_tier,
                                        int victim = 3,
                                        std::map<int, std::vector<std::string>> env = {});

  // Whether any rank 0's log (of any generation) holds `text`.
  bool SomeRankZeroLogSays(const std::string& text) const {
    for (auto& entry : std::filesystem::recursive_directory_iterator(dir_)) {
      if (entry.path().filename() != "rank-0.log") continue;
      std::ifstream in(entry.path());
      const std::string log((std::istreambuf_iterator<char>(in)), {});
      if (log.find(text) != std::string::npos) return true;
    }
    return false;
  }

  // The steps one generation's rank 0 wrote to the metrics file: first..last.
  struct Segment {
    std::string generation;
    int64_t first = 0, last = 0;
  };
  std::vector<Segment> Segments() const {
    std::vector<Segment> out;
    for (const StepLoss& l : ReadLosses(dir_ / "metrics.jsonl")) {
      if (out.empty() || out.back().generation != l.generation)
        out.push_back({l.generation, l.step, l.step});
      out.back().last = l.step;
    }
    return out;
  }

  // The most steps a generation trained again (DaemonKillCost::metrics_lost), from the
  // metrics file rank 0 of every generation appended to; -1 when only one generation wrote.
  int64_t MostStepsTrainedAgain() const {
    const std::vector<Segment> segments = Segments();
    int64_t most = -1;
    for (size_t i = 1; i < segments.size(); ++i)
      most = std::max(most, segments[i - 1].last - (segments[i].first - 1));
    return most;
  }

  // Trains the layout history of the last metrics line again without faults and checks every
  // loss of it against that replay (1e-5 relative; in practice bitwise): the chain of
  // generations — the last one, the one that trained the step it resumed from, and so on back
  // to the first — each with `ringtrain train`, its run config and layout, from the step it
  // resumed from up to the step the next one resumed from (`--stop-after`, which saves there).
  // Returns how many losses it compared.
  size_t ExpectTheLossesOfAFaultFreeReplay() {
    const std::vector<Segment> segments = Segments();
    if (segments.empty()) {
      ADD_FAILURE() << "no metrics lines";
      return 0;
    }
    std::vector<std::pair<Segment, int64_t>> chain;  // a generation and the step it stops at
    size_t at = segments.size() - 1;
    int64_t to = segments[at].last;
    for (;;) {
      chain.insert(chain.begin(), {segments[at], to});
      const int64_t from = segments[at].first - 1;
      if (from == 0) break;
      size_t before = at;
      while (before > 0 &&
             !(segments[before - 1].first <= from && from <= segments[before - 1].last))
        --before;
      if (before == 0) {
        ADD_FAILURE() << "generation " << segments[at].generation << " resumed from step " << from
                      << ", which no earlier generation wrote a metrics line for";
        return 0;
      }
      at = before - 1;
      to = from;
    }
    const std::filesystem::path replay = dir_ / "replay";
    std::filesystem::create_directories(replay / "ckpt");
    for (const auto& [segment, stop] : chain) {
      const std::filesystem::path gen = RankZeroDir("tiny", segment.generation);
      const WorkerLayout layout = ReadWorkerLayout(gen / "rank-0.log");
      EXPECT_FALSE(layout.layout.empty()) << "no layout line in " << gen.string();
      std::vector<std::string> argv = {
          RINGTRAIN_BIN,  "--log-level",
          "warn",         "train",
          "--config",     (gen / "run.toml").string(),
          "--layout",     layout.layout,
          "--ranks",      layout.ranks,
          "--stop-after", std::to_string(stop),
          "--set",        "metrics.path=" + (replay / "metrics.jsonl").string(),
          "--set",        "ckpt.dir=" + (replay / "ckpt").string(),
          "--set",        "ckpt.every=1000000000",
          "--set",        "ckpt.memory_every=0",
          "--set",        "ckpt.async=false",
          "--set",        "ckpt.keep=2"};
      if (segment.first > 1) argv.push_back("--resume");
      auto run =
          RunProcess(argv, EnvironmentWithout({"RINGTRAIN_FAULTS"}), Deadline::AfterMs(300'000));
      EXPECT_TRUE(run.ok() && run->exited && run->exit_code == 0)
          << "replay of generation " << segment.generation << ": "
          << (run.ok() ? run->output : run.status().ToString());
    }
    std::map<int64_t, double> reference;
    for (const StepLoss& l : ReadLosses(replay / "metrics.jsonl")) reference[l.step] = l.loss;
    size_t compared = 0;
    for (const StepLoss& l : ReadLosses(dir_ / "metrics.jsonl")) {
      for (const auto& [segment, stop] : chain) {
        if (l.generation != segment.generation || l.step > stop) continue;
        if (!reference.count(l.step)) {
          ADD_FAILURE() << "the replay has no step " << l.step;
          return compared;
        }
        const double expected = reference.at(l.step);
        EXPECT_LE(std::abs(l.loss - expected) / expected, 1e-5)
            << "generation " << l.generation << " step " << l.step << ": " << l.loss
            << " vs the replay's " << expected;
        ++compared;
      }
    }
    std::printf("%zu losses of %zu generation(s) compared with a fault-free replay\n", compared,
                chain.size());
    return compared;
  }
};

DaemonKillCost MemoryTierCluster::KillADaemonAfterStep25(
    const std::string& ckpt_lines, bool memory_tier, int victim,
    std::map<int, std::vector<std::string>> env) {
  DaemonKillCost cost;
  for (int id = 1; id <= 3; ++id) StartNode(id, 2, "", env[id]);
  WaitFor(1, "a view of 3 members", [](const Json& s) { return Members(s) == 3; });
  ProcessOutcome submitted = Ctl({"submit", JobFile(ckpt_lines)});
  EXPECT_EQ(submitted.exit_code, 0) << submitted.output;
  // Past step 25, with the durable checkpoint of step 20 committed (it is written in the
  // background: under load it commits some steps later).
  auto durable = ckpt::OpenStorage((dir_ / "ckpt").string());
  EXPECT_TRUE(durable.ok()) << durable.status().ToString();
  Json s = WaitFor(1, "training on 3 nodes past step 25 with checkpoint 20 committed",
                   [&](const Json& s) {
                     if (Step(s) < 25 || WorkerPids(s, victim).size() != 2) return false;
                     auto committed = ckpt::ListCommitted(**durable);
                     return committed.ok() && !committed->empty() && committed->front() >= 20;
                   });
  for (const Json& n : s["nodes"])
    EXPECT_EQ(n["memory_tier"]["bytes"].get<int64_t>() > 0, memory_tier) << n.dump();
  const std::string gen_before = Generation(s);
  const int64_t step_before = Step(s);
  const auto kill_at = MonoClock::now();
  EXPECT_TRUE(nodes_[victim]->Signal(SIGKILL).ok());
  s = WaitFor(1, "training on 2 nodes", [&](const Json& s) {
    return Members(s) == 2 && Generation(s) != gen_before && Step(s) >= 1 && OfTheView(s);
  });
  cost.seconds = std::chrono::duration<double>(MonoClock::now() - kill_at).count();
  for (int id = 1; id <= 3; ++id) {
    if (id == victim) continue;
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
  cost.from_memory = SomeRankZeroLogSays("resuming from memory snapshot");
  std::printf(
      "%s: kill -9 of a daemon after step %lld: %.2f s until a step of generation %s "
      "was seen; %s\n",
      memory_tier ? "memory tier" : "durable only", static_cast<long long>(step_before),
      cost.seconds, Generation(s).c_str(), cost.recovery.c_str());
  ProcessOutcome stopped = Ctl({"stop"});
  EXPECT_EQ(stopped.exit_code, 0) << stopped.output;
  WaitFor(1, "no workers after ringctl stop", [](const Json& s) {
    for (const Json& n : s["nodes"])
      if (n.contains("workers") && !n["workers"].empty()) return false;
    return true;
  });
  cost.metrics_lost = MostStepsTrainedAgain();
  return cost;
}

// The memory tier (docs/daemon.md): with a snapshot in the daemons' memory after every step and
// a durable checkpoint only every 20, kill -9 of a daemon costs at most one step.
TEST_F(MemoryTierCluster, RecoversFromTheMemoryTierAfterADaemonKill) {
  const DaemonKillCost cost = KillADaemonAfterStep25("memory_every = 1\n", true);
  ASSERT_GE(cost.lost, 0) << "no recovery line\n" << Logs();
  EXPECT_LE(cost.lost, 1) << cost.recovery << "\n" << Logs();
  EXPECT_TRUE(cost.from_memory) << Logs();
  EXPECT_LE(cost.metrics_lost, 1) << cost.recovery;
}

// The successor of rank 0's daemon (node 2 follows node 1 in the ring) refuses every copy of a
// memory snapshot file, as a successor that died does until the view drops it: node 1 forwards
// its workers' files to node 3 instead, so its snapshots still commit every step and are held
// by two live members; then node 2 dies (kill -9) and the job loses at most one step. Before
// copies went past an unreachable successor, every snapshot of node 1's ranks failed and the
// job went back to the durable checkpoint of step 20.
TEST_F(MemoryTierCluster, LosesAtMostOneStepWhenTheSuccessorRefusedCopiesAndDies) {
  const DaemonKillCost cost =
      KillADaemonAfterStep25("memory_every = 1\n", true, /*victim=*/2,
                             {{2, {"RINGTRAIN_FAULTS=daemon.snapshot.replica_put=error"}}});
  ASSERT_GE(cost.lost, 0) << "no recovery line\n" << Logs();
  EXPECT_LE(cost.lost, 1) << cost.recovery << "\n" << Logs();
  EXPECT_TRUE(cost.from_memory) << Logs();
  EXPECT_GE(cost.metrics_lost, 0) << "no generation followed another in the metrics";
  EXPECT_LE(cost.metrics_lost, 1) << cost.recovery;
  EXPECT_FALSE(LogLines(1, "trying the next member").empty()) << "node 1 never went past node 2\n"
                                                              << Logs();
  EXPECT_GT(ExpectTheLossesOfAFaultFreeReplay(), 25u);
}

// The same without the memory tier: the job goes back to the durable checkpoint of step 20.
TEST_F(MemoryTierCluster, RecoversFromTheDurableCheckpointWithoutTheMemoryTier) {
  const DaemonKillCost cost = KillADaemonAfterStep25("", false);
  ASSERT_GE(cost.lost, 0) << "no recovery line\n" << Logs();
  EXPECT_FALSE(cost.from_memory);
  const size_t at = cost.recovery.find("resumed at step ");
  ASSERT_NE(at, std::string::npos) << cost.recovery;
  const int64_t resumed = std::atoll(cost.recovery.c_str() + at + 16);  // "resumed at step N,"
  // Killed after step 25: back to the durable checkpoint of step 20 (or of 40, when the kill
  // came late under load), every step reported since it lost.
  EXPECT_TRUE(resumed == 21 || resumed == 41) << cost.recovery;
  // "(the last step reported here was M)" or "... on rank 0's previous node was M)".
  const size_t reported = cost.recovery.find("(the last step reported ");
  ASSERT_NE(reported, std::string::npos) << cost.recovery;
  const size_t was = cost.recovery.find(" was ", reported);
  ASSERT_NE(was, std::string::npos) << cost.recovery;
  const int64_t last = std::atoll(cost.recovery.c_str() + was + 5);
  EXPECT_EQ(cost.lost, last - (resumed - 1)) << cost.recovery;
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
    return Members(s) == 2 && Generation(s) != gen_before && Step(s) >= 1 && OfTheView(s) &&
           WorkerPids(s, 1).size() == 2;
  });
  EXPECT_TRUE(WorkerPids(s, 3).empty()) << s.dump();
  EXPECT_TRUE(SomeRankZeroLogSays("resuming from memory snapshot")) << Logs();
  ProcessOutcome stopped = Ctl({"stop"});
  EXPECT_EQ(stopped.exit_code, 0) << stopped.output;
}

// Rank 0 dies (a fault point: kill -9 of itself) in the data write of the final step's durable
// checkpoint, after that step's memory snapshot committed (the durable save waits 3 s first):
// the next generation resumes from the snapshot at the last step and trains none. It must still
// leave the final checkpoint in ckpt.dir, and the job must be recorded finished at its last
// step — before, the run ended with ckpt.dir one save behind and the job "finished" at the last
// step a fire-and-forget progress report had delivered.
TEST_F(MemoryTierCluster, ARunThatEndsOnAMemorySnapshotSavesItsLastCheckpointDurably) {
  const std::vector<std::string> faults = {
      "RINGTRAIN_FAULTS_RANK=0",
      "RINGTRAIN_FAULTS=ckpt.save.before_data=delay:3000,ckpt.save.after_data=crash@2"};
  for (int id = 1; id <= 3; ++id) StartNode(id, 2, "", faults);
  WaitFor(1, "a view of 3 members", [](const Json& s) { return Members(s) == 3; });
  ProcessOutcome submitted = Ctl({"submit", JobFile("memory_every = 1\n", 40)});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  const Json s = WaitFor(1, "the job finished", [](const Json& s) {
    return s.contains("job") && s["job"]["desire"] == "finished";
  });
  EXPECT_EQ(s["job"]["finished_step"].get<int64_t>(), 40) << s.dump();
  auto durable = ckpt::OpenStorage((dir_ / "ckpt").string());
  ASSERT_TRUE(durable.ok()) << durable.status().ToString();
  auto committed = ckpt::ListCommitted(**durable);
  ASSERT_TRUE(committed.ok()) << committed.status().ToString();
  ASSERT_FALSE(committed->empty());
  EXPECT_EQ(committed->front(), 40) << Logs();
  // The path under test was taken: some rank 0 resumed from the memory snapshot of step 40.
  EXPECT_TRUE(SomeRankZeroLogSays("resuming from memory snapshot 40 ")) << Logs();
}

// A node joining a job that keeps memory snapshots: the planned stop that takes it in needs no
// checkpoint (every member stays, so the snapshots do): the ranks stop after step S on its
// memory snapshot, the next generation resumes from it and loses nothing, ckpt.dir gets no
// checkpoint of S, and the losses equal a fault-free replay of the layout history.
TEST_F(MemoryTierCluster, AJoiningNodeIsTakenInOnTheMemorySnapshot) {
  StartNode(1, 2);
  StartNode(2, 2);
  WaitFor(1, "a view of 2 members", [](const Json& s) { return Members(s) == 2; });
  ProcessOutcome submitted = Ctl({"submit", JobFile("memory_every = 1\n", 200)});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  Json s = WaitFor(1, "training on 2 nodes past step 5", [](const Json& s) {
    return Step(s) >= 5 && WorkerPids(s, 1).size() == 2 && WorkerPids(s, 2).size() == 2;
  });
  const std::string before = Generation(s);
  StartNode(3, 2);
  s = WaitFor(1, "training on 3 nodes", [&](const Json& s) {
    return Generation(s) != before && WorkerPids(s, 3).size() == 2 && Step(s) >= 1;
  });
  std::vector<std::string> stops;
  for (int id = 1; id <= 3; ++id)
    for (const std::string& line : LogLines(id, "its memory snapshot committed in memtier://"))
      stops.push_back(line);
  ASSERT_EQ(stops.size(), 1u) << Logs();
  const size_t at = stops[0].find("stopped after step ");
  ASSERT_NE(at, std::string::npos) << stops[0];
  const int64_t stopped = std::atoll(stops[0].c_str() + at + 19);
  std::vector<std::string> recoveries;
  for (int id = 1; id <= 3; ++id)
    for (const std::string& line : LogLines(id, "recovery: node(s) 3 joined"))
      recoveries.push_back(line);
  ASSERT_FALSE(recoveries.empty()) << Logs();
  for (const std::string& line : recoveries) {
    EXPECT_NE(line.find("loaded the memory snapshot of step " + std::to_string(stopped) + ","),
              std::string::npos)
        << line;
    EXPECT_NE(line.find("steps lost 0 "), std::string::npos) << line;
  }
  WaitFor(1, "the job finished",
          [](const Json& s) { return s.contains("job") && s["job"]["desire"] == "finished"; });
  auto durable = ckpt::OpenStorage((dir_ / "ckpt").string());
  ASSERT_TRUE(durable.ok()) << durable.status().ToString();
  auto committed = ckpt::ListCommitted(**durable);
  ASSERT_TRUE(committed.ok()) << committed.status().ToString();
  if (stopped % 20 != 0) {
    EXPECT_EQ(std::count(committed->begin(), committed->end(), stopped), 0)
        << "the planned stop saved a checkpoint of step " << stopped;
  }
  EXPECT_GT(ExpectTheLossesOfAFaultFreeReplay(), 50u);
}

}  // namespace
}  // namespace rt::daemon
