// Checkpoints on a ringfsd that requires the cluster secret, with the real binaries: `ringtrain
// train --secret-file` saves to ringfs:// in one process and on two ranks (the launcher hands the
// same file to its workers), `ringckpt --secret-file verify` checks what they wrote, and a
// two-rank run stopped after step 6 and resumed from ringfs:// has, bitwise, the per-step losses
// of the uninterrupted run. Without the secret, training and ringckpt fail with Unauthenticated.
#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "base/net/auth.h"
#include "tests/iofs/process_util.h"
#include "tests/tools/run_folder.h"
#include "tests/tools/shell_run.h"

namespace rt {
namespace {

using Exec = testing::ShellOutcome;

// Runs `command` through the shell (stdout and stderr together; killed after 300 s).
Exec Shell(const std::string& command) { return testing::RunShell(command, 300); }

class RingfsSecretTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ringfs_secret_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(testing::MakeRunFolder(dir_).ok());
    secret_ = (dir_ / "secret").string();
    ASSERT_TRUE(net::ClusterSecret::Create(secret_).ok());
    port_ = iofs::testing::FreePort();
    ASSERT_TRUE(server_.Start({RINGFSD, "--state", (dir_ / "state").string(), "--port",
                               std::to_string(port_), "--secret-file", secret_},
                              {}, (dir_ / "server.log").string()));
  }
  void TearDown() override {
    server_.Stop(std::chrono::seconds(15));
    std::filesystem::remove_all(dir_);
  }

  std::string Uri(const std::string& path) const {
    return "ringfs://127.0.0.1:" + std::to_string(port_) + "/" + path;
  }

  // `ringtrain train` of the tiny config for 10 steps, metrics under `name`, `more` appended.
  std::string Train(const std::string& name, const std::string& more) const {
    return std::string(RINGTRAIN_BIN) + " --log-level warn train --config " + RINGTRAIN_SOURCE_DIR +
           "/configs/tiny.toml --set data.dir=" + (dir_ / "data").string() +
           " --set eval.every=0 --set train.log_every=5 --set optim.warmup_steps=4 --steps 10"
           " --set metrics.path=" +
           (dir_ / (name + ".jsonl")).string() + " " + more;
  }

  std::map<int, double> Losses(const std::string& name) const {
    return testing::StepLosses(dir_ / (name + ".jsonl"));
  }

  std::string ServerLog() const { return iofs::testing::ReadText((dir_ / "server.log").string()); }

  std::filesystem::path dir_;
  std::string secret_;
  uint16_t port_ = 0;
  iofs::testing::Process server_;
};

TEST_F(RingfsSecretTest, OneProcessSavesWithTheSecretAndRingckptVerifiesIt) {
  const std::string ckpt = " --set ckpt.every=5 --set ckpt.dir=" + Uri("one");
  const Exec refused = Shell(Train("refused", ckpt));
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("Unauthenticated"), std::string::npos) << refused.output;
  const Exec saved = Shell(Train("run", ckpt + " --secret-file " + secret_));
  ASSERT_EQ(saved.exit_code, 0) << saved.output << ServerLog();
  const Exec verified =
      Shell(std::string(RINGCKPT_BIN) + " --secret-file " + secret_ + " verify " + Uri("one"));
  EXPECT_EQ(verified.exit_code, 0) << verified.output;
  const Exec inspected =
      Shell(std::string(RINGCKPT_BIN) + " --secret-file " + secret_ + " inspect " + Uri("one"));
  EXPECT_NE(inspected.output.find("step       10"), std::string::npos) << inspected.output;
  const Exec without = Shell(std::string(RINGCKPT_BIN) + " verify " + Uri("one"));
  EXPECT_EQ(without.exit_code, 2) << without.output;  // could not check, not damaged
  EXPECT_NE(without.output.find("Unauthenticated"), std::string::npos) << without.output;
}

TEST_F(RingfsSecretTest, TwoRanksStoppedAndResumedFromRingfsAreBitwiseTheUninterruptedRun) {
  const std::string layout = " --layout dp=2,zero=1 --ranks 2";
  const Exec full = Shell(Train("full", layout));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const std::string ckpt =
      layout + " --set ckpt.every=3 --set ckpt.dir=" + Uri("two") + " --secret-file " + secret_;
  const Exec stopped = Shell(Train("run", ckpt + " --stop-after 6"));
  ASSERT_EQ(stopped.exit_code, 0) << stopped.output << ServerLog();
  const Exec verified =
      Shell(std::string(RINGCKPT_BIN) + " --secret-file " + secret_ + " verify " + Uri("two"));
  EXPECT_EQ(verified.exit_code, 0) << verified.output;
  const Exec resumed = Shell(Train("run", ckpt + " --resume"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output << ServerLog();
  EXPECT_NE(resumed.output.find("resumed from the checkpoint of step 6"), std::string::npos)
      << resumed.output;
  EXPECT_EQ(Losses("run"), Losses("full"));
  EXPECT_EQ(Losses("full").size(), 10u);
}

}  // namespace
}  // namespace rt
