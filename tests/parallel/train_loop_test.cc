// The training loop (parallel/train_loop.h) over the real single-process Trainer and real
// checkpoints in a folder: what it reports at which point of which step, which evaluations and
// saves it makes, and --stop-after, each against a plain loop over a second Trainer (the
// reference) and the cadence formulas of the run config.
#include "parallel/train_loop.h"

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/fault.h"
#include "ckpt/catalog.h"
#include "ckpt/manifest.h"
#include "ckpt/storage.h"
#include "parallel/checkpointing.h"
#include "parallel/layout.h"
#include "tests/parallel/test_util.h"

namespace rt::parallel {
namespace {

using rt::testing::PatternTokens;
using rt::testing::TinyConfig;

// One reporter call, as "taken 3 val", "eval 3", "saving 4", "saved 3 val" or "finished";
// `on_taken`, when set, is called in StepTaken with the step.
class RecordingReporter final : public TrainLoopReporter {
 public:
  void StepTaken(const StepReport& r) override {
    events.push_back("taken " + std::to_string(r.stats.step) + Last(r) +
                     (r.val_loss ? " val" : ""));
    losses.push_back(r.stats.loss);
    if (on_taken) on_taken(r.stats.step);
  }
  void Evaluated(int64_t step, double val_loss) override {
    events.push_back("eval " + std::to_string(step));
    val_losses.push_back(val_loss);
  }
  void Saving(int64_t step) override { events.push_back("saving " + std::to_string(step)); }
  void StepSaved(const StepReport& r) override {
    events.push_back("saved " + std::to_string(r.stats.step) + Last(r) +
                     (r.val_loss ? " val" : ""));
  }
  void Finished() override { events.push_back("finished"); }

  std::vector<std::string> events;
  std::vector<double> losses, val_losses;
  std::function<void(int64_t step)> on_taken;

 private:
  static std::string Last(const StepReport& r) { return r.last ? " last" : ""; }
};

// The tiny config over `steps` steps, evaluating every 3 and saving every 2 into `dir` (every
// checkpoint kept).
RunConfig LoopConfig(int64_t steps, const std::string& dir) {
  RunConfig c = TinyConfig();
  c.train.steps = steps;
  c.eval.every = 3;
  c.eval.batches = 1;
  c.ckpt.dir = dir;
  c.ckpt.every = 2;
  c.ckpt.keep = 100;
  return c;
}

// What RunTrainLoop should report for steps 1..`end` of `config`: the formulas of eval.every
// (and the last step) for evaluations, of ckpt.every (and the last step) for saves.
std::vector<std::string> ExpectedEvents(const RunConfig& config, int64_t end) {
  std::vector<std::string> e;
  for (int64_t s = 1; s <= end; ++s) {
    const std::string last = s == end ? " last" : "";
    const bool eval = s % config.eval.every == 0 || s == end;
    e.push_back("taken " + std::to_string(s) + last + (eval ? " val" : ""));
    if (eval) e.push_back("eval " + std::to_string(s));
    if (s % config.ckpt.every == 0 || s == end) e.push_back("saving " + std::to_string(s));
    e.push_back("saved " + std::to_string(s) + last + (eval ? " val" : ""));
  }
  e.push_back("finished");
  return e;
}

class TrainLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/train_loop_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs the loop over a fresh Trainer of `config` with checkpoints, stopping after
  // `stop_after`; returns what it reported.
  RecordingReporter RunLoop(const RunConfig& config, int64_t stop_after) {
    RecordingReporter reporter;
    Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, tokens_, "");
    EXPECT_TRUE(trainer.ok()) << trainer.status().ToString();
    if (!trainer.ok()) return reporter;
    Result<std::unique_ptr<RunCheckpoints>> checkpoints =
        RunCheckpoints::Create(config, DescribeLayout({}), nullptr, (*trainer)->model().device());
    EXPECT_TRUE(checkpoints.ok()) << checkpoints.status().ToString();
    if (!checkpoints.ok()) return reporter;
    TrainLoopOptions options;
    options.stop_after = stop_after;
    options.print = false;
    const Status s = RunTrainLoop(config, **trainer, checkpoints->get(), val_, options, reporter);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ((*trainer)->state().step, EndStep(config, stop_after));
    return reporter;
  }

