// Child processes for the multi-process tests: ringfsd nodes (and other servers) with their
// output going to a log file, killed with SIGKILL or stopped with SIGTERM (deadline-bounded).
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "base/net/free_port.h"
#include "base/subprocess.h"
#include "tests/iofs/test_util.h"

namespace rt::iofs::testing {

// A free TCP port on 127.0.0.1 (net::FreeLoopbackPort); 0 when none was.
inline uint16_t FreePort() {
  Result<uint16_t> port = net::FreeLoopbackPort();
  return port.ok() ? *port : 0;
}

// A running child process (base/subprocess.h's SyncChild: its own process group, reaped
// through a pidfd). Waits return wait statuses ("int status" as waitpid gives them).
class Process {
 public:
  Process() = default;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process() { Kill(); }

  // Starts `argv` with this process's environment (less RINGTRAIN_FAULTS) plus `env`; output
  // appended to `log`. The child is not tied to the starting thread's life (tests start
  // children from helper threads).
  bool Start(const std::vector<std::string>& argv, const std::vector<std::string>& env,
             const std::string& log) {
    SpawnOptions options;
    options.argv = argv;
    options.env = EnvironmentWithout({"RINGTRAIN_FAULTS"});
    options.env.insert(options.env.end(), env.begin(), env.end());
    options.stdout_path = log;
    options.death_signal = 0;
    Result<std::unique_ptr<SyncChild>> child = SyncChild::Start(options);
    if (!child.ok()) return false;
    child_ = std::move(*child);
    return true;
  }

  // kill -9, then reap. Returns the wait status (or -1 if not running).
  int Kill() {
    if (!child_) return -1;
    return Finish(child_->Kill());
  }

  // SIGTERM, then wait up to `timeout` (SIGKILL after: then -1).
  int Stop(std::chrono::milliseconds timeout) {
    if (!child_) return -1;
    (void)child_->Signal(SIGTERM);
    return WaitExit(timeout);
  }

  // Sends `signal` (e.g. SIGSTOP/SIGCONT: a node that hangs, then goes on).
  bool Signal(int signal) { return child_ && child_->Signal(signal).ok(); }

  // Waits up to `timeout` for the process to exit on its own (killing it after) and returns its
  // wait status (-1 if it had to be killed or was not running).
  int WaitExit(std::chrono::milliseconds timeout) {
    if (!child_) return -1;
    const std::optional<ChildExit> exit = child_->WaitExit(Deadline::After(timeout));
    if (!exit) {
      Finish(child_->Kill());
      return -1;
    }
    return Finish(*exit);
  }

  // True while the process has not exited (reaps it if it has).
  bool Running() {
    if (!child_) return false;
    const std::optional<ChildExit> exit = child_->WaitExit(Deadline::AfterMs(0));
    if (!exit) return true;
    Finish(*exit);
    return false;
  }
  int exit_status() const { return exit_status_; }
  pid_t pid() const { return child_ ? child_->pid() : -1; }

 private:
  int Finish(const ChildExit& exit) {
    exit_status_ = exit.exited ? W_EXITCODE(exit.exit_code, 0) : W_EXITCODE(0, exit.signal);
    child_.reset();
    return exit_status_;
  }
  std::unique_ptr<SyncChild> child_;
  int exit_status_ = 0;
};

// Reads a whole text file (for printing logs on failure).
inline std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace rt::iofs::testing
