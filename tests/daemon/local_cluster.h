// A local cluster of real ringtraind processes on loopback for the daemon tests: a gtest fixture
// that starts daemons (node 1 bootstraps, the others join through it), runs ringctl, polls the
// cluster's status with a deadline, and kills what still runs at the end.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "base/net/free_port.h"
#include "base/process.h"
#include "base/subprocess.h"
#include "daemon/control_api.h"
#include "data/token_shard.h"
#include "tests/parallel/test_util.h"

namespace rt::daemon {

namespace asio = boost::asio;

// One line of a job's metrics file: the generation that wrote it, its step and loss.
struct StepLoss {
  std::string generation;
  int64_t step = 0;
  double loss = 0;
};

// The (generation, step, loss) lines of a metrics file in order; a line a killed rank 0 left
// half written is skipped.
inline std::vector<StepLoss> ReadLosses(const std::filesystem::path& path) {
  std::vector<StepLoss> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("loss")) continue;
    out.push_back({j.value("generation", ""), j["step"].get<int64_t>(), j["loss"].get<double>()});
  }
  return out;
}

// The layout and world size a worker ran, from its log's "worker: generation G rank 0/N layout
// L, ..." line (daemon/worker.cc); empty when the log has none.
struct WorkerLayout {
  std::string layout;
  std::string ranks;
};
inline WorkerLayout ReadWorkerLayout(const std::filesystem::path& log_path) {
  std::ifstream log(log_path);
  for (std::string line; std::getline(log, line);) {
    const size_t at = line.find(" rank 0/"), named = line.find(" layout "),
                 end = line.find(", ", named == std::string::npos ? 0 : named);
    if (at == std::string::npos || named == std::string::npos || end == std::string::npos) continue;
    return {line.substr(named + 8, end - named - 8), line.substr(at + 8, named - at - 8)};
  }
  return {};
}

// A loopback port that was free a moment ago (net::FreeLoopbackPort); 0 when none was.
inline uint16_t FreePort() {
  Result<uint16_t> port = net::FreeLoopbackPort();
  EXPECT_TRUE(port.ok()) << port.status().ToString();
  return port.ok() ? *port : 0;
}

// True when `pid` (any process) exits within `timeout`, seen through a pidfd.
inline bool ExitsWithin(pid_t pid, std::chrono::milliseconds timeout) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;
  pollfd p{fd, POLLIN, 0};
  const int rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
  ::close(fd);
  return rc == 1;
}

// True when every thread of `pid` is stopped (state T in /proc/PID/task/*/stat) within
// `timeout`. kill(SIGSTOP) returns before the stop: until the thread chosen to take the signal
// runs, the process's other threads go on (answering calls) — on a loaded machine, for a while.
inline bool StopsWithin(pid_t pid, std::chrono::milliseconds timeout) {
  const Deadline deadline = Deadline::After(timeout);
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  do {
    bool all_stopped = true;
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
      std::ifstream stat(task.path() / "stat");
      std::string line;
      std::getline(stat, line);
      const size_t comm_end = line.rfind(')');  // the name may hold spaces and parentheses
      if (comm_end != std::string::npos && comm_end + 2 < line.size() && line[comm_end + 2] == 'T')
        continue;
      all_stopped = false;
      break;
    }
    if (ec) return false;
    if (all_stopped) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  } while (!deadline.Expired());
  return false;
}

// What the daemon tests' job file varies (LocalCluster::TinyJobFile).
struct TinyJob {
  int batch_size = 12;
  int64_t steps = 1'000'000;
  int ckpt_every = 5;
  bool metrics = false;    // a [metrics] path: the folder's metrics.jsonl
  std::string optim;       // lines of an [optim] section; "" = none
  std::string ckpt_extra;  // more lines of [ckpt]
  std::string ckpt_dir;    // ckpt.dir; "" = the folder's ckpt/
};

