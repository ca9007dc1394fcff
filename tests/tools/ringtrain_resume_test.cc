// Checkpoints end to end with the real binaries, real files and a real SIGKILL: `ringtrain train`
// saves every 5 steps, dies by SIGKILL after step 12 (the fault point parallel.train.before_step
// armed with `crash` for its 13th hit, in every rank, or kill -9 from outside), and `--resume`
// continues from the newest committed checkpoint. Same layout: the per-step losses and the final
// weights are bitwise those of the uninterrupted run. Another layout: within 1e-5 relative of the
// uninterrupted single process. A corrupted newest checkpoint: every rank falls back to the
// previous one and says so.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/fault.h"
#include "base/subprocess.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"
#include "ckpt/storage.h"
#include "tests/tools/run_folder.h"

namespace rt {
namespace {

constexpr int kSteps = 20;
const char* kCrash = "RINGTRAIN_FAULTS=parallel.train.before_step=crash@13 ";

struct Exec {
  int code = -1;  // exit status; -1 when killed by a signal or not run
  std::string output;
};

// Runs `env ringtrain --log-level info args` through the shell and collects its output.
Exec RunRingtrain(const std::string& env, const std::string& args) {
  Exec e;
  const std::string cmd = env + RINGTRAIN_BIN + std::string(" --log-level info ") + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return e;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) e.output.append(buf, n);
  const int status = pclose(p);
  e.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return e;
}

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class ResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fault::Enabled()) GTEST_SKIP() << "fault points are compiled out of this build";
    dir_ = std::filesystem::temp_directory_path() /
           ("ringtrain_resume_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(rt::testing::MakeRunFolder(dir_).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `train` of the tiny config for kSteps steps (cosine schedule over them, micro_batches 2),
  // metrics and final weights under `name`, checkpoints in ck/ when `every` > 0 or resuming.
  std::string Train(const std::string& name, const std::string& layout, int ranks, int every,
                    bool resume, bool async = true) const {
    std::string a = "train --config " + std::string(RINGTRAIN_SOURCE_DIR) +
                    "/configs/tiny.toml --set data.dir=" + (dir_ / "data").string() +
                    " --set eval.every=0 --set train.micro_batches=2 --set train.log_every=5"
                    " --set optim.warmup_steps=4 --steps " +
                    std::to_string(kSteps) +
                    " --set metrics.path=" + (dir_ / (name + ".jsonl")).string();
    if (every > 0 || resume) a += " --set ckpt.dir=" + (dir_ / "ck").string();
    if (every > 0) a += " --set ckpt.every=" + std::to_string(every);
    if (!async) a += " --set ckpt.async=false";
    a += extra_;
    if (resume) a += " --resume";
    if (layout.empty()) return a + " --out " + (dir_ / (name + ".safetensors")).string();
    return a + " --layout " + layout + " --ranks " + std::to_string(ranks);
  }

  // Per step, the last loss the metrics file `name` recorded for it (a resumed run appends).
  std::map<int, double> Losses(const std::string& name) const {
    return rt::testing::StepLosses(dir_ / (name + ".jsonl"));
  }

  // Runs `layout` (one process when empty) with checkpoints every 5 steps (in the background
  // unless `async` is false) until SIGKILL after step 12, then resumes under `resume_layout`.
  // Returns the step the resumed run started from (-1 when it did not say).
  int CrashAndResume(const std::string& layout, int ranks, const std::string& resume_layout,
                     int resume_ranks, bool async) {
    const Exec crashed = RunRingtrain(kCrash, Train("run", layout, ranks, 5, false, async));
    EXPECT_NE(crashed.code, 0) << crashed.output;
    const std::map<int, double> before = Losses("run");
    // Rank 0 kills itself the instant step 13 begins: the lines of steps 11 and 12 may still
    // be in the metrics writer's queue then (parallel/run_metrics.h), but the run wrote every
    // line out before the checkpoint of step 10 started.
    EXPECT_GE(before.rbegin()->first, 10) << crashed.output;
    EXPECT_LE(before.rbegin()->first, 12) << crashed.output;
    const Exec resumed =
        RunRingtrain("", Train("run", resume_layout, resume_ranks, 5, true, async));
    EXPECT_EQ(resumed.code, 0) << resumed.output;
    const std::string said = "resumed from the checkpoint of step ";
    const size_t at = resumed.output.find(said);
    EXPECT_NE(at, std::string::npos) << resumed.output;
    return at == std::string::npos ? -1 : std::atoi(resumed.output.c_str() + at + said.size());
  }

  std::filesystem::path dir_;
  std::string extra_;  // more arguments for Train
};

