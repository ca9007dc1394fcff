// The ringfs backend against a real ringfsd process: the storage contract, a save and a
// re-sharded load with ranged reads, a damaged piece detected with fallback, a lazily connected
// storage across a restart of the server, and a writer process killed at a commit phase.
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

class RingfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = iofs::testing::FreePort();
    ASSERT_TRUE(
        server_.Start({RINGFSD, "--state", dir_.path() + "/state", "--port", std::to_string(port_)},
                      {}, dir_.path() + "/server.log"));
    // The client's connect retries while the server starts.
    auto s = OpenStorage(uri_ = "ringfs://127.0.0.1:" + std::to_string(port_) + "/ckpt");
    ASSERT_TRUE(s.ok()) << s.status().ToString() << testing::ReadText(dir_.path() + "/server.log");
    storage_ = *s;
  }
  void TearDown() override { (void)server_.Stop(std::chrono::seconds(15)); }

  TempDir dir_{"ringfs"};
  uint16_t port_ = 0;
  iofs::testing::Process server_;
  std::string uri_;
  std::shared_ptr<Storage> storage_;
};

TEST_F(RingfsTest, StorageSaveReshardDamageFallback) {
  const std::vector<uint8_t> data(10000, 7);
  ASSERT_TRUE(storage_->WriteFile("x/y", data).ok());
  EXPECT_EQ(storage_->ReadFile("x/y").value(), data);
  // Whole files around the sizes where the backend changes paths: one put or a temporary file
  // (a 4 MiB buffer), one read or a read then ranged reads (1 MiB).
  for (const size_t size : {size_t{0}, size_t{1} << 20, (size_t{1} << 20) + 1, size_t{9} << 20}) {
    std::vector<uint8_t> content(size);
    for (size_t i = 0; i < size; ++i) content[i] = static_cast<uint8_t>(i * 131 + size);
    ASSERT_TRUE(storage_->WriteFile("sizes/f", content).ok()) << size;
    EXPECT_EQ(storage_->FileSize("sizes/f").value(), size);
    EXPECT_TRUE(storage_->ReadFile("sizes/f").value() == content) << size;
  }
  EXPECT_EQ(storage_->ReadFile("sizes/none").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(storage_->Remove("sizes/f").ok());
  ASSERT_TRUE(storage_->Remove("sizes").ok());
  std::vector<uint8_t> past(10);
  EXPECT_EQ(storage_->ReadRange("x/y", data.size() - 5, past).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(storage_->List("").value(), (std::vector<std::string>{"x"}));
  ASSERT_TRUE(storage_->Remove("x").ok());
  EXPECT_TRUE(storage_->List("").value().empty());

  const SynthLayout from{.tp = 2, .dp = 2};
  ASSERT_TRUE(testing::SaveLayout(storage_, from, 10, {.piece_bytes = 128}).ok());
  ASSERT_TRUE(testing::SaveLayout(storage_, from, 20,
                                  {.codec = Codec::kByteGroupedZstd, .piece_bytes = 128})
                  .ok());
  for (int64_t step : {10, 20}) {
    EXPECT_TRUE(testing::LoadAndCheck(storage_, {.tp = 3, .dp = 1, .columns = true}, step).ok());
    EXPECT_TRUE(testing::LoadAndCheck(storage_, {.tp = 1, .dp = 4, .zero = true}, step).ok());
    EXPECT_TRUE(CheckpointReader::Open(storage_, step).value()->Verify().value().empty());
  }
  // Damage one stored byte of step 20 (rewrite the file with one bit flipped).
  const std::string path = StepDir(20) + "/" + DataFile(2);
  std::vector<uint8_t> bytes = storage_->ReadFile(path).value();
  bytes[bytes.size() / 2] ^= 0x10;
  ASSERT_TRUE(storage_->WriteFile(path, bytes).ok());
  auto problems = CheckpointReader::Open(storage_, 20).value()->Verify().value();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find(DataFile(2)), std::string::npos) << problems[0];
  auto rank = testing::MakeRank({}, 0, false);
  EXPECT_EQ(LoadNewest(storage_, rank.shards, nullptr).value(), 10);
  EXPECT_EQ(testing::CheckRank(rank), "");
}

// A lazily connected storage (a worker with a memory tier) opens while its cluster is down;
// after a failed connect its calls fail at once for a while, even once the cluster is back,
// until RetryNow (a planned stop's save, a run's last) makes the next call connect.
TEST_F(RingfsTest, ALazyStorageFailsFastUntilRetryNow) {
  ASSERT_TRUE(storage_->WriteFile("kept", std::vector<uint8_t>(100, 1)).ok());
  (void)server_.Stop(std::chrono::seconds(15));
  storage_.reset();
  auto lazy = OpenStorage(uri_, {.connect_lazily = true});
  ASSERT_TRUE(lazy.ok()) << lazy.status().ToString();
  Result<std::vector<std::string>> listed = (*lazy)->List("");
  ASSERT_FALSE(listed.ok());
  const auto failed_at = MonoClock::now();

  ASSERT_TRUE(
      server_.Start({RINGFSD, "--state", dir_.path() + "/state", "--port", std::to_string(port_)},
                    {}, dir_.path() + "/server.log"));
  auto ready = OpenStorage(uri_);  // connects as soon as the server serves
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  if (MonoClock::now() - failed_at < std::chrono::seconds(4)) {
    const auto before = MonoClock::now();
    EXPECT_FALSE((*lazy)->List("").ok()) << "still within the fail-fast window";
    EXPECT_LT(MonoClock::now() - before, std::chrono::milliseconds(500)) << "without a connect";
  }
  (*lazy)->RetryNow();
  listed = (*lazy)->List("");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(*listed, (std::vector<std::string>{"kept"}));
}

TEST_F(RingfsTest, WriterKilledAfterManifestLeavesPreviousCommitted) {
  if (!fault::Enabled()) GTEST_SKIP() << "built without RINGTRAIN_FAULT_INJECTION";
  const std::string log = dir_.path() + "/writer.log";
  auto run = [&](int64_t step, const std::string& faults) {
    iofs::testing::Process writer;
    std::vector<std::string> env;
    if (!faults.empty()) env.push_back("RINGTRAIN_FAULTS=" + faults);
    EXPECT_TRUE(writer.Start({CKPT_WRITER_CHILD, uri_, "0", "1", "1", std::to_string(step),
                              "run-" + std::to_string(step), "none", "120000"},
                             env, log));
    return writer.WaitExit(std::chrono::seconds(60));
  };
  ASSERT_EQ(run(10, ""), 0) << testing::ReadText(log);
  const int killed = run(20, "ckpt.commit.after_manifest=crash");
  ASSERT_TRUE(WIFSIGNALED(killed) && WTERMSIG(killed) == SIGKILL) << testing::ReadText(log);
  EXPECT_EQ(ListCommitted(*storage_).value(), (std::vector<int64_t>{10}));
  EXPECT_TRUE(testing::LoadAndCheck(storage_, {}, 10).ok());
  ASSERT_EQ(run(30, ""), 0) << testing::ReadText(log);
  EXPECT_EQ(storage_->List("").value(),
            (std::vector<std::string>{kLatestFile, StepDir(10), StepDir(30)}));
  EXPECT_TRUE(CheckpointReader::Open(storage_, 30).value()->Verify().value().empty());
}

}  // namespace
}  // namespace rt::ckpt
