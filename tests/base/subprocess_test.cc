#include "base/subprocess.h"

#include <signal.h>

#include <chrono>
#include <cstdlib>

#include <gtest/gtest.h>

namespace rt {
namespace {

Result<ProcessOutcome> Shell(const std::string& script, std::vector<std::string> env = {},
                             int64_t timeout_ms = 10000) {
  return RunProcess({"/bin/sh", "-c", script}, env, Deadline::AfterMs(timeout_ms));
}

TEST(SubprocessTest, CapturesStdoutAndStderrAndTheExitStatus) {
  Result<ProcessOutcome> r = Shell("echo out; echo err >&2; exit 3");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->exited);
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(r->output, "out\nerr\n");
  EXPECT_EQ(r->Describe(), "exit status 3");
}

TEST(SubprocessTest, TheChildGetsExactlyTheEnvironmentGiven) {
  ::setenv("SUBPROCESS_TEST_PARENT_ONLY", "1", 1);
  Result<ProcessOutcome> r =
      Shell("echo \"[$SUBPROCESS_TEST_PARENT_ONLY][$GIVEN]\"", {"GIVEN=yes"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->output, "[][yes]\n");
  // EnvironmentWithout keeps everything else of this process's environment.
  std::vector<std::string> env = EnvironmentWithout({"HOME"});
  bool home = false, parent_only = false;
  for (const std::string& e : env) {
    home |= e.starts_with("HOME=");
    parent_only |= e == "SUBPROCESS_TEST_PARENT_ONLY=1";
  }
  EXPECT_FALSE(home);
  EXPECT_TRUE(parent_only);
  ::unsetenv("SUBPROCESS_TEST_PARENT_ONLY");
}

TEST(SubprocessTest, ASignalIsReported) {
  Result<ProcessOutcome> r = Shell("kill -ILL $$");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->exited);
  EXPECT_EQ(r->signal, SIGILL);
  EXPECT_NE(r->Describe().find("signal 4"), std::string::npos) << r->Describe();
}

TEST(SubprocessTest, AHangingChildIsKilledAtTheDeadline) {
  const auto start = std::chrono::steady_clock::now();
  Result<ProcessOutcome> r = Shell("echo started; exec sleep 60", {}, 300);
  ASSERT_TRUE(r.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->signal, SIGKILL);
  EXPECT_EQ(r->output, "started\n");
  EXPECT_EQ(r->Describe(), "killed after its deadline");
}

TEST(SubprocessTest, OutputBeyondTheLimitIsDropped) {
  Result<ProcessOutcome> r =
      RunProcess({"/bin/sh", "-c", "head -c 100000 /dev/zero"}, {}, Deadline::AfterMs(10000), 1000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->output.size(), 1000u);
}

TEST(SubprocessTest, AMissingProgramIsAnError) {
  EXPECT_EQ(RunProcess({}, {}, Deadline::AfterMs(1000)).status().code(),
            StatusCode::kInvalidArgument);
  Result<ProcessOutcome> r = RunProcess({"/nonexistent/program"}, {}, Deadline::AfterMs(1000));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/program"), std::string_view::npos);
}

}  // namespace
}  // namespace rt