TEST_F(ResumeTest, OneProcessKilledAndResumedIsBitwiseTheUninterruptedRun) {
  for (const char* order : {"shuffled", "sequential"}) {
    extra_ = std::string(" --set data.order=") + order;
    std::filesystem::remove_all(dir_ / "ck");
    std::filesystem::remove(dir_ / "run.jsonl");
    const Exec full = RunRingtrain("", Train("full", "", 1, 0, false));
    ASSERT_EQ(full.code, 0) << full.output;
    // Saved in the background: step 10's save may not have committed before the kill.
    const int from = CrashAndResume("", 1, "", 1, true);
    EXPECT_TRUE(from == 5 || from == 10) << order << " " << from;
    EXPECT_EQ(Losses("run"), Losses("full")) << order;
    EXPECT_EQ(Losses("run").size(), static_cast<size_t>(kSteps));
    EXPECT_EQ(ReadAll(dir_ / "run.safetensors"), ReadAll(dir_ / "full.safetensors")) << order;
    // keep = 2: the checkpoints of steps 15 and 20 remain.
    EXPECT_TRUE(std::filesystem::exists(dir_ / "ck/step-000000000020/MANIFEST"));
    EXPECT_FALSE(std::filesystem::exists(dir_ / "ck/step-000000000005"));
  }
}

// kill -9 from outside, of the launcher and every worker at once (one process group), while
// they stand before step 13 (parallel.train.before_step armed with a long delay) and the
// background save of step 10 may still be running; the resumed run is bitwise the uninterrupted
// one.
TEST_F(ResumeTest, DistributedRunKilledFromOutsideResumesBitwise) {
  const Exec full = RunRingtrain("", Train("full", "tp=2,dp=2,zero=3", 4, 0, false));
  ASSERT_EQ(full.code, 0) << full.output;
  extra_ = " --set ckpt.codec=zstd";
  const std::string cmd = std::string("RINGTRAIN_FAULTS=") +
                          "parallel.train.before_step=delay:600000@13 " + RINGTRAIN_BIN +
                          " --log-level warn " + Train("run", "tp=2,dp=2,zero=3", 4, 5, false) +
                          " >" + (dir_ / "killed.log").string() + " 2>&1";
  SpawnOptions spawn;
  spawn.argv = {"/bin/sh", "-c", cmd};
  spawn.env = EnvironmentWithout({});
  Result<std::unique_ptr<SyncChild>> child = SyncChild::Start(spawn);  // its own process group
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  // Until rank 0 logged step 12 and some checkpoint is committed (at most 120 s).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline &&
         !(Losses("run").count(12) && std::filesystem::exists(dir_ / "ck/latest")))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const ChildExit exit = (*child)->Kill();  // the launcher and every worker at once
  EXPECT_FALSE(exit.exited) << exit.Describe() << ": " << ReadAll(dir_ / "killed.log");
  ASSERT_EQ(Losses("run").rbegin()->first, 12) << ReadAll(dir_ / "killed.log");
  const Exec resumed = RunRingtrain("", Train("run", "tp=2,dp=2,zero=3", 4, 5, true));
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_EQ(Losses("run"), Losses("full"));
}

