// A save that fails on one rank (a fault point returning an error, docs/formats/checkpoint.md
// "Failed saves"): the rank's WaitWritten names the failure and its files are gone; Abandon ends
// rank 0's commit at once (not after commit_timeout_ms) with Aborted and removes the step's
// folder; the previous checkpoint stays the newest committed one and the next save commits.
#include <filesystem>

#include <gtest/gtest.h>

#include "base/fault.h"
#include "ckpt/catalog.h"
#include "ckpt/manifest.h"
#include "tests/ckpt/util.h"

namespace rt::ckpt {
namespace {

using testing::SynthLayout;
using testing::TempDir;

// One writer per rank of `layout`; rank r's fault points are named "test.rank<r>".
std::vector<std::unique_ptr<CheckpointWriter>> Writers(std::shared_ptr<Storage> storage,
                                                       const SynthLayout& layout) {
  std::vector<std::unique_ptr<CheckpointWriter>> writers;
  for (int r = 0; r < layout.world(); ++r) {
    WriterOptions o;
    o.storage = storage;
    o.rank = r;
    o.world = layout.world();
    o.run_id = "test-run";
    o.layout = layout.Name();
    o.commit_timeout_ms = 600000;  // the abandon, not this deadline, must end rank 0's wait
    o.fault_prefix = "test.rank" + std::to_string(r);
    writers.push_back(CheckpointWriter::Create(o).value());
  }
  return writers;
}

class WriterFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fault::Enabled()) GTEST_SKIP() << "built without RINGTRAIN_FAULT_INJECTION";
    storage_ = OpenStorage(dir_.path()).value();
    ASSERT_TRUE(testing::SaveLayout(storage_, layout_, 10).ok());
  }
  void TearDown() override { fault::DisarmAll(); }
  bool Exists(const std::string& path) const {
    return std::filesystem::exists(dir_.path() + "/" + path);
  }

  TempDir dir_{"failed_save"};
  SynthLayout layout_{.tp = 2, .dp = 1};
  std::shared_ptr<Storage> storage_;
};

TEST_F(WriterFailureTest, OneRankFailsAbandonRemovesTheStepAndTheNextSaveCommits) {
  // Rank 1 fails after its data file is durable: the file must go too.
  fault::Arm("test.rank1.save.after_data", {});
  auto writers = Writers(storage_, layout_);
  std::vector<testing::SynthRank> ranks;
  for (int r = 0; r < layout_.world(); ++r) ranks.push_back(testing::MakeRank(layout_, r, true));
  for (int r = 0; r < layout_.world(); ++r)
    ASSERT_TRUE(writers[r]->Save(20, ranks[r].shards, testing::EngineStateOf(20)).ok());
  EXPECT_TRUE(writers[0]->WaitWritten(Deadline::AfterMs(120000)).ok());
  const Status failed = writers[1]->WaitWritten(Deadline::AfterMs(120000));
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.ToString().find("test.rank1.save.after_data"), std::string::npos)
      << failed.ToString();
  EXPECT_FALSE(Exists(StepDir(20) + "/" + DataFile(1)));
  EXPECT_FALSE(Exists(StepDir(20) + "/" + FragmentFile(1)));
  writers[0]->Abandon();
  const Status committed = writers[0]->Wait(Deadline::AfterMs(120000));
  EXPECT_EQ(committed.code(), StatusCode::kAborted) << committed.ToString();
  EXPECT_FALSE(writers[1]->Wait(Deadline::AfterMs(120000)).ok());
  EXPECT_FALSE(Exists(StepDir(20))) << "the abandoned save left its folder";
  EXPECT_EQ(ListCommitted(*storage_).value(), std::vector<int64_t>{10});
  fault::DisarmAll();
  ASSERT_TRUE(testing::SaveLayout(storage_, layout_, 30).ok());
  EXPECT_EQ(ListCommitted(*storage_).value(), (std::vector<int64_t>{30, 10}));
  EXPECT_TRUE(testing::LoadAndCheck(storage_, layout_, 30).ok());
}

TEST_F(WriterFailureTest, OneProcessFailureRemovesItsFolder) {
  fault::Arm("test.rank0.save.after_fragment", {});
  const SynthLayout one{};
  auto writers = Writers(storage_, one);
  testing::SynthRank rank = testing::MakeRank(one, 0, true);
  ASSERT_TRUE(writers[0]->Save(20, rank.shards, testing::EngineStateOf(20)).ok());
  const Status s = writers[0]->Wait(Deadline::AfterMs(120000));
  EXPECT_NE(s.ToString().find("test.rank0.save.after_fragment"), std::string::npos) << s.ToString();
  EXPECT_FALSE(Exists(StepDir(20)));
  EXPECT_EQ(ListCommitted(*storage_).value(), std::vector<int64_t>{10});
}

}  // namespace
}  // namespace rt::ckpt
