// tools/demo.sh (`tools/run demo`) end to end with few steps: every phase line appears in order,
// and no process it started is left; Ctrl-C (SIGINT) in the middle also leaves none.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "base/process.h"
#include "base/subprocess.h"
#include "tests/tools/process_check.h"

namespace rt {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using testing::ProcessesMentioning;
using testing::ReadFile;

class DemoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ringtrain_demo_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Starts tools/demo.sh with `steps`, its output in dir_/demo.out.
  std::unique_ptr<ChildProcess> StartDemo(int steps) {
    SpawnOptions spawn;
    spawn.argv = {"/bin/bash", std::string(RINGTRAIN_SOURCE_DIR) + "/tools/demo.sh",
                  RINGTRAIN_BUILD_DIR};
    spawn.env =
        EnvironmentWithout({"RINGTRAIN_DEMO_CONFIG", "RINGTRAIN_DEMO_NODES", "RINGTRAIN_DEMO_SLOTS",
                            "RINGTRAIN_DEMO_TP", "RINGTRAIN_DEMO_PP", "RINGTRAIN_DEMO_CKPT_EVERY"});
    spawn.env.push_back("RINGTRAIN_DEMO_DIR=" + (dir_ / "work").string());
    spawn.env.push_back("RINGTRAIN_DEMO_STEPS=" + std::to_string(steps));
    spawn.stdout_path = (dir_ / "demo.out").string();
    auto child = ChildProcess::Spawn(io_.get_executor(), spawn);
    EXPECT_TRUE(child.ok()) << child.status().ToString();
    return child.ok() ? std::move(*child) : nullptr;
  }

  Result<ChildExit> Wait(ChildProcess& child, int64_t ms) {
    Result<ChildExit> exit = DeadlineExceeded("not waited");
    asio::co_spawn(
        io_, [&]() -> asio::awaitable<void> { exit = co_await child.Wait(Deadline::AfterMs(ms)); },
        asio::detached);
    io_.restart();
    io_.run();
    return exit;
  }

  fs::path dir_;
  asio::io_context io_;
};

TEST_F(DemoTest, EveryPhaseRunsAndNoProcessIsLeft) {
  // Config S at 300 steps: the kill at step 75 and the node's return both come well before the
  // end even at 20 steps/s (measured: about 55 s in all at load 20 on 2 cores).
  std::unique_ptr<ChildProcess> demo = StartDemo(300);
  ASSERT_NE(demo, nullptr);
  Result<ChildExit> exit = Wait(*demo, 360'000);
  const std::string out = ReadFile(dir_ / "demo.out");
  ASSERT_TRUE(exit.ok()) << exit.status().ToString() << "\n" << out;
  EXPECT_TRUE(exit->ok()) << exit->Describe() << "\n" << out;
  const std::vector<std::string> phases = {
      "== starting 4 ringtraind daemons on loopback (1 CPU slot(s) each, and a chunk server each",
      "== 4 daemons formed one view; ringctl --daemon 127.0.0.1:",
      "== submitting s.toml: 300 steps, tp=1 pp=2",
      "   step ",
      "tp=1,pp=2,dp=2",
      "== kill -9 of daemon 3",
      "== recovered: detected after ",
      "new layout tp=1,pp=2,dp=1",
      "recovery: view ",
      "== loaded from the checkpoint of step ",
      "== bringing daemon 3 back",
      "== the job grew back to 4 nodes: layout tp=1,pp=2,dp=2",
      "   | node 1: recovery: ",
      "== waiting for the end (step 300)",
      "== the job finished at step 300",
      "== ringckpt verify of the newest checkpoint in the chunk store, ringfs://127.0.0.1:",
      "step 300: OK",
      "== ringckpt reshard of it offline to tp=2,pp=1,dp=1",
      "(tp=2,pp=1,dp=1,zero=0,sp=0,schedule=1f1b, 2 ranks)",
      "== stopping the 4 daemons",
      "== ringckpt verify of the resharded checkpoint",
      "step 300: OK",
      "== ringckpt export",
      "== validation loss",
      "   | loss ",
      "== a sample",
      "   | The secret of life is",
      "== demo done in ",
  };
  size_t at = 0;
  for (const std::string& phase : phases) {
    const size_t found = out.find(phase, at);
    ASSERT_NE(found, std::string::npos) << "'" << phase << "' missing or out of order in:\n" << out;
    at = found + phase.size();
  }
  EXPECT_TRUE(ProcessesMentioning(dir_.string()).empty()) << out;
}

TEST_F(DemoTest, CtrlCStopsEveryProcess) {
  std::unique_ptr<ChildProcess> demo = StartDemo(100'000);
  ASSERT_NE(demo, nullptr);
  const Deadline training = Deadline::AfterMs(180'000);
  while (!training.Expired() && ReadFile(dir_ / "demo.out").find("   step ") == std::string::npos)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::string out = ReadFile(dir_ / "demo.out");
  ASSERT_NE(out.find("   step "), std::string::npos) << out;
  ASSERT_FALSE(ProcessesMentioning(dir_.string()).empty()) << "the check can fail";
  ASSERT_TRUE(demo->Signal(SIGINT).ok());  // to its process group, as a terminal's Ctrl-C
  Result<ChildExit> exit = Wait(*demo, 90'000);
  out = ReadFile(dir_ / "demo.out");
  ASSERT_TRUE(exit.ok()) << exit.status().ToString() << "\n" << out;
  EXPECT_FALSE(exit->ok()) << out;
  EXPECT_NE(out.find("== interrupted: stopping every process the demo started"), std::string::npos)
      << out;
  EXPECT_TRUE(ProcessesMentioning(dir_.string()).empty()) << out;
}

}  // namespace
}  // namespace rt
