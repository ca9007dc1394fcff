// The short chaos campaign: ringchaos with a fixed seed against a real local cluster of 5
// ringtraind daemons, every fault kind at least once (>= 10 faults), then its invariants:
// the job finished, no committed step lost, no corrupt checkpoint accepted, no hang, and the
// final weights equal (<= 1e-5; in practice bitwise) those of a fault-free replay of the job's
// layout history. The
// recovery bound is the tool's hang limit (60 s), generous for a loaded 2-core machine; the
// real recovery times are printed, not asserted.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "base/subprocess.h"
#include "daemon/control_api.h"

namespace rt::chaos {
namespace {

TEST(ChaosCampaignTest, TenFaultsLoseNoCommittedStepAndAcceptNoCorruptCheckpoint) {
  const std::string json = std::filesystem::temp_directory_path() /
                           ("chaos_test_" + std::to_string(::getpid()) + ".json");
  Result<ProcessOutcome> run = RunProcess(
      {RINGCHAOS_BIN, "--seed", "15", "--nodes", "5", "--seconds", "40", "--baseline-seconds",
       "8", "--max-faults", "10", "--pause-ms", "300", "--hang-ms", "2500", "--json", json,
       "--log-level", "warn"},
      EnvironmentWithout({"RINGTRAIN_FAULTS"}), Deadline::AfterMs(540'000));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  std::printf("%s", run->output.c_str());
  ASSERT_FALSE(run->timed_out) << run->output;
  std::ifstream in(json);
  ASSERT_TRUE(in) << "ringchaos wrote no summary: " << run->output;
  const daemon::Json s = daemon::Json::parse(in);
  std::filesystem::remove(json);

  EXPECT_GE(s["faults_injected"].get<int>(), 10) << s.dump(2);
  EXPECT_TRUE(s["finished"].get<bool>()) << s.dump(2);
  EXPECT_EQ(s["final_step"], s["job_steps"]);
  EXPECT_EQ(s["committed_steps_lost"].get<int64_t>(), 0) << s.dump(2);
  EXPECT_EQ(s["corrupt_accepted"].get<int>(), 0) << s.dump(2);
  EXPECT_EQ(s["hangs"].get<int>(), 0) << s.dump(2);
  EXPECT_EQ(s["unmatched_restarts"].get<int>(), 0) << s.dump(2);
  // Every kind ran (disk-full only where a tmpfs could be mounted) and every flip was caught.
  EXPECT_EQ(s["injected"].size() + s["skipped"].size(), 10u) << s.dump(2);
  EXPECT_GE(s["flips_detected"].get<int>(), 1) << s.dump(2);
  EXPECT_EQ(s["flips_undetected"].get<int>(), 0) << s.dump(2);
  EXPECT_GE(s["checkpoints_verified"].get<int>(), 1) << s.dump(2);
  // The replay followed at least the generations the restarts made.
  EXPECT_EQ(s["replay_error"].get<std::string>(), "") << s.dump(2);
  EXPECT_GE(s["replayed"].size(), 2u) << s.dump(2);
  const double diff = s["final_max_abs_difference"].get<double>();
  EXPECT_GE(diff, 0) << s.dump(2);
  EXPECT_LE(diff, 1e-5) << s.dump(2);
  EXPECT_EQ(run->exit_code, 0) << run->output;
}

}  // namespace
}  // namespace rt::chaos