TEST_F(ResumeTest, DistributedKilledAndResumedIsBitwiseTheUninterruptedRun) {
  const Exec full = RunRingtrain("", Train("full", "dp=2,zero=1", 2, 0, false));
  ASSERT_EQ(full.code, 0) << full.output;
  extra_ = " --set ckpt.codec=bgzstd";  // byte planes, then zstd
  const int from = CrashAndResume("dp=2,zero=1", 2, "dp=2,zero=1", 2, true);
  EXPECT_TRUE(from == 5 || from == 10) << from;
  auto storage = ckpt::OpenStorage((dir_ / "ck").string());
  ASSERT_TRUE(storage.ok());
  auto reader = ckpt::CheckpointReader::Open(*storage, kSteps);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  for (const ckpt::TensorEntry& t : (*reader)->manifest().tensors)
    for (const ckpt::StoredPiece& p : t.pieces)
      EXPECT_EQ(p.codec, ckpt::Codec::kByteGroupedZstd) << t.name;
  EXPECT_EQ(Losses("run"), Losses("full"));
}

// `--stop-after 7` ends the run after step 7 with that step's checkpoint and without touching
// train.steps, so `--resume` continues the full run: the same cosine schedule (warm-up 4 over
// 20 steps) and data order, bitwise, in one process and on two ranks.
TEST_F(ResumeTest, StopAfterThenResumeIsBitwiseTheUninterruptedRun) {
  for (const auto& [layout, ranks] : {std::pair<std::string, int>{"", 1}, {"dp=2,zero=1", 2}}) {
    std::filesystem::remove_all(dir_ / "ck");
    std::filesystem::remove(dir_ / "run.jsonl");
    extra_ = "";
    const Exec full = RunRingtrain("", Train("full", layout, ranks, 0, false));
    ASSERT_EQ(full.code, 0) << full.output;
    extra_ = " --stop-after 7";
    const Exec stopped = RunRingtrain("", Train("run", layout, ranks, 1000, false));
    ASSERT_EQ(stopped.code, 0) << stopped.output;
    EXPECT_NE(stopped.output.find("stopped after step 7 (--stop-after"), std::string::npos)
        << stopped.output;
    EXPECT_EQ(Losses("run").size(), 7u) << layout;
    EXPECT_EQ(ReadAll(dir_ / "ck/latest"), ckpt::EncodeLatest({7})) << layout;
    extra_ = "";
    const Exec resumed = RunRingtrain("", Train("run", layout, ranks, 1000, true));
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    EXPECT_EQ(Losses("run"), Losses("full")) << layout;
  }
}

// Each move: killed under the first layout, resumed under the second; the losses after the
// checkpoint within 1e-5 relative of one uninterrupted process.
TEST_F(ResumeTest, ReshardedResumeMatchesTheUninterruptedRun) {
  const Exec full = RunRingtrain("", Train("full", "", 1, 0, false));
  ASSERT_EQ(full.code, 0) << full.output;
  const std::map<int, double> reference = Losses("full");
  struct Move {
    std::string from;
    int from_ranks;
    std::string to;
    int to_ranks;
  };
  for (const Move& m :
       {Move{"tp=2,pp=2", 4, "dp=4,zero=3", 4}, Move{"dp=2,zero=1", 2, "pp=2,tp=2", 4},
        Move{"", 1, "tp=2,dp=2,zero=2", 4}, Move{"dp=4,zero=3,hsdp_shard=2", 4, "", 1}}) {
    const std::string what =
        (m.from.empty() ? "one process" : m.from) + " -> " + (m.to.empty() ? "one process" : m.to);
    std::filesystem::remove_all(dir_ / "ck");
    std::filesystem::remove(dir_ / "run.jsonl");
    // Synchronous saves: step 10 committed before step 11 started.
    EXPECT_EQ(CrashAndResume(m.from, m.from_ranks, m.to, m.to_ranks, false), 10) << what;
    const std::map<int, double> got = Losses("run");
    ASSERT_EQ(got.size(), static_cast<size_t>(kSteps)) << what;
    double worst = 0;
    for (const auto& [step, loss] : got)
      worst = std::max(worst, std::abs(loss - reference.at(step)) / reference.at(step));
    EXPECT_LE(worst, 1e-5) << what;
    std::printf("killed at 12, resumed %-44s losses max rel %.1e\n", what.c_str(), worst);
  }
}

