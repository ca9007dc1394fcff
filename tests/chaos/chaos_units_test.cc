// Units of bench/chaos/: the seeded schedule, the fault list parser, the checkpoint folder's
// phases and the flipped byte (on real files), and the summary's arithmetic against figures
// worked out by hand.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "bench/chaos/ckpt_files.h"
#include "bench/chaos/faults.h"
#include "bench/chaos/replay.h"
#include "bench/chaos/report.h"

namespace rt::chaos {
namespace {

namespace fs = std::filesystem;

TEST(FaultScheduleTest, SameSeedSameOrderAndEveryKindOncePerRound) {
  const std::vector<FaultKind>& all = AllFaultKinds();
  FaultSchedule a(42, all), b(42, all), c(43, all);
  std::vector<FaultKind> first, second, third;
  for (size_t i = 0; i < 3 * all.size(); ++i) {
    first.push_back(a.Next());
    second.push_back(b.Next());
    third.push_back(c.Next());
  }
  EXPECT_EQ(first, second);
  EXPECT_NE(first, third);
  for (size_t round = 0; round < 3; ++round) {
    std::vector<FaultKind> kinds(first.begin() + round * all.size(),
                                 first.begin() + (round + 1) * all.size());
    std::sort(kinds.begin(), kinds.end());
    EXPECT_EQ(kinds, all) << "round " << round;
  }
  for (int i = 0; i < 100; ++i) {
    const int64_t v = a.Between(3, 5);
    EXPECT_TRUE(v >= 3 && v <= 5) << v;
    EXPECT_LT(a.Pick(4), 4u);
  }
}

TEST(FaultScheduleTest, ParsesNamesAndRefusesUnknownOnes) {
  auto kinds = ParseFaultKinds("kill-worker,flip-byte,kill-worker");
  ASSERT_TRUE(kinds.ok()) << kinds.status().ToString();
  EXPECT_EQ(*kinds, (std::vector<FaultKind>{FaultKind::kKillWorker, FaultKind::kFlipByte}));
  EXPECT_EQ(ParseFaultKinds("all")->size(), AllFaultKinds().size());
  for (FaultKind k : AllFaultKinds()) EXPECT_EQ(*ParseFaultKinds(FaultName(k)), std::vector{k});
  auto bad = ParseFaultKinds("kill-worker,partition");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("'partition'"), std::string::npos);
  EXPECT_FALSE(ParseFaultKinds("").ok());
}

class CkptFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("chaos_ckpt_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name) << text;
  }
  std::string Read(const std::string& name) {
    std::ifstream in(dir_ / name);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }
  fs::path dir_;
};

TEST_F(CkptFilesTest, CommittedStepsAndSavePhases) {
  const std::string d = dir_.string();
  EXPECT_TRUE(CommittedSteps(d).empty());
  EXPECT_EQ(NewestIntact(d, {}), -1);
  Write("latest", "step-000000000020\nstep-000000000010\n");
  Write("step-000000000020/MANIFEST", "m");
  EXPECT_EQ(CommittedSteps(d), (std::vector<int64_t>{20, 10}));
  EXPECT_EQ(NewestIntact(d, {20}), 10);
  EXPECT_EQ(NewestIntact(d, {10, 20}), -1);
  // A save of step 30: rank 1's data is complete, its fragment not yet.
  Write("step-000000000030/rank-00000.data", "abc");
  Write("step-000000000030/rank-00000.frag", "f");
  Write("step-000000000030/rank-00001.data", "abc");
  Write("step-000000000030/rank-00001.frag.tmp.7.1", "f");
  auto shard = FindShardWrite(d);
  ASSERT_TRUE(shard.has_value());
  EXPECT_EQ(shard->step, 30);
  EXPECT_EQ(shard->rank, 1);
  EXPECT_FALSE(FindManifestWrite(d, 2).has_value());
  Write("step-000000000030/rank-00001.frag", "f");
  EXPECT_FALSE(FindShardWrite(d).has_value());
  auto manifest = FindManifestWrite(d, 2);
  ASSERT_TRUE(manifest.has_value());
  EXPECT_EQ(manifest->step, 30);
  EXPECT_FALSE(FindManifestWrite(d, 3).has_value());
  // Committed folders are never "in a phase".
  Write("step-000000000030/MANIFEST", "m");
  Write("latest", "step-000000000030\nstep-000000000020\n");
  EXPECT_FALSE(FindManifestWrite(d, 2).has_value());
}