// The fixture: a folder with token data (PatternTokens) and the daemons started in it.
class LocalCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ringtraind_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "data");
    auto tokens = rt::testing::PatternTokens(20000, 97, 3);
    ASSERT_TRUE(WriteTokenShard((dir_ / "data/train_000.bin").string(), *tokens, 256).ok());
    ASSERT_TRUE(WriteTokenShard((dir_ / "data/val.bin").string(), *tokens, 256).ok());
  }
  void TearDown() override {
    nodes_.clear();  // kills what still runs (and, by PR_SET_PDEATHSIG, its workers)
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  // Writes the folder's job.toml: config tiny (L=2, C=64, H=4, T=32) with tp=2 on the folder's
  // token data, no evaluation, asynchronous checkpoints into the folder's ckpt/ as `job` says.
  std::string TinyJobFile(const TinyJob& job = {}) const {
    const std::string path = (dir_ / "job.toml").string();
    std::ofstream out(path);
    out << "[job]\nname = \"tiny\"\n[elastic]\ntp = 2\nmin_nodes = 1\n"
        << "[model]\nn_layer = 2\nn_embd = 64\nn_head = 4\nseq_len = 32\n"
        << "[train]\nbatch_size = " << job.batch_size << "\nsteps = " << job.steps
        << "\nlog_every = 1000\n"
        << "[data]\ndir = \"" << (dir_ / "data").string() << "\"\n"
        << "[eval]\nevery = 0\n";
    if (!job.optim.empty()) out << "[optim]\n" << job.optim;
    if (job.metrics) out << "[metrics]\npath = \"" << (dir_ / "metrics.jsonl").string() << "\"\n";
    out << "[ckpt]\ndir = \"" << (job.ckpt_dir.empty() ? (dir_ / "ckpt").string() : job.ckpt_dir)
        << "\"\nevery = " << job.ckpt_every << "\nasync = true\n"
        << job.ckpt_extra;
    return path;
  }

  std::string Address(int id) const { return "127.0.0.1:" + std::to_string(ports_.at(id)); }

  // Starts daemon `id` with `slots`; node 1 bootstraps, the others join through it.
  // `extra_config` is appended to its node.toml, `extra_env` ("NAME=value") to its environment.
  void StartNode(int id, int slots, const std::string& extra_config = "",
                 const std::vector<std::string>& extra_env = {}) {
    if (!ports_.count(id)) ports_[id] = FreePort();
    const std::filesystem::path state = dir_ / ("node" + std::to_string(id));
    std::filesystem::create_directories(state);
    const std::string config = (state / "node.toml").string();
    std::ofstream(config) << "[node]\nid = " << id << "\nlisten = \"" << Address(id)
                          << "\"\nstate_dir = \"" << state.string() << "\"\nslots = " << slots
                          << "\n[cluster]\nseeds = \"" << (id == 1 ? "" : Address(1)) << "\"\n"
                          << cluster_keys_
                          << "[worker]\nstop_grace_ms = 500\nenv = \"OMP_NUM_THREADS=1\"\n"
                          << extra_config;
    SpawnOptions o;
    o.argv = {RINGTRAIND_BIN, "--config", config};
    o.env = EnvironmentWithout({});
    o.env.insert(o.env.end(), extra_env.begin(), extra_env.end());
    o.stdout_path = (state / "daemon.log").string();
    auto child = ChildProcess::Spawn(io_.get_executor(), o);
    ASSERT_TRUE(child.ok()) << child.status().ToString();
    nodes_[id] = std::move(*child);
  }

  // ringctl with `args` through daemon `id`; returns its exit status and output.
  ProcessOutcome Ctl(std::vector<std::string> args, int id = 1) {
    std::vector<std::string> argv = {RINGCTL_BIN, "--daemon", Address(id), "--timeout-ms", "60000"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunProcess(argv, EnvironmentWithout({}), Deadline::AfterMs(90'000));
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : ProcessOutcome{};
  }

  Result<Json> Status(int id) {
    return CallJsonBlocking(Address(id), nullptr, kCtlStatus, Json::object(),
                            Deadline::AfterMs(5'000));
  }

  // Polls daemon `id`'s status until `done` holds; returns the status that satisfied it.
  Json WaitFor(int id, const std::string& what, std::function<bool(const Json&)> done,
               std::chrono::milliseconds timeout = std::chrono::milliseconds(120'000)) {
    const Deadline deadline = Deadline::After(timeout);
    Json last;
    while (!deadline.Expired()) {
      Result<Json> s = Status(id);
      if (s.ok()) {
        last = *s;
        if (done(last)) return last;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "timed out waiting for " << what << "; last status: " << last.dump(2) << "\n"
                  << Logs();
    return last;
  }

  // Waits (bounded by `timeout`) for daemon `id` to exit and returns how it ended.
  Result<ChildExit> WaitExit(int id, std::chrono::milliseconds timeout) {
    Result<ChildExit> exit = DeadlineExceeded("node " + std::to_string(id) + " still runs");
    asio::co_spawn(
        io_,
        [&]() -> asio::awaitable<void> {
          exit = co_await nodes_[id]->Wait(Deadline::After(timeout));
        },
        asio::detached);
    io_.run();
    io_.restart();
    return exit;
  }

  // Whether each daemon started still runs, then the tails of every log under the cluster's
  // folder.
  std::string Logs() {
    std::string out;
    for (const auto& [id, node] : nodes_) {
      if (!node) continue;
      siginfo_t info{};
      const bool gone = ::waitid(P_PID, static_cast<id_t>(node->pid()), &info,
                                 WEXITED | WNOHANG | WNOWAIT) == 0 &&
                        info.si_pid != 0;
      out += "node " + std::to_string(id) + " (pid " + std::to_string(node->pid()) + "): " +
             (node->exit() ? node->exit()->Describe()
              : gone       ? "ended (status " + std::to_string(info.si_status) + ")"
                           : "runs") +
             "\n";
    }
    for (auto& entry : std::filesystem::recursive_directory_iterator(dir_)) {
      if (entry.path().extension() != ".log") continue;
      std::ifstream in(entry.path());
      std::string text((std::istreambuf_iterator<char>(in)), {});
      if (text.size() > 3000) text = "..." + text.substr(text.size() - 3000);
      out += "==> " + entry.path().string() + "\n" + text + "\n";
    }
    return out;
  }

  // Lines of daemon `id`'s log that contain `text`.
  std::vector<std::string> LogLines(int id, const std::string& text) {
    std::vector<std::string> lines;
    std::ifstream log(dir_ / ("node" + std::to_string(id)) / "daemon.log");
    for (std::string line; std::getline(log, line);)
      if (line.find(text) != std::string::npos) lines.push_back(line);
    return lines;
  }

  // The folder of job `job`'s generation `generation` whose rank 0 ran on one of nodes 1..5,
  // or "" when none.
  std::filesystem::path RankZeroDir(const std::string& job, const std::string& generation) const {
    for (int id = 1; id <= 5; ++id) {
      const auto d = dir_ / ("node" + std::to_string(id)) / "jobs" / (job + "-" + generation);
      if (std::filesystem::exists(d / "rank-0.log")) return d;
    }
    return "";
  }

  static size_t Members(const Json& s) { return s["view"]["members"].size(); }
  static std::string Generation(const Json& s) {
    return s.contains("progress") ? s["progress"]["generation"].get<std::string>() : "";
  }
  // True when the status's progress is of a generation of its current view ("job.VIEW.epoch").
  static bool OfTheView(const Json& s) {
    return Generation(s).find("." + std::to_string(s["view"]["generation"].get<int64_t>()) + ".") !=
           std::string::npos;
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
  // The plan that node `id` reports, "" when it did not answer.
  static std::string Plan(const Json& s, int id) {
    for (const Json& n : s["nodes"])
      if (n.value("node", 0) == id && n.contains("plan")) return n["plan"].get<std::string>();
    return "";
  }

  std::filesystem::path dir_;
  // More keys of every node's [cluster] section, "key = value\n" lines (e.g. etcd = "...").
  std::string cluster_keys_;
  boost::asio::io_context io_;
  std::map<int, uint16_t> ports_;
  std::map<int, std::unique_ptr<ChildProcess>> nodes_;
};

}  // namespace rt::daemon
