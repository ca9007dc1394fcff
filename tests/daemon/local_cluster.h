// A local cluster of real ringtraind processes on loopback for the daemon's tests: free ports,
// daemons started and killed as child processes, ringctl runs, status polls with deadlines.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "base/process.h"
#include "base/subprocess.h"
#include "daemon/control_api.h"
#include "data/token_shard.h"
#include "tests/parallel/test_util.h"

namespace rt::daemon {

namespace asio = boost::asio;
using std::chrono::milliseconds;

// A loopback TCP port free now (the OS's pick).
inline uint16_t FreePort() {
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
inline bool ExitsWithin(pid_t pid, milliseconds timeout) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;
  pollfd p{fd, POLLIN, 0};
  const int rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
  ::close(fd);
  return rc == 1;
}

// A fixture that runs a local cluster of real ringtraind processes on loopback, in a scratch
// folder with token shards for config tiny (data/train_000.bin, data/val.bin).
class LocalClusterTest : public ::testing::Test {
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
  // `extra_config` is appended to its node.toml, `extra_env` ("NAME=value") to its environment.
  void StartNode(int id, int slots, const std::string& extra_config = "",
                 const std::vector<std::string>& extra_env = {}) {
    if (!ports_.count(id)) ports_[id] = FreePort();
    const std::filesystem::path state = dir_ / ("node" + std::to_string(id));
    std::filesystem::create_directories(state);
    const std::string config = (state / "node.toml").string();
    std::ofstream(config) << "[node]\nid = " << id << "\nlisten = \"" << Address(id)
                          << "\"\nstate_dir = \"" << state.string() << "\"\nslots = " << slots
                          << "\n[cluster]\nseeds = \"" << (id == 1 ? "" : Address(1))
                          << "\"\n[worker]\nstop_grace_ms = 500\nenv = \"OMP_NUM_THREADS=1\"\n"
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

  std::string JobFile(const std::string& extra = "") {
    const std::string path = (dir_ / "job.toml").string();
    std::ofstream(path) << "[job]\nname = \"tiny\"\n[elastic]\ntp = 2\nmin_nodes = 1\n"
                        << "[model]\nn_layer = 2\nn_embd = 64\nn_head = 4\nseq_len = 32\n"
                        << "[train]\nbatch_size = 12\nsteps = 1000000\nlog_every = 1000\n"
                        << "[data]\ndir = \"" << (dir_ / "data").string() << "\"\n"
                        << "[eval]\nevery = 0\n"
                        << "[ckpt]\ndir = \"" << (dir_ / "ckpt").string()
                        << "\"\nevery = 5\nasync = true\n"
                        << extra;
    return path;
  }

  std::filesystem::path dir_;
  asio::io_context io_;
  std::map<int, uint16_t> ports_;
  std::map<int, std::unique_ptr<ChildProcess>> nodes_;
};

}  // namespace rt::daemon