TEST_F(CkptFilesTest, FlipsExactlyOneByte) {
  Write("step-000000000010/rank-00000.data", "");
  Write("step-000000000010/rank-00001.data", "0123456789");
  auto where = FlipByte(dir_.string(), 10, 5, 13);
  ASSERT_TRUE(where.ok()) << where.status().ToString();
  EXPECT_EQ(*where, "step-000000000010/rank-00001.data at byte 3");
  std::string expected = "0123456789";
  expected[3] = static_cast<char>(expected[3] ^ 0xFF);
  EXPECT_EQ(Read("step-000000000010/rank-00001.data"), expected);
  EXPECT_EQ(FlipByte(dir_.string(), 20, 0, 0).status().code(), StatusCode::kNotFound);
}

TEST(SummaryTest, FiguresFromRecords) {
  CampaignResult r;
  r.baseline_steps_per_s = 10;
  r.job_steps = 500;  // 50 s fault-free
  r.chaos_wall_s = 100;
  r.recoveries = {{"1.2.0", 31, "a"}, {"1.2.1", 21, "b"}};
  auto fault = [](FaultKind k, double rec, std::string before, std::string after, int64_t step,
                  int64_t committed) {
    FaultRecord f;
    f.kind = k;
    f.recovery_s = rec;
    f.gen_before = std::move(before);
    f.gen_after = std::move(after);
    f.step_before = step;
    f.committed_before = committed;
    return f;
  };
  // Resumed from 30 with 30 committed: nothing lost, 7 repeated.
  r.faults.push_back(fault(FaultKind::kKillWorker, 2, "1.1.0", "1.2.0", 37, 30));
  // Resumed from 20 although 30 was committed and intact: 10 committed steps lost.
  r.faults.push_back(fault(FaultKind::kKillDaemon, 4, "1.2.0", "1.2.1", 33, 30));
  // Same generation after a SIGSTOP: no restart.
  r.faults.push_back(fault(FaultKind::kStopWorker, 1, "1.2.1", "1.2.1", 40, 30));
  FaultRecord hang = fault(FaultKind::kStopDaemon, -1, "1.2.1", "", 41, 30);
  hang.hang = true;
  r.faults.push_back(hang);
  FaultRecord skipped = fault(FaultKind::kDiskFull, -1, "", "", 0, 0);
  skipped.skipped = "not root";
  r.faults.push_back(skipped);
  r.corrupted = {40};
  r.verified = {{50, true, false, ""},
                {40, false, true, "crc"},
                {30, false, false, "crc"},
                {20, false, false, "Unavailable", false}};  // no daemon could serve the check
  r.flips_detected = 1;

  const Summary s = Summarize(r);
  EXPECT_EQ(s.injected.size(), 4u);
  EXPECT_EQ(s.skipped.at("disk-full"), 1);
  EXPECT_EQ(s.recoveries, 3);
  EXPECT_DOUBLE_EQ(s.recovery_median_s, 2);
  EXPECT_DOUBLE_EQ(s.recovery_p95_s, 4);
  EXPECT_DOUBLE_EQ(s.recovery_max_s, 4);
  EXPECT_EQ(s.recovery_by_kind.at("kill-daemon"), (std::pair<double, double>{4, 4}));
  EXPECT_FALSE(s.recovery_by_kind.contains("stop-daemon"));  // hung: no recovery time
  EXPECT_EQ(s.hangs, 1);
  EXPECT_EQ(s.restarts, 2);
  EXPECT_EQ(s.committed_steps_lost, 10);
  EXPECT_EQ(s.steps_repeated, 7 + 13);
  EXPECT_EQ(s.checkpoints_verified, 1);
  EXPECT_EQ(s.checkpoints_refused, 2);
  EXPECT_EQ(s.corrupt_accepted, 1);  // step 30 was refused although the campaign never touched it
  EXPECT_EQ(s.checkpoints_unchecked, 1);  // step 20: neither passed nor refused
  EXPECT_DOUBLE_EQ(s.throughput_share, 0.5);
  EXPECT_DOUBLE_EQ(s.throughput_share_net, 50.0 / 93.0);
  const std::string text = SummaryText(r, s);
  EXPECT_NE(text.find("committed steps lost: 10"), std::string::npos) << text;
  EXPECT_NE(text.find("4 committed at the end, 1 verified, 2 refused (corrupted by the campaign: "
                      "1), 1 could not be checked"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("cut off from a majority: 0"), std::string::npos) << text;
  EXPECT_EQ(SummaryJson(r, s)["faults_injected"], 4);
}

// Partitions are counted by kind; daemons that trained while cut off are summed over the faults
// and named in the summary; a campaign without namespaces says why it ran none.
TEST(SummaryTest, CountsPartitionsByKindAndDaemonsThatTrainedWhileCutOff) {
  CampaignResult r;
  r.recoveries = {{"1.3.0", 41, "view change"}};
  FaultRecord one;
  one.kind = FaultKind::kPartitionOne;
  one.gen_before = "1.2.0";
  one.gen_after = "1.3.0";
  one.step_before = 45;
  one.committed_before = 40;
  one.recovery_s = 2;
  one.rejoin_s = 3;
  FaultRecord halves = one;
  halves.kind = FaultKind::kPartitionHalves;
  halves.gen_after = "1.2.0";  // no majority: the same generation went on after the heal
  halves.minority_trained = 2;
  FaultRecord flap = halves;
  flap.kind = FaultKind::kPartitionFlap;
  flap.minority_trained = 0;
  r.faults = {one, halves, flap, one};
  const Summary s = Summarize(r);
  EXPECT_EQ(s.injected.at("partition-one"), 2);
  EXPECT_EQ(s.injected.at("partition-halves"), 1);
  EXPECT_EQ(s.injected.at("partition-flap"), 1);
  EXPECT_EQ(s.minority_trained, 2);
  EXPECT_EQ(s.restarts, 2);              // the two partition-one faults: a new generation
  EXPECT_EQ(s.committed_steps_lost, 0);  // resumed from 40 with 40 committed
  EXPECT_EQ(s.steps_repeated, 2 * 5);
  EXPECT_NE(SummaryText(r, s).find("cut off from a majority: 2"), std::string::npos);
  const daemon::Json json = SummaryJson(r, s);
  EXPECT_EQ(json["minority_trained"], 2);
  EXPECT_EQ(json["faults"][1]["minority_trained"], 2);
  r.partitions_off = "not run: network namespaces need root (ip netns add)";
  EXPECT_NE(SummaryText(r, s).find("partitions: not run: network namespaces need root"),
            std::string::npos);
  EXPECT_TRUE(IsPartition(FaultKind::kPartitionFlap));
  EXPECT_FALSE(IsPartition(FaultKind::kKillDaemon));
}

// The layout history follows resumes back to the run that wrote the loaded state (its run id),
// through the memory tier even when the writer and the resumer reached it through different
// daemons (memtier://ADDRESS/job-N names one store), through the durable checkpoints, and past a
// commit its writer never logged; a resume from a run nobody logged is NotFound.
TEST(ChaosReplay, LayoutHistoryFollowsResumesToTheRunThatWroteTheState) {
  const std::string disk = "/tmp/c/ckpt/chaos";
  std::vector<TrainedGeneration> gens(4);
  gens[0] = {"2.1.1",
             "/n1/jobs/chaos-2.1.1",
             "tp=1,dp=3",
             3,
             -1,
             "",
             "",
             "run-a",
             {{10, disk, "2026-11-27 04:00:01.000"},
              {12, "memtier://127.0.0.1:4001/job-2", "2026-11-27 04:00:02.000"}}};
  // Resumed from step 12 but killed before it trained further: nobody resumed from its state.
  gens[1] = {"2.1.2",
             "/n3/jobs/chaos-2.1.2",
             "tp=1,dp=4",
             4,
             12,
             "memtier://127.0.0.1:4003/job-2",
             "run-a",
             "run-b",
             {{13, "memtier://127.0.0.1:4003/job-2", "2026-11-27 04:00:02.500"}}};
  gens[2] = {"2.2.2",
             "/n2/jobs/chaos-2.2.2",
             "tp=1,dp=2",
             2,
             12,
             "memtier://127.0.0.1:4002/job-2",
             "run-a",
             "run-c",
             {{20, disk, "2026-11-27 04:00:05.000"}}};
  gens[3] = {"2.3.3",
             "/n1/jobs/chaos-2.3.3",
             "tp=1,dp=3",
             3,
             20,
             disk,
             "run-c",
             "run-d",
             {{30, disk, "2026-11-27 04:00:09.000"}}};
  Result<std::vector<HistorySegment>> h = LayoutHistory(gens, 30, disk);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->size(), 3u);
  EXPECT_EQ((*h)[0].generation, "2.1.1");
  EXPECT_EQ((*h)[0].to, 12);
  EXPECT_EQ((*h)[1].generation, "2.2.2");
  EXPECT_EQ((*h)[1].layout, "tp=1,dp=2");
  EXPECT_EQ((*h)[1].from, 12);
  EXPECT_EQ((*h)[2].from, 20);
  EXPECT_EQ((*h)[2].to, 30);
  EXPECT_EQ(StoreOf("memtier://127.0.0.1:4002/job-2"), "memtier://job-2");
  EXPECT_EQ(StoreOf(disk), disk);
  EXPECT_EQ(StoreOf("ringfs://10.0.0.2:7701/chaos"), "ringfs:///chaos");
  // Step 11 was committed by run-a, which never logged it (killed right after): still run-a's.
  gens[2].resumed_from = 11;
  h = LayoutHistory(gens, 30, disk);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ((*h)[0].generation, "2.1.1");
  EXPECT_EQ((*h)[0].to, 11);
  // Step 13's state of run-b, whose commit nobody logged and whose time came last: still run-b's.
  gens[2].resumed_from = 13;
  gens[2].resumed_run = "run-b";
  h = LayoutHistory(gens, 30, disk);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->size(), 4u);
  EXPECT_EQ((*h)[1].generation, "2.1.2");
  EXPECT_EQ((*h)[1].from, 12);
  EXPECT_EQ((*h)[1].to, 13);
  // A run no generation logged: unknown.
  gens[2].resumed_run = "run-x";
  h = LayoutHistory(gens, 30, disk);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kNotFound);
  EXPECT_NE(h.status().message().find("run-x"), std::string::npos) << h.status().ToString();
}

// A store campaign names every time its newest committed checkpoint went back (a committed
// checkpoint lost before a newer commit retired it); a folder campaign has no such line.
TEST(SummaryTest, AStoreCampaignNamesCommittedCheckpointsThatWentMissing) {
  CampaignResult r;
  EXPECT_EQ(SummaryText(r, Summarize(r)).find("gone from the store"), std::string::npos);
  r.checkpoints = "the daemons' embedded chunk store (ringfs:///chaos, replication 3)";
  EXPECT_NE(SummaryText(r, Summarize(r)).find("retired them: 0"), std::string::npos);
  r.committed_regressions = {
      "at 12.0 s the store's newest committed checkpoint went back from step 120 to 110"};
  const std::string text = SummaryText(r, Summarize(r));
  EXPECT_NE(text.find("retired them: 1\n  at 12.0 s the store's newest committed checkpoint went "
                      "back from step 120 to 110"),
            std::string::npos)
      << text;
  EXPECT_EQ(SummaryJson(r, Summarize(r))["committed_regressions"].size(), 1u);
}

}  // namespace
}  // namespace rt::chaos
