// `ringtrain launch --nodes 3`: real daemons on loopback form one view that `ringctl status` sees;
// with a job's workers running, a kill -9'd daemon is started again, and SIGTERM to launch leaves
// no daemon and no worker behind.
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/process.h"
#include "base/subprocess.h"
#include "data/token_shard.h"
#include "elastic/membership/local_etcd.h"
#include "tests/parallel/test_util.h"
#include "tests/tools/process_check.h"

namespace rt {
namespace {

using testing::ExitsWithin;
using testing::ProcessesMentioning;
using testing::ReadFile;

namespace asio = boost::asio;
namespace fs = std::filesystem;
using Json = nlohmann::json;
using std::chrono::milliseconds;

class LaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ringtrain_launch_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "data");
    auto tokens = rt::testing::PatternTokens(20000, 97, 3);
    ASSERT_TRUE(WriteTokenShard((dir_ / "data/train_000.bin").string(), *tokens, 256).ok());
    ASSERT_TRUE(WriteTokenShard((dir_ / "data/val.bin").string(), *tokens, 256).ok());
  }
  void TearDown() override {
    launch_.reset();  // SIGKILL if still running; its daemons die by PR_SET_PDEATHSIG
    fs::remove_all(dir_);
  }

  // ringctl against the launched cluster; returns how it ended and what it printed.
  ProcessOutcome Ctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {RINGCTL_BIN, "--daemon", address_, "--secret-file",
                                     (dir_ / "cluster/secret").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunProcess(argv, EnvironmentWithout({}), Deadline::AfterMs(60'000));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : ProcessOutcome{};
  }

  Json StatusJson() {
    ProcessOutcome r = Ctl({"status", "--json"});
    if (r.exit_code != 0) return Json();
    return Json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  }

  // Starts `ringtrain launch ARGS --dir DIR/cluster` with its output in DIR/launch.out, waits
  // (150 s at most) until it prints how to talk to the cluster, sets address_ from that line and
  // returns the output; "" (with a test failure) when it does not.
  std::string StartLaunch(std::vector<std::string> args) {
    const fs::path out = dir_ / "launch.out";
    SpawnOptions spawn;
    spawn.argv = {RINGTRAIN_BIN, "launch", "--dir", (dir_ / "cluster").string()};
    spawn.argv.insert(spawn.argv.end(), args.begin(), args.end());
    spawn.env = EnvironmentWithout({});
    spawn.stdout_path = out.string();
    auto child = ChildProcess::Spawn(io_.get_executor(), spawn);
    if (!child.ok()) {
      ADD_FAILURE() << child.status().ToString();
      return "";
    }
    launch_ = std::move(*child);
    const Deadline ready = Deadline::AfterMs(150'000);
    std::string text;
    while (!ready.Expired() && text.find("talk to it:") == std::string::npos) {
      std::this_thread::sleep_for(milliseconds(100));
      text = ReadFile(out);
    }
    std::smatch m;
    if (!std::regex_search(text, m, std::regex("--daemon (127\\.0\\.0\\.1:[0-9]+)"))) {
      ADD_FAILURE() << "launch printed no --daemon line:\n" << text;
      return "";
    }
    address_ = m[1];
    return text;
  }

  // SIGTERM to launch; how it ended (waited for 90 s at most).
  Result<ChildExit> StopLaunch() {
    if (Status s = launch_->Signal(SIGTERM); !s.ok()) return s;
    Result<ChildExit> exit = DeadlineExceeded("not waited");
    asio::co_spawn(
        io_,
        [&]() -> asio::awaitable<void> {
          exit = co_await launch_->Wait(Deadline::AfterMs(90'000));
        },
        asio::detached);
    io_.run();
    io_.restart();
    return exit;
  }

  fs::path dir_;
  asio::io_context io_;
  std::unique_ptr<ChildProcess> launch_;
  std::string address_;
};

TEST_F(LaunchTest, ThreeNodesFormOneViewAndSigtermLeavesNoProcess) {
  const fs::path out = dir_ / "launch.out";
  std::string text = StartLaunch({"--nodes", "3", "--timeout-s", "120", "--restart-s", "1"});
  ASSERT_FALSE(text.empty());
  std::vector<pid_t> daemons;
  const std::regex node_line("node ([0-9]+)  pid ([0-9]+)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), node_line);
       it != std::sregex_iterator(); ++it)
    daemons.push_back(std::stoi((*it)[2]));
  ASSERT_EQ(daemons.size(), 3u) << text;

  ProcessOutcome status = Ctl({"status"});
  ASSERT_EQ(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find("members 1,2,3"), std::string::npos) << status.output;

  // A job, so that workers run too when launch is stopped.
  const std::string job = (dir_ / "job.toml").string();
  std::ofstream(job) << "[job]\nname = \"tiny\"\n[elastic]\nmin_nodes = 1\n"
                     << "[model]\nn_layer = 2\nn_embd = 64\nn_head = 4\nseq_len = 32\n"
                     << "[train]\nbatch_size = 6\nsteps = 1000000\nlog_every = 1000\n"
                     << "[data]\ndir = \"" << (dir_ / "data").string() << "\"\n[eval]\nevery = 0\n";
  ProcessOutcome submitted = Ctl({"submit", job});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  std::vector<pid_t> workers;
  const Deadline training = Deadline::AfterMs(120'000);
  Json s;
  while (!training.Expired()) {
    s = StatusJson();
    workers.clear();
    if (s.is_object() && s.contains("nodes"))
      for (const Json& n : s["nodes"])
        if (n.contains("workers"))
          for (const Json& w : n["workers"]) workers.push_back(w["pid"].get<pid_t>());
    if (workers.size() == 3 && s.contains("progress") && s["progress"]["step"] >= 1) break;
    std::this_thread::sleep_for(milliseconds(200));
  }
  ASSERT_EQ(workers.size(), 3u) << s.dump(2);
  ASSERT_EQ(s["view"]["members"].size(), 3u) << s.dump(2);

  // kill -9 of node 3's daemon: launch says so and starts it again a second later, as systemd's
  // Restart=on-failure would; the new daemon rejoins the view and is stopped with the others.
  ASSERT_EQ(::kill(daemons[2], SIGKILL), 0);
  const Deadline restarted = Deadline::AfterMs(60'000);
  std::smatch again;
  const std::regex again_line("node 3's daemon started again \\(pid ([0-9]+)\\)");
  while (!restarted.Expired() && !std::regex_search(text, again, again_line)) {
    std::this_thread::sleep_for(milliseconds(100));
    text = ReadFile(out);
  }
  ASSERT_TRUE(std::regex_search(text, again, again_line)) << text;
  EXPECT_NE(text.find("node 3's daemon ended (signal 9"), std::string::npos) << text;
  daemons.push_back(std::stoi(again[1]));
  const Deadline rejoined = Deadline::AfterMs(120'000);
  for (s = StatusJson(); !rejoined.Expired(); s = StatusJson()) {
    if (s.is_object() && s.contains("view") && s["view"]["members"].size() == 3u) break;
    std::this_thread::sleep_for(milliseconds(200));
  }
  ASSERT_EQ(s["view"]["members"].size(), 3u) << s.dump(2);

  Result<ChildExit> exit = StopLaunch();
  ASSERT_TRUE(exit.ok()) << exit.status().ToString() << "\n" << ReadFile(out);
  EXPECT_TRUE(exit->ok()) << exit->Describe() << "\n" << ReadFile(out);
  EXPECT_NE(ReadFile(out).find("every daemon stopped"), std::string::npos) << ReadFile(out);
  for (pid_t pid : daemons) EXPECT_TRUE(ExitsWithin(pid, milliseconds(5'000))) << "daemon " << pid;
  for (pid_t pid : workers) EXPECT_TRUE(ExitsWithin(pid, milliseconds(5'000))) << "worker " << pid;
  EXPECT_TRUE(ProcessesMentioning(dir_.string()).empty());
}

TEST_F(LaunchTest, BadArgumentsAreRefused) {
  auto r = RunProcess({RINGTRAIN_BIN, "launch", "--nodes", "0"}, EnvironmentWithout({}),
                      Deadline::AfterMs(30'000));
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->exit_code, 0);
  EXPECT_NE(r->output.find("--nodes"), std::string::npos) << r->output;
}

// `launch --etcd`: the daemons keep their membership in an etcd that launch starts and stops.
TEST_F(LaunchTest, EtcdMembershipForTheLocalCluster) {
  if (elastic::LocalEtcd::Binary().empty())
    GTEST_SKIP() << "etcd is not installed (Debian's etcd-server; tools/run setup installs it)";
  const fs::path out = dir_ / "launch.out";
  ASSERT_FALSE(StartLaunch({"--nodes", "2", "--etcd"}).empty());
  ProcessOutcome status = Ctl({"status"});
  ASSERT_EQ(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find("members 1,2"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("membership: etcd http://127.0.0.1:"), std::string::npos)
      << status.output;

  Result<ChildExit> exit = StopLaunch();
  ASSERT_TRUE(exit.ok()) << exit.status().ToString();
  EXPECT_TRUE(exit->ok()) << exit->Describe() << "\n" << ReadFile(out);
  EXPECT_TRUE(ProcessesMentioning(dir_.string()).empty()) << "etcd and the daemons are gone";
}

}  // namespace
}  // namespace rt