  // The reference: `steps` plain steps of a fresh Trainer, evaluated after every third and the
  // last; fills the losses and validation losses.
  void Reference(const RunConfig& config, int64_t steps, std::vector<double>* losses,
                 std::vector<double>* val_losses) {
    Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, tokens_, "");
    ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
    for (int64_t s = 1; s <= steps; ++s) {
      Result<StepStats> stats = (*trainer)->Step();
      ASSERT_TRUE(stats.ok()) << stats.status().ToString();
      losses->push_back(stats->loss);
      if (s % config.eval.every != 0 && s != steps) continue;
      Result<double> val = (*trainer)->Evaluate(val_, config.eval.batches);
      ASSERT_TRUE(val.ok()) << val.status().ToString();
      val_losses->push_back(*val);
    }
  }

  // The committed checkpoints in the run's folder, newest first.
  std::vector<int64_t> Committed() {
    Result<std::shared_ptr<ckpt::Storage>> storage = ckpt::OpenStorage(dir_);
    EXPECT_TRUE(storage.ok()) << storage.status().ToString();
    if (!storage.ok()) return {};
    Result<std::vector<int64_t>> steps = ckpt::ListCommitted(**storage);
    EXPECT_TRUE(steps.ok()) << steps.status().ToString();
    return steps.ok() ? *steps : std::vector<int64_t>();
  }

  // The bytes of the files in the folder of checkpoint `step` of `dir`.
  static uint64_t FolderBytes(const std::string& dir, int64_t step) {
    uint64_t bytes = 0;
    for (const auto& f : std::filesystem::directory_iterator(dir + "/" + ckpt::StepDir(step)))
      bytes += f.file_size();
    return bytes;
  }

  std::string dir_;
  std::shared_ptr<const std::vector<uint16_t>> tokens_ = PatternTokens(4000, 97, 5);
  std::shared_ptr<const std::vector<uint16_t>> val_ = PatternTokens(1000, 89, 6);
};

TEST_F(TrainLoopTest, ReportsEvaluatesAndSavesOnTheConfiguredSteps) {
  const RunConfig config = LoopConfig(7, dir_);
  const RecordingReporter got = RunLoop(config, -1);
  EXPECT_EQ(got.events, ExpectedEvents(config, 7));
  std::vector<double> losses, val_losses;
  Reference(config, 7, &losses, &val_losses);
  EXPECT_EQ(got.losses, losses);
  EXPECT_EQ(got.val_losses, val_losses);
  // Every ckpt.every steps and after the last.
  EXPECT_EQ(Committed(), (std::vector<int64_t>{7, 6, 4, 2}));
}

TEST_F(TrainLoopTest, StopAfterEndsAtThatStepWithItsEvaluationAndCheckpoint) {
  const RunConfig config = LoopConfig(7, dir_);
  const RecordingReporter got = RunLoop(config, 5);
  EXPECT_EQ(got.events, ExpectedEvents(config, 5));
  std::vector<double> losses, val_losses;
  Reference(config, 5, &losses, &val_losses);
  EXPECT_EQ(got.losses, losses);
  EXPECT_EQ(got.val_losses, val_losses);
  EXPECT_EQ(Committed(), (std::vector<int64_t>{5, 4, 2}));
}