// One flipped byte in the newest checkpoint's data: the CRC catches it on the rank that reads
// it, every rank falls back to the previous checkpoint together, and the run still reproduces the
// uninterrupted losses.
TEST_F(ResumeTest, CorruptNewestCheckpointFallsBackTogether) {
  const Exec full = RunRingtrain("", Train("full", "dp=2,zero=1", 2, 0, false));
  ASSERT_EQ(full.code, 0) << full.output;
  const Exec crashed = RunRingtrain(kCrash, Train("run", "dp=2,zero=1", 2, 5, false, false));
  ASSERT_NE(crashed.code, 0);
  const std::filesystem::path data = dir_ / "ck/step-000000000010/rank-00000.data";
  ASSERT_TRUE(std::filesystem::exists(data)) << crashed.output;
  {
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(100);
    f.write(&c, 1);
  }
  const Exec resumed = RunRingtrain("", Train("run", "dp=4,zero=2", 4, 5, true));
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("fall back to an older one"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from the checkpoint of step 5"), std::string::npos)
      << resumed.output;
  // The corrupt step 10 stays the newest committed one until a newer save: the resumed run skips
  // its own step-10 save, saying so, and commits 15 and 20.
  EXPECT_NE(resumed.output.find("checkpoint of step 10 not saved"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(dir_ / "ck/step-000000000020/MANIFEST"));
  const std::map<int, double> got = Losses("run"), reference = Losses("full");
  ASSERT_EQ(got.size(), static_cast<size_t>(kSteps));
  for (const auto& [step, loss] : got)
    EXPECT_NEAR(loss, reference.at(step), 1e-5 * reference.at(step)) << step;
}

// A flipped byte in one stored piece of AdamW v that only some ranks of the resuming layout
// read: those ranks fail their load, the others load fine, and all of them fall back together
// (the agreement, not each rank's own result, decides).
TEST_F(ResumeTest, DamageOnlySomeRanksReadFallsBackOnEveryRank) {
  const Exec crashed = RunRingtrain(kCrash, Train("run", "dp=2,zero=1", 2, 5, false, false));
  ASSERT_NE(crashed.code, 0);
  auto storage = ckpt::OpenStorage((dir_ / "ck").string());
  ASSERT_TRUE(storage.ok());
  auto reader = ckpt::CheckpointReader::Open(*storage, 10);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  const ckpt::Manifest& manifest = (*reader)->manifest();
  const ckpt::TensorEntry* v = manifest.Find(ckpt::StateKind::kAdamV, "h.1.mlp.c_fc.weight");
  ASSERT_NE(v, nullptr);
  const ckpt::StoredPiece& piece = v->pieces.front();
  const std::filesystem::path file = dir_ / "ck/step-000000000010" / manifest.files.at(piece.file);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff at = static_cast<std::streamoff>(piece.offset + piece.length / 2);
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x01);
    f.seekp(at);
    f.write(&c, 1);
  }
  const Exec resumed = RunRingtrain("", Train("run", "dp=4,zero=2", 4, 5, true));
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("cannot be loaded here"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("CRC32C mismatch"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("failed to load on another rank"), std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from the checkpoint of step 5"), std::string::npos)
      << resumed.output;
}

TEST_F(ResumeTest, ResumeWithoutCheckpointsIsAClearError) {
  const Exec no_dir = RunRingtrain("", Train("run", "", 1, 0, false) + " --resume");
  EXPECT_NE(no_dir.code, 0);
  EXPECT_NE(no_dir.output.find("--resume needs ckpt.dir"), std::string::npos) << no_dir.output;
  const Exec no_dir_dist = RunRingtrain("", Train("run", "dp=2", 2, 0, false) + " --resume");
  EXPECT_NE(no_dir_dist.code, 0);
  EXPECT_NE(no_dir_dist.output.find("--resume needs ckpt.dir"), std::string::npos)
      << no_dir_dist.output;
  const Exec empty = RunRingtrain("", Train("run", "", 1, 0, true));
  EXPECT_NE(empty.code, 0);
  EXPECT_NE(empty.output.find("no committed checkpoint"), std::string::npos) << empty.output;
}

}  // namespace
}  // namespace rt
