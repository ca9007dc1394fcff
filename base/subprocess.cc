#include "base/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <thread>

extern char** environ;

namespace rt {
namespace {

// Closes a file descriptor when it leaves scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Close(); }
  int get() const { return fd_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (std::string& s : strings) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

// Reads the pipe until EOF or the deadline; false when the deadline passed first.
bool Drain(int fd, Deadline deadline, size_t max_output, std::string* out) {
  char buf[4096];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const int64_t left = deadline.RemainingMs();
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (rc < 0 && errno != EINTR) return true;  // nothing more can be read; the wait decides
    if (rc <= 0) {
      if (deadline.Expired()) return false;
      continue;
    }
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    const size_t room = max_output - std::min(max_output, out->size());
    out->append(buf, std::min(room, static_cast<size_t>(n)));
  }
}

// Waits for `pid` until the deadline; SIGKILL (and a final reap) when it passes.
void Reap(pid_t pid, Deadline deadline, ProcessOutcome* outcome) {
  int status = 0;
  while (true) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return;
    if (deadline.Expired()) {
      ::kill(pid, SIGKILL);
      outcome->timed_out = true;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  outcome->exited = WIFEXITED(status);
  outcome->exit_code = outcome->exited ? WEXITSTATUS(status) : -1;
  outcome->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

}  // namespace

std::string ProcessOutcome::Describe() const {
  if (timed_out) return "killed after its deadline";
  if (exited) return "exit status " + std::to_string(exit_code);
  return "signal " + std::to_string(signal) + " (" + ::strsignal(signal) + ")";
}

Result<ProcessOutcome> RunProcess(const std::vector<std::string>& argv,
                                  const std::vector<std::string>& env, Deadline deadline,
                                  size_t max_output) {
  if (argv.empty()) return InvalidArgument("RunProcess: empty argv");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe for " + argv[0]);
  Fd read_end(fds[0]), write_end(fds[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 2);
  std::vector<std::string> args = argv, envs = env;
  std::vector<char*> arg_ptrs = Pointers(args), env_ptrs = Pointers(envs);
  pid_t pid = 0;
  const int err =
      ::posix_spawn(&pid, args[0].c_str(), &actions, nullptr, arg_ptrs.data(), env_ptrs.data());
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return ErrnoStatus(err, "start '" + argv[0] + "'");
  write_end.Close();
  ProcessOutcome outcome;
  if (!Drain(read_end.get(), deadline, max_output, &outcome.output)) {
    ::kill(pid, SIGKILL);
    outcome.timed_out = true;
  }
  Reap(pid, deadline, &outcome);
  return outcome;
}

std::vector<std::string> EnvironmentWithout(const std::vector<std::string>& drop) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    if (std::find(drop.begin(), drop.end(), name) == drop.end()) env.emplace_back(entry);
  }
  return env;
}

}  // namespace rt
