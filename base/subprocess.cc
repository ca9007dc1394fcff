#include "base/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

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

// Waits until `fd` is readable or the deadline passes; false when the deadline passed first.
bool AwaitReadable(int fd, Deadline deadline) {
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const int64_t wait_ms = std::min<int64_t>(deadline.RemainingMs(), 1000);
    const int rc = ::poll(&p, 1, static_cast<int>(wait_ms));
    if (rc > 0 || (rc < 0 && errno != EINTR)) return true;  // an error: the caller's read decides
    if (deadline.Expired()) return false;
  }
}

// Reads the pipe until EOF or the deadline; false when the deadline passed first.
bool Drain(int fd, Deadline deadline, size_t max_output, std::string* out) {
  char buf[4096];
  while (true) {
    if (!AwaitReadable(fd, deadline)) return false;
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    const size_t room = max_output - std::min(max_output, out->size());
    out->append(buf, std::min(room, static_cast<size_t>(n)));
  }
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
  SpawnOptions options;
  options.argv = argv;
  options.env = env;
  options.output_fd = write_end.get();
  ASSIGN_OR_RETURN(const StartedChild child, StartChild(options));
  Fd pidfd(child.pidfd);
  write_end.Close();
  ProcessOutcome outcome;
  // The output ends when the child (and any grandchild holding the pipe) closes it; the child
  // may still run after that, so its exit is awaited under the same deadline.
  if (!Drain(read_end.get(), deadline, max_output, &outcome.output) ||
      !AwaitReadable(pidfd.get(), deadline)) {
    ::kill(-child.pid, SIGKILL);
    outcome.timed_out = true;
  }
  ASSIGN_OR_RETURN(const ChildExit exit, ReapChild(pidfd.get()));
  outcome.exited = exit.exited;
  outcome.exit_code = exit.exit_code;
  outcome.signal = exit.signal;
  return outcome;
}

Result<std::unique_ptr<SyncChild>> SyncChild::Start(const SpawnOptions& options) {
  ASSIGN_OR_RETURN(const StartedChild child, StartChild(options));
  return std::unique_ptr<SyncChild>(new SyncChild(child.pid, child.pidfd));
}

SyncChild::~SyncChild() {
  if (!exit_) Kill();
  ::close(pidfd_);
}

Status SyncChild::Signal(int signal) {
  if (exit_) return Status();
  if (::kill(-pid_, signal) != 0 && errno != ESRCH)
    return ErrnoStatus(errno,
                       "signal " + std::to_string(signal) + " to pid " + std::to_string(pid_));
  return Status();
}

std::optional<ChildExit> SyncChild::WaitExit(Deadline deadline) {
  if (exit_) return exit_;
  if (!AwaitReadable(pidfd_, deadline)) return std::nullopt;
  Result<ChildExit> reaped = ReapChild(pidfd_);
  RT_CHECK(reaped.ok());  // the pidfd is ours and readable: the child has exited
  exit_ = *reaped;
  return exit_;
}

ChildExit SyncChild::Kill() {
  if (exit_) return *exit_;
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);  // in case it left its group
  Result<ChildExit> reaped = ReapChild(pidfd_);
  RT_CHECK(reaped.ok());
  exit_ = *reaped;
  return *exit_;
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
