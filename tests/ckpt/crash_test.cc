// kill -9 of a writer process at each phase of a save (fault points that SIGKILL the process,
// every rank that reaches the phase): the previous checkpoint stays committed and loads, verify
// is clean, the new one is either committed (only after `latest` moved) or ignored, and the next
// save removes what the aborted one left.

#include <gtest/gtest.h>

#include "base/fault.h"
#include "ckpt/catalog.h"
#include "ckpt/manifest.h"
#include "tests/ckpt/util.h"
#include "tests/iofs/process_util.h"

namespace rt::ckpt {
namespace {

using testing::SynthLayout;
using testing::TempDir;

constexpr int kTp = 2, kDp = 2;  // world 4: replicas spread the writes

// Runs one save of `step` by every rank, as processes; `faults` armed in rank `fault_rank`.
// Returns the wait statuses.
std::vector<int> SaveAll(const std::string& uri, int64_t step, const std::string& run,
                         int fault_rank, const std::string& faults, const std::string& log,
                         int64_t commit_timeout_ms = 120000) {
  std::vector<std::unique_ptr<iofs::testing::Process>> writers;
  for (int r = 0; r < kTp * kDp; ++r) {
    writers.push_back(std::make_unique<iofs::testing::Process>());
    std::vector<std::string> env;
    if (r == fault_rank) env.push_back("RINGTRAIN_FAULTS=" + faults);
    EXPECT_TRUE(writers.back()->Start(
        {CKPT_WRITER_CHILD, uri, std::to_string(r), std::to_string(kTp), std::to_string(kDp),
         std::to_string(step), run, "zstd", std::to_string(commit_timeout_ms)},
        env, log));
  }
  std::vector<int> statuses;
  for (auto& w : writers) statuses.push_back(w->WaitExit(std::chrono::seconds(60)));
  return statuses;
}

bool Killed(int status) {
  return status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}
bool Exited0(int status) { return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0; }

struct CrashCase {
  const char* point;
  int rank;
};

class CrashTest : public ::testing::TestWithParam<CrashCase> {};

TEST_P(CrashTest, Kill9AtPhaseLeavesPreviousCommittedAndNextSaveCleans) {
  if (!fault::Enabled()) GTEST_SKIP() << "built without RINGTRAIN_FAULT_INJECTION";
  const CrashCase c = GetParam();
  TempDir dir("crash");
  const std::string uri = "file://" + dir.path() + "/ckpt";
  const std::string log = dir.path() + "/children.log";
  auto storage = OpenStorage(uri).value();
  const SynthLayout layout{.tp = kTp, .dp = kDp};
  for (int status : SaveAll(uri, 10, "run-a", -1, "", log))
    ASSERT_TRUE(Exited0(status)) << testing::ReadText(log);
  // The crashing save: the rank dies of SIGKILL at the point.
  // When a rank other than 0 dies before its fragment exists, rank 0 waits for it in vain: a
  // short commit deadline ends that wait (its length decides nothing else).
  const std::string point = c.point;
  const bool fragment_missing = c.rank != 0 && point != "ckpt.save.after_fragment";
  const auto statuses =
      SaveAll(uri, 20, "run-b", c.rank, point + "=crash", log, fragment_missing ? 2000 : 120000);
  ASSERT_TRUE(Killed(statuses[c.rank]))
      << "the fault point never fired: " << statuses[c.rank] << "\n"
      << testing::ReadText(log);
  // Committed when `latest` moved, or when only a rank other than 0 died after its fragment
  // (rank 0 had every fragment, so everything was durable).
  const bool committed =
      point == "ckpt.commit.after_latest" || (point == "ckpt.save.after_fragment" && c.rank != 0);
  const int64_t newest = committed ? 20 : 10;
  EXPECT_EQ(ListCommitted(*storage).value().front(), newest);
  // The newest committed one loads into another layout and verifies clean.
  EXPECT_TRUE(testing::LoadAndCheck(storage, {.tp = 1, .dp = 3, .zero = true}, newest).ok());
  auto reader = CheckpointReader::Open(storage, newest).value();
  auto problems = reader->Verify().value();
  EXPECT_TRUE(problems.empty()) << problems.front();
  std::string state;
  auto fresh = testing::MakeRank(layout, 0, false);
  EXPECT_EQ(LoadNewest(storage, fresh.shards, &state).value(), newest);
  // The next save (a new process set, a new run) commits and removes the aborted leftovers.
  for (int status : SaveAll(uri, 30, "run-c", -1, "", log))
    ASSERT_TRUE(Exited0(status)) << testing::ReadText(log);
  std::vector<std::string> expected = {kLatestFile, StepDir(10)};
  if (committed) expected.push_back(StepDir(20));
  expected.push_back(StepDir(30));
  EXPECT_EQ(storage->List("").value(), expected);
  std::vector<std::string> files = {kManifestFile};
  for (int r = 0; r < kTp * kDp; ++r) files.push_back(DataFile(r));
  EXPECT_EQ(storage->List(StepDir(30)).value(), files);
  EXPECT_TRUE(CheckpointReader::Open(storage, 30).value()->Verify().value().empty());
  EXPECT_TRUE(testing::LoadAndCheck(storage, layout, 30).ok());
}

INSTANTIATE_TEST_SUITE_P(
    Phases, CrashTest,
    ::testing::Values(
        CrashCase{"ckpt.save.before_data", 0}, CrashCase{"ckpt.save.before_data", 1},
        CrashCase{"ckpt.save.before_data", 2}, CrashCase{"ckpt.save.before_data", 3},
        CrashCase{"ckpt.save.after_data", 0}, CrashCase{"ckpt.save.after_data", 1},
        CrashCase{"ckpt.save.after_data", 2}, CrashCase{"ckpt.save.after_data", 3},
        CrashCase{"ckpt.save.after_fragment", 0}, CrashCase{"ckpt.save.after_fragment", 1},
        CrashCase{"ckpt.save.after_fragment", 2}, CrashCase{"ckpt.save.after_fragment", 3},
        CrashCase{"ckpt.commit.after_fragments", 0}, CrashCase{"ckpt.commit.after_manifest", 0},
        CrashCase{"ckpt.commit.after_latest", 0}),
    [](const ::testing::TestParamInfo<CrashCase>& info) {
      std::string name =
          std::string(info.param.point).substr(5) + "_rank" + std::to_string(info.param.rank);
      for (char& ch : name)
        if (ch == '.') ch = '_';
      return name;
    });

}  // namespace
}  // namespace rt::ckpt