// With a memory snapshot after every step, a step is reported only once the snapshot of the
// step before it is committed, so that a kill never makes the run train again more than the
// step reported last (the daemon's "steps lost"): each snapshot is slowed to 40 ms, longer than
// a step of the tiny model, and every StepTaken finds its predecessor's snapshot committed.
TEST_F(TrainLoopTest, WithAMemorySnapshotEveryStepAStepIsReportedOnceTheOneBeforeIsCommitted) {
  if (!fault::Enabled()) GTEST_SKIP() << "no fault points in this build";
  RunConfig config = LoopConfig(6, dir_);
  config.ckpt.every = 3;
  config.ckpt.memory_every = 1;
  std::unique_ptr<Trainer> trainer = Trainer::Create(config, tokens_, "").value();
  std::shared_ptr<ckpt::Storage> memory = ckpt::OpenStorage("mem://train_loop_test").value();
  std::unique_ptr<RunCheckpoints> checkpoints =
      RunCheckpoints::Create(config, DescribeLayout({}), nullptr, trainer->model().device(), memory)
          .value();
  TrainLoopOptions options;
  options.print = false;
  RecordingReporter reporter;
  std::vector<int64_t> newest_snapshot_when_taken;
  reporter.on_taken = [&](int64_t) {
    Result<std::vector<int64_t>> snapshots = ckpt::ListCommitted(*memory);
    newest_snapshot_when_taken.push_back(snapshots.ok() && !snapshots->empty() ? snapshots->front()
                                                                               : 0);
  };
  fault::Arm("ckpt.memory.save.before_data", {.action = fault::Action::kDelay, .delay_ms = 40});
  const Status run = RunTrainLoop(config, *trainer, checkpoints.get(), val_, options, reporter);
  fault::DisarmAll();
  ASSERT_TRUE(run.ok()) << run.ToString();
  EXPECT_EQ(newest_snapshot_when_taken, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(reporter.events, ExpectedEvents(config, 6));
}

// The transfers a run's checkpoints list: every committed save with the bytes its folder holds
// (one process writes the whole folder), the load of a resume with the bytes of the checkpoint
// it read, and a save that a fault made fail among the failed ones.
TEST_F(TrainLoopTest, TransfersListSavesAndLoadsWithTheBytesOfTheirFolders) {
  const RunConfig config = LoopConfig(7, dir_);
  std::unique_ptr<Trainer> trainer = Trainer::Create(config, tokens_, "").value();
  std::unique_ptr<RunCheckpoints> checkpoints =
      RunCheckpoints::Create(config, DescribeLayout({}), nullptr, trainer->model().device())
          .value();
  TrainLoopOptions options;
  options.print = false;
  RecordingReporter reporter;
  ASSERT_TRUE(RunTrainLoop(config, *trainer, checkpoints.get(), val_, options, reporter).ok());
  const CheckpointTransfers saved = checkpoints->TakeTransfers();
  std::vector<int64_t> steps;
  for (const CheckpointTransfer& t : saved.saves) {
    steps.push_back(t.step);
    EXPECT_FALSE(t.memory);
    EXPECT_EQ(t.bytes, FolderBytes(dir_, t.step)) << "step " << t.step;
    EXPECT_GE(t.seconds, 0);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 4, 6, 7}));
  EXPECT_TRUE(saved.failed.empty());
  EXPECT_TRUE(saved.loads.empty());
  EXPECT_TRUE(checkpoints->TakeTransfers().empty());

  std::unique_ptr<Trainer> resumed = Trainer::Create(config, tokens_, "").value();
  std::unique_ptr<RunCheckpoints> again =
      RunCheckpoints::Create(config, DescribeLayout({}), nullptr, resumed->model().device())
          .value();
  ASSERT_TRUE(ResumeTraining(*resumed, *again, options).ok());
  const CheckpointTransfers loaded = again->TakeTransfers();
  ASSERT_EQ(loaded.loads.size(), 1u);
  EXPECT_EQ(loaded.loads[0].step, 7);
  EXPECT_EQ(loaded.loads[0].bytes, FolderBytes(dir_, 7));
  EXPECT_GE(loaded.loads[0].seconds, 0);
  EXPECT_TRUE(loaded.saves.empty());

  if (!fault::Enabled()) GTEST_SKIP() << "no fault points in this build";
  const std::string failing = dir_ + "/failing";
  const RunConfig four = LoopConfig(4, failing);
  std::unique_ptr<Trainer> third = Trainer::Create(four, tokens_, "").value();
  std::unique_ptr<RunCheckpoints> faulty =
      RunCheckpoints::Create(four, DescribeLayout({}), nullptr, third->model().device()).value();
  fault::Arm("ckpt.save.before_data", {.on_hit = 1});  // the save of step 2
  const Status run = RunTrainLoop(four, *third, faulty.get(), val_, options, reporter);
  fault::DisarmAll();
  ASSERT_TRUE(run.ok()) << run.ToString();
  const CheckpointTransfers settled = faulty->TakeTransfers();
  ASSERT_EQ(settled.failed.size(), 1u);
  EXPECT_EQ(settled.failed[0].step, 2);
  EXPECT_EQ(settled.failed[0].bytes, 0u);
  ASSERT_EQ(settled.saves.size(), 1u);
  EXPECT_EQ(settled.saves[0].step, 4);
  EXPECT_EQ(settled.saves[0].bytes, FolderBytes(failing, 4));
}

// A committed durable checkpoint that cannot be read now (its replicas cut off by a partition,
// the store's metadata node frozen) is not passed over: the steps after the older checkpoint
// would be lost. A damaged one is, and any memory snapshot is (the memory tier may lose one).
TEST(PassesOverTest, OnlyDamagedCheckpointsAndMemorySnapshots) {
  for (const Status& out_of_reach :
       {Unavailable("no replica could serve it"), DeadlineExceeded("no response"),
        Status(StatusCode::kNotServing, "file operations are served by node 2", true),
        Aborted("connection closed")}) {
    EXPECT_FALSE(PassesOver(out_of_reach, /*from_memory=*/false)) << out_of_reach.ToString();
    EXPECT_TRUE(PassesOver(out_of_reach, /*from_memory=*/true)) << out_of_reach.ToString();
  }
  for (const Status& damaged :
       {Corruption("CRC32C mismatch"), NotFound("no MANIFEST"), InvalidArgument("bad manifest"),
        Status(StatusCode::kIoError, "read failed")}) {
    EXPECT_TRUE(PassesOver(damaged, false)) << damaged.ToString();
    EXPECT_TRUE(PassesOver(damaged, true)) << damaged.ToString();
  }
}

}  // namespace
}  // namespace rt::parallel
