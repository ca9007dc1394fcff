// Child processes for the multi-process iofs tests: ringfsd nodes started with posix_spawn,
// their output going to a log file, killed with SIGKILL or stopped with SIGTERM (deadline-bounded).
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/iofs/test_util.h"

extern char** environ;

namespace rt::iofs::testing {

// A free TCP port on 127.0.0.1 (bound and released; good enough for tests).
inline uint16_t FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// A running child process.
class Process {
 public:
  Process() = default;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process() { Kill(); }

  // Starts `argv` with extra environment entries; output appended to `log`.
  bool Start(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& log) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e)
      if (std::string_view(*e).rfind("RINGTRAIN_FAULTS=", 0) != 0) env_strings.emplace_back(*e);
    for (const auto& e : env) env_strings.push_back(e);
    std::vector<char*> envp, args;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_copy = argv;
    for (auto& s : argv_copy) args.push_back(s.data());
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) pid_ = -1;
    return rc == 0;
  }

  // kill -9, then reap. Returns the wait status (or -1 if not running).
  int Kill() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGKILL);
    return Reap();
  }

  // SIGTERM, then wait up to `timeout` (SIGKILL after).
  int Stop(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    const int status = WaitChild(pid_, timeout);
    pid_ = -1;
    return status;
  }

  // Waits up to `timeout` for the process to exit on its own (killing it after) and returns its
  // wait status (-1 if it had to be killed or was not running).
  int WaitExit(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return -1;
    const int status = WaitChild(pid_, timeout);
    pid_ = -1;
    exit_status_ = status;
    return status;
  }

  // True while the process has not exited (reaps it if it has).
  bool Running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_status_ = status;
      pid_ = -1;
      return false;
    }
    return true;
  }
  int exit_status() const { return exit_status_; }
  pid_t pid() const { return pid_; }

 private:
  int Reap() {
    int status = WaitChild(pid_, std::chrono::seconds(10));
    pid_ = -1;
    return status;
  }
  pid_t pid_ = -1;
  int exit_status_ = 0;
};

// Reads a whole text file (for printing logs on failure).
inline std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace rt::iofs::testing
