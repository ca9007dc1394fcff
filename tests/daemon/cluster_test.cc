// A local cluster of real ringtraind processes on loopback training config tiny: submit through
// ringctl, then real kill -9 of a worker and of a daemon, and SIGTERM of a daemon; after each the
// job goes on in a new generation. Prints how long each recovery took.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "base/process.h"
#include "base/subprocess.h"
#include "ckpt/catalog.h"
#include "daemon/control_api.h"
#include "data/token_shard.h"
#include "tests/parallel/test_util.h"

namespace rt::daemon {
namespace {

namespace asio = boost::asio;
using std::chrono::milliseconds;

uint16_t FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// True when `pid` (any process) exits within `timeout`, seen through a pidfd.
bool ExitsWithin(pid_t pid, milliseconds timeout) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;
  pollfd p{fd, POLLIN, 0};
  const int rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
  ::close(fd);
  return rc == 1;
}

// What a kill -9 of a daemon cost: the recovery line of rank 0's daemon and what it says.
struct DaemonKillCost {
  double seconds = 0;        // from the kill to the first step of the new generation
  int64_t lost = -1;         // steps lost (from the recovery line)
  std::string recovery;      // the recovery line
  bool from_memory = false;  // rank 0 resumed from a memory snapshot
};

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ringtraind_cluster_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "data");
    auto tokens = rt::testing::PatternTokens(20000, 97, 3);
    ASSERT_TRUE(WriteTokenShard((dir_ / "data/train_000.bin").string(), *tokens, 256).ok());
    ASSERT_TRUE(WriteTokenShard((dir_ / "data/val.bin").string(), *tokens, 256).ok());
  }
  void TearDown() override {
    nodes_.clear();  // kills what still runs (and, by PR_SET_PDEATHSIG, its workers)
    std::filesystem::remove_all(dir_);
  }

  std::string Address(int id) const { return "127.0.0.1:" + std::to_string(ports_.at(id)); }

  // Starts daemon `id` with `slots`; node 1 bootstraps, the others join through it.
  void StartNode(int id, int slots) {
    if (!ports_.count(id)) ports_[id] = FreePort();
    const std::filesystem::path state = dir_ / ("node" + std::to_string(id));
    std::filesystem::create_directories(state);
    const std::string config = (state / "node.toml").string();
    std::ofstream(config) << "[node]\nid = " << id << "\nlisten = \"" << Address(id)
                          << "\"\nstate_dir = \"" << state.string() << "\"\nslots = " << slots
                          << "\n[cluster]\nseeds = \"" << (id == 1 ? "" : Address(1))
                          << "\"\n[worker]\nstop_grace_ms = 500\nenv = \"OMP_NUM_THREADS=1\"\n";
    SpawnOptions o;
    o.argv = {RINGTRAIND_BIN, "--config", config};
    o.env = EnvironmentWithout({});
    o.stdout_path = (state / "daemon.log").string();
    auto child = ChildProcess::Spawn(io_.get_executor(), o);
    ASSERT_TRUE(child.ok()) << child.status().ToString();
    nodes_[id] = std::move(*child);
  }

  // ringctl with `args`; returns its exit status and output.
  ProcessOutcome Ctl(std::vector<std::string> args, int id = 1) {
    std::vector<std::string> argv = {RINGCTL_BIN, "--daemon", Address(id)};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunProcess(argv, EnvironmentWithout({}), Deadline::AfterMs(60'000));
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : ProcessOutcome{};
  }

  Result<Json> Status(int id) {
    return CallJsonBlocking(Address(id), nullptr, kCtlStatus, Json::object(),
                            Deadline::AfterMs(5'000));
  }

  // Polls daemon `id`'s status until `done` holds; returns the status that satisfied it.
  Json WaitFor(int id, const std::string& what, std::function<bool(const Json&)> done,
               milliseconds timeout = milliseconds(120'000)) {
    const Deadline deadline = Deadline::After(timeout);
    Json last;
    while (!deadline.Expired()) {
      Result<Json> s = Status(id);
      if (s.ok()) {
        last = *s;
        if (done(last)) return last;
      }
      std::this_thread::sleep_for(milliseconds(100));
    }
    ADD_FAILURE() << "timed out waiting for " << what << "; last status: " << last.dump(2)
                  << "\n" << Logs();
    return last;
  }

  std::string Logs() {
    std::string out;
    for (auto& entry : std::filesystem::recursive_directory_iterator(dir_)) {
      if (entry.path().extension() != ".log") continue;
      std::ifstream in(entry.path());
      std::string text((std::istreambuf_iterator<char>(in)), {});
      if (text.size() > 3000) text = "..." + text.substr(text.size() - 3000);
      out += "==> " + entry.path().string() + "\n" + text + "\n";
    }
    return out;
  }

  static size_t Members(const Json& s) { return s["view"]["members"].size(); }
  static std::string Generation(const Json& s) {
    return s.contains("progress") ? s["progress"]["generation"].get<std::string>() : "";
  }
  static int64_t Step(const Json& s) {
    return s.contains("progress") ? s["progress"]["step"].get<int64_t>() : 0;
  }
  // The pids of node `id`'s workers in a status.
  static std::vector<pid_t> WorkerPids(const Json& s, int id) {
    std::vector<pid_t> pids;
    for (const Json& n : s["nodes"])
      if (n.value("node", 0) == id && n.contains("workers"))
        for (const Json& w : n["workers"]) pids.push_back(w["pid"].get<pid_t>());
    return pids;
  }

  // The job: config tiny, tp=2, a checkpoint every `every` steps, then `extra` lines of [ckpt].
  std::string JobFile(const std::string& extra = "", int every = 5) {
    const std::string path = (dir_ / "job.toml").string();
    std::ofstream(path) << "[job]\nname = \"tiny\"\n[elastic]\ntp = 2\nmin_nodes = 1\n"
                        << "[model]\nn_layer = 2\nn_embd = 64\nn_head = 4\nseq_len = 32\n"
                        << "[train]\nbatch_size = 12\nsteps = 1000000\nlog_every = 1000\n"
                        << "[data]\ndir = \"" << (dir_ / "data").string() << "\"\n"
                        << "[eval]\nevery = 0\n"
                        << "[ckpt]\ndir = \"" << (dir_ / "ckpt").string()
                        << "\"\nevery = " << every << "\nasync = true\n"
                        << extra;
    return path;
  }

  // Trains with `ckpt_lines` (of [ckpt]; a checkpoint every 20 steps) on 3 daemons past step
  // 25, kills daemon 3 with -9 and waits for the first step of the generation on nodes 1 and 2.
  DaemonKillCost KillADaemonAfterStep25(const std::string& ckpt_lines, bool memory_tier);

  std::filesystem::path dir_;
  asio::io_context io_;
  std::map<int, uint16_t> ports_;
  std::map<int, std::unique_ptr<ChildProcess>> nodes_;
};

TEST_F(ClusterTest, TrainsAndRecoversFromKilledWorkersAndDaemons) {
  for (int id = 1; id <= 3; ++id) StartNode(id, 2);
  WaitFor(1, "a view of 3 members", [](const Json& s) { return Members(s) == 3; });

  // A malformed job is refused with file, line and key and changes nothing.
  const std::string bad = (dir_ / "bad.toml").string();
  std::ofstream(bad) << "[job]\nname = \"x\"\n[elastic]\ntp = 2\nbogus = 1\n";
  ProcessOutcome refused = Ctl({"submit", bad});
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find("bad.toml"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("elastic.bogus"), std::string::npos) << refused.output;
  ASSERT_TRUE(Status(1).ok());
  EXPECT_FALSE(Status(1)->contains("job"));

  ProcessOutcome submitted = Ctl({"submit", JobFile()}, 2);
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  Json s = WaitFor(3, "training on 3 nodes past a checkpoint",
                   [](const Json& s) { return Step(s) >= 12; });
  ProcessOutcome text = Ctl({"status"}, 3);
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.output.find("tp=2,pp=1,dp=3"), std::string::npos) << text.output;
  std::printf("ringctl status:\n%s", text.output.c_str());

  // kill -9 one worker of node 2: a new epoch, the same view, every node restarts its workers.
  const std::string gen_before = Generation(s);
  std::vector<pid_t> victims = WorkerPids(s, 2);
  ASSERT_FALSE(victims.empty()) << s.dump(2);
  auto kill_at = MonoClock::now();
  ASSERT_EQ(::kill(victims[0], SIGKILL), 0);
  s = WaitFor(1, "a new generation after the worker kill", [&](const Json& s) {
    return !Generation(s).empty() && Generation(s) != gen_before && Step(s) >= 1;
  });
  double seconds = std::chrono::duration<double>(MonoClock::now() - kill_at).count();
  std::printf("recovery after kill -9 of a worker: %.2f s to the first step of generation %s\n",
              seconds, Generation(s).c_str());
  EXPECT_EQ(Members(s), 3u) << "a worker death changes the epoch, not the view";

  // ringctl drain 3: a new epoch whose plan leaves node 3 out; --undo puts it back.
  ProcessOutcome drained = Ctl({"drain", "3"}, 2);
  ASSERT_EQ(drained.exit_code, 0) << drained.output;
  s = WaitFor(1, "a plan without node 3", [](const Json& s) {
    return WorkerPids(s, 3).empty() && WorkerPids(s, 1).size() == 2 &&
           WorkerPids(s, 2).size() == 2 && Step(s) >= 1 &&
           s["nodes"][0]["plan"].get<std::string>().find("dp=2") != std::string::npos;
  });
  EXPECT_EQ(s["drained"], Json::array({3}));
  ProcessOutcome undrained = Ctl({"drain", "3", "--undo"});
  ASSERT_EQ(undrained.exit_code, 0) << undrained.output;

  // kill -9 daemon 3: its workers die with it; the others install a view of 2 and go on.
  s = WaitFor(1, "workers on node 3", [](const Json& s) { return !WorkerPids(s, 3).empty(); });
  const std::vector<pid_t> orphans = WorkerPids(s, 3);
  const std::string gen_before_daemon = Generation(s);
  kill_at = MonoClock::now();
  ASSERT_TRUE(nodes_[3]->Signal(SIGKILL).ok());
  for (pid_t pid : orphans)
    EXPECT_TRUE(ExitsWithin(pid, milliseconds(10'000))) << "worker " << pid << " outlived node 3";
  s = WaitFor(1, "training on 2 nodes", [&](const Json& s) {
    return Members(s) == 2 && Generation(s) != gen_before_daemon && Step(s) >= 1 &&
           s["progress"]["generation"].get<std::string>().find(
               "." + std::to_string(s["view"]["generation"].get<int64_t>()) + ".") !=
               std::string::npos;
  });
  seconds = std::chrono::duration<double>(MonoClock::now() - kill_at).count();
  std::printf("recovery after kill -9 of a daemon: %.2f s to the first step of generation %s\n",
              seconds, Generation(s).c_str());

  // SIGTERM daemon 2: it leaves, stops its workers and exits 0; node 1 trains alone.
  const std::vector<pid_t> leaving = WorkerPids(s, 2);
  ASSERT_FALSE(leaving.empty());
  kill_at = MonoClock::now();
  ASSERT_TRUE(nodes_[2]->Signal(SIGTERM).ok());
  for (pid_t pid : leaving) EXPECT_TRUE(ExitsWithin(pid, milliseconds(20'000)));
  Result<ChildExit> exit = ChildExit{};
  {
    bool done = false;
    asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
      exit = co_await nodes_[2]->Wait(Deadline::AfterMs(30'000));
      done = true;
    }, asio::detached);
    io_.run();
    io_.restart();
    ASSERT_TRUE(done);
  }
  ASSERT_TRUE(exit.ok()) << exit.status().ToString();
  EXPECT_TRUE(exit->ok()) << exit->Describe();
  s = WaitFor(1, "training on node 1 alone", [&](const Json& s) {
    return Members(s) == 1 && Step(s) >= 1 &&
           Generation(s).find("." + std::to_string(s["view"]["generation"].get<int64_t>()) +
                              ".") != std::string::npos;
  });
  seconds = std::chrono::duration<double>(MonoClock::now() - kill_at).count();
  std::printf("after SIGTERM of a daemon: %.2f s to the first step of generation %s\n", seconds,
              Generation(s).c_str());

  // Every recovery after the first generation resumed from a committed checkpoint (saved every
  // 5 steps): the rank-0 daemons' recovery lines say from which step and how many were lost.
  int resumed = 0;
  for (int id = 1; id <= 3; ++id) {
    std::ifstream log(dir_ / ("node" + std::to_string(id)) / "daemon.log");
    for (std::string line; std::getline(log, line);) {
      const size_t at = line.find("resumed at step ");
      if (line.find("recovery: ") == std::string::npos || at == std::string::npos) continue;
      std::printf("node %d: %s\n", id, line.substr(line.find("recovery: ")).c_str());
      const int64_t step = std::atoll(line.c_str() + at + 16);
      if (line.find("submitted") == std::string::npos && line.find("registered") == std::string::npos) {
        EXPECT_GT(step, 1) << line;
        ++resumed;
      }
    }
  }
  EXPECT_GE(resumed, 3) << "worker kill, daemon kill and SIGTERM each resume";

  ProcessOutcome stopped = Ctl({"stop"});
  EXPECT_EQ(stopped.exit_code, 0) << stopped.output;
  WaitFor(1, "no workers after ringctl stop",
          [](const Json& s) { return WorkerPids(s, 1).empty(); });
}

DaemonKillCost ClusterTest::KillADaemonAfterStep25(const std::string& ckpt_lines,
                                                   bool memory_tier) {
  DaemonKillCost cost;
  for (int id = 1; id <= 3; ++id) StartNode(id, 2);
  WaitFor(1, "a view of 3 members", [](const Json& s) { return Members(s) == 3; });
  ProcessOutcome submitted = Ctl({"submit", JobFile(ckpt_lines, 20)});
  EXPECT_EQ(submitted.exit_code, 0) << submitted.output;
  // Past step 25, with the durable checkpoint of step 20 committed (it is written in the
  // background: under load it commits some steps later).
  auto durable = ckpt::OpenStorage((dir_ / "ckpt").string());
  EXPECT_TRUE(durable.ok()) << durable.status().ToString();
  Json s = WaitFor(1, "training on 3 nodes past step 25 with checkpoint 20 committed",
                   [&](const Json& s) {
                     if (Step(s) < 25 || WorkerPids(s, 3).size() != 2) return false;
                     auto committed = ckpt::ListCommitted(**durable);
                     return committed.ok() && !committed->empty() && committed->front() >= 20;
                   });
  for (const Json& n : s["nodes"])
    EXPECT_EQ(n["memory_tier"]["bytes"].get<int64_t>() > 0, memory_tier) << n.dump();
  const std::string gen_before = Generation(s);
  const int64_t step_before = Step(s);
  const auto kill_at = MonoClock::now();
  EXPECT_TRUE(nodes_[3]->Signal(SIGKILL).ok());
  s = WaitFor(1, "training on 2 nodes", [&](const Json& s) {
    return Members(s) == 2 && Generation(s) != gen_before &&
           Step(s) >= 1 &&
           s["progress"]["generation"].get<std::string>().find(
               "." + std::to_string(s["view"]["generation"].get<int64_t>()) + ".") !=
               std::string::npos;
  });
  cost.seconds = std::chrono::duration<double>(MonoClock::now() - kill_at).count();
  for (int id = 1; id <= 2; ++id) {
    std::ifstream log(dir_ / ("node" + std::to_string(id)) / "daemon.log");
    for (std::string line; std::getline(log, line);) {
      const size_t at = line.find("step(s) lost");
      // The last recovery after the start (its cause: the view change, or a survivor's worker
      // that failed first when its peers died).
      if (line.find("recovery: ") == std::string::npos || at == std::string::npos ||
          line.find("submitted") != std::string::npos ||
          line.find("registered") != std::string::npos)
        continue;
      cost.recovery = line.substr(line.find("recovery: "));
      cost.lost = std::atoll(line.c_str() + line.rfind('(', at) + 1);
    }
  }
  for (auto& entry : std::filesystem::recursive_directory_iterator(dir_)) {
    if (entry.path().filename() != "rank-0.log") continue;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    cost.from_memory |= text.find("resuming from memory snapshot") != std::string::npos;
  }
  std::printf("%s: kill -9 of a daemon after step %lld: %.2f s until a step of generation %s "
              "was seen; %s\n", memory_tier ? "memory tier" : "durable only",
              static_cast<long long>(step_before), cost.seconds, Generation(s).c_str(),
              cost.recovery.c_str());
  ProcessOutcome stopped = Ctl({"stop"});
  EXPECT_EQ(stopped.exit_code, 0) << stopped.output;
  return cost;
}

// The memory tier (docs/daemon.md): with a snapshot in the daemons' memory after every step and
// a durable checkpoint only every 20, kill -9 of a daemon costs at most one step.
TEST_F(ClusterTest, RecoversFromTheMemoryTierAfterADaemonKill) {
  const DaemonKillCost cost = KillADaemonAfterStep25("memory_every = 1\n", true);
  ASSERT_GE(cost.lost, 0) << "no recovery line\n" << Logs();
  EXPECT_LE(cost.lost, 1) << cost.recovery << "\n" << Logs();
  EXPECT_TRUE(cost.from_memory) << Logs();
}

// The same without the memory tier: the job goes back to the durable checkpoint of step 20.
TEST_F(ClusterTest, RecoversFromTheDurableCheckpointWithoutTheMemoryTier) {
  const DaemonKillCost cost = KillADaemonAfterStep25("", false);
  ASSERT_GE(cost.lost, 0) << "no recovery line\n" << Logs();
  EXPECT_GE(cost.lost, 5) << cost.recovery;  // killed after step 25, resumed at step 20 (or 40)
  EXPECT_FALSE(cost.from_memory);
  const size_t at = cost.recovery.find("resumed at step ");
  ASSERT_NE(at, std::string::npos) << cost.recovery;
  const int64_t resumed = std::atoll(cost.recovery.c_str() + at + 16);
  EXPECT_TRUE(resumed == 21 || resumed == 41) << cost.recovery;
}

}  // namespace
}  // namespace rt::daemon
