#include "base/process.h"

#include <fcntl.h>
#include <linux/close_range.h>  // CLOSE_RANGE_CLOEXEC
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>  // pidfd_open: glibc 2.36's sys/pidfd.h lacks extern "C"
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#ifndef P_PIDFD
#define P_PIDFD 3  // linux/wait.h; glibc 2.36's sys/wait.h does not define it
#endif

namespace rt {
namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;

namespace {

// A file descriptor closed when it leaves scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

Result<Fd> OpenOutput(const std::string& path) {
  const int fd = path.empty()
                     ? ::open("/dev/null", O_WRONLY | O_CLOEXEC)
                     : ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "open the child's output file '" + path + "'");
  return Fd(fd);
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (std::string& s : strings) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

// In the child after fork: only async-signal-safe calls. Reports errno through `report` and
// exits 127 on failure.
[[noreturn]] void ExecChild(pid_t parent, int death_signal, int niceness, int in, int out, int err,
                            int report, int max_fd, const char* cwd, char* const* argv,
                            char* const* envp) {
  auto fail = [report](int step) {
    const int e[2] = {step, errno};
    [[maybe_unused]] ssize_t n = ::write(report, e, sizeof(e));
    ::_exit(127);
  };
  if (::setpgid(0, 0) != 0) fail(1);
  if (death_signal != 0) {
    if (::prctl(PR_SET_PDEATHSIG, death_signal) != 0) fail(2);
    // The parent may have died before prctl: then nobody would send the signal.
    if (::getppid() != parent) ::_exit(127);
  }
  if (::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) fail(3);
  // Nothing but stdin, stdout and stderr crosses the exec: the parent's other descriptors
  // (sockets Asio opened without SOCK_CLOEXEC among them) would otherwise live on in the child.
  // A daemon's connection whose descriptor a long-lived worker held never closed for the peer:
  // ringfsd sessions piled up to max_connections_per_peer and refused the chain forwards (a
  // checkpoint write waited 30 s). CLOSE_RANGE_CLOEXEC keeps `report` open until the exec.
  if (::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = 3; fd < max_fd; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // older kernels
  }
  if (cwd != nullptr && ::chdir(cwd) != 0) fail(4);
  if (niceness != 0) {
    errno = 0;
    if (::nice(niceness) == -1 && errno != 0) fail(6);  // -1 is also a valid new niceness
  }
  // The signal mask and dispositions are inherited: give the program a clean slate.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s : {SIGPIPE, SIGTERM, SIGINT, SIGHUP}) ::signal(s, SIG_DFL);
  ::execve(argv[0], argv, envp);
  fail(5);
  ::_exit(127);
}

const char* ChildStepName(int step) {
  switch (step) {
    case 1:
      return "setpgid";
    case 2:
      return "prctl(PR_SET_PDEATHSIG)";
    case 3:
      return "dup2";
    case 4:
      return "chdir";
    case 6:
      return "nice";
    default:
      return "execve";
  }
}

ChildExit FromSiginfo(const siginfo_t& info) {
  ChildExit e;
  if (info.si_code == CLD_EXITED) {
    e.exited = true;
    e.exit_code = info.si_status;
  } else {
    e.signal = info.si_status;
  }
  return e;
}

}  // namespace

std::string ChildExit::Describe() const {
  if (exited) return "exit status " + std::to_string(exit_code);
  const char* name = ::strsignal(signal);
  return "signal " + std::to_string(signal) + " (" + (name ? name : "?") + ")";
}

struct ChildProcess::Impl {
  explicit Impl(asio::any_io_executor executor, int pidfd) : descriptor(executor, pidfd) {}
  asio::posix::stream_descriptor descriptor;  // the pidfd; readable once the child exits
  bool waiting = false;
  bool reaped = false;
};

ChildProcess::ChildProcess(pid_t pid, std::unique_ptr<Impl> impl)
    : pid_(pid), impl_(std::move(impl)) {}

Result<StartedChild> StartChild(const SpawnOptions& options) {
  if (options.argv.empty()) return InvalidArgument("spawn: empty argv");
  const std::string what = "start '" + options.argv[0] + "'";
  Fd in(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (in.get() < 0) return ErrnoStatus(errno, what + ": open /dev/null");
  Fd out, err;
  if (options.inherit_output) {
    out = Fd(::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3));
    err = Fd(::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3));
    if (out.get() < 0 || err.get() < 0) return ErrnoStatus(errno, what + ": dup stdout, stderr");
  } else if (options.output_fd >= 0) {
    out = Fd(::fcntl(options.output_fd, F_DUPFD_CLOEXEC, 3));
    err = Fd(::fcntl(options.output_fd, F_DUPFD_CLOEXEC, 3));
    if (out.get() < 0 || err.get() < 0) return ErrnoStatus(errno, what + ": dup the output fd");
  } else {
    ASSIGN_OR_RETURN(out, OpenOutput(options.stdout_path));
    if (options.stderr_path.empty() || options.stderr_path == options.stdout_path) {
      err = Fd(::fcntl(out.get(), F_DUPFD_CLOEXEC, 3));
      if (err.get() < 0) return ErrnoStatus(errno, what + ": dup the output file");
    } else {
      ASSIGN_OR_RETURN(err, OpenOutput(options.stderr_path));
    }
  }
  int report_pipe[2];
  if (::pipe2(report_pipe, O_CLOEXEC) != 0) return ErrnoStatus(errno, what + ": pipe");
  Fd report_read(report_pipe[0]), report_write(report_pipe[1]);
  std::vector<std::string> args = options.argv, envs = options.env;
  std::vector<char*> argv = Pointers(args);
  std::vector<char*> envp = Pointers(envs);
  const char* cwd = options.cwd.empty() ? nullptr : options.cwd.c_str();
  const pid_t parent = ::getpid();
  // Bounds the child's fallback loop over descriptors (when close_range is missing).
  rlimit files{};
  const int max_fd = ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < (1u << 20)
                         ? static_cast<int>(files.rlim_cur)
                         : (1 << 20);

  const pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus(errno, what + ": fork");
  if (pid == 0) {
    ExecChild(parent, options.death_signal, options.nice, in.get(), out.get(), err.get(),
              report_write.get(), max_fd, cwd, argv.data(), envp.data());
  }
  // Also set the group here, so a signal right after the start reaches it (a race setpgid allows).
  ::setpgid(pid, pid);
  report_write = Fd();
  int report[2] = {0, 0};
  ssize_t n;
  do {
    n = ::read(report_read.get(), report, sizeof(report));
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return ErrnoStatus(report[1], what + ": " + ChildStepName(report[0]) + " in the child");
  }
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    const int e = errno;
    ::kill(-pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return ErrnoStatus(e, what + ": pidfd_open");
  }
  return StartedChild{pid, pidfd};
}

Result<ChildExit> ReapChild(int pidfd) {
  siginfo_t info{};
  while (::waitid(static_cast<idtype_t>(P_PIDFD), pidfd, &info, WEXITED) < 0) {
    if (errno != EINTR)
      return ErrnoStatus(errno, "reap the child of pidfd " + std::to_string(pidfd));
  }
  return FromSiginfo(info);
}

Result<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(asio::any_io_executor executor,
                                                          SpawnOptions options) {
  ASSIGN_OR_RETURN(const StartedChild child, StartChild(options));
  auto impl = std::make_unique<Impl>(executor, child.pidfd);
  return std::unique_ptr<ChildProcess>(new ChildProcess(child.pid, std::move(impl)));
}

ChildProcess::~ChildProcess() {
  if (impl_->reaped) return;
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);  // in case it left its group
  siginfo_t info{};
  while (::waitid(static_cast<idtype_t>(P_PIDFD), impl_->descriptor.native_handle(), &info,
                  WEXITED) < 0 &&
         errno == EINTR) {
  }
}

asio::awaitable<Result<ChildExit>> ChildProcess::Wait(Deadline deadline) {
  if (exit_) co_return *exit_;
  if (impl_->waiting) co_return Aborted("pid " + std::to_string(pid_) + ": already awaited");
  impl_->waiting = true;
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_at(deadline.when());
  auto r = co_await (impl_->descriptor.async_wait(asio::posix::descriptor_base::wait_read,
                                                  asio::as_tuple(asio::use_awaitable)) ||
                     timer.async_wait(asio::as_tuple(asio::use_awaitable)));
  impl_->waiting = false;
  if (exit_) co_return *exit_;
  if (r.index() == 1) co_return DeadlineExceeded("pid " + std::to_string(pid_) + " still runs");
  const auto [error] = std::get<0>(r);
  if (error) co_return Aborted("wait for pid " + std::to_string(pid_) + ": " + error.message());
  siginfo_t info{};
  int rc;
  do {
    rc = ::waitid(static_cast<idtype_t>(P_PIDFD), impl_->descriptor.native_handle(), &info,
                  WEXITED | WNOHANG);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) co_return ErrnoStatus(errno, "reap pid " + std::to_string(pid_));
  if (info.si_pid == 0)
    co_return Internal("pidfd of pid " + std::to_string(pid_) +
                       " readable but the child has not exited");
  impl_->reaped = true;
  exit_ = FromSiginfo(info);
  co_return *exit_;
}

Status ChildProcess::Signal(int signal) {
  if (impl_->reaped) return Status();
  if (::kill(-pid_, signal) != 0 && errno != ESRCH)
    return ErrnoStatus(errno,
                       "signal " + std::to_string(signal) + " to pid " + std::to_string(pid_));
  return Status();
}

asio::awaitable<Result<ChildExit>> ChildProcess::Terminate(std::chrono::milliseconds grace) {
  if (exit_) co_return *exit_;
  CO_RETURN_IF_ERROR(Signal(SIGTERM));
  Result<ChildExit> r = co_await Wait(Deadline::After(grace));
  if (r.ok() || r.status().code() != StatusCode::kDeadlineExceeded) co_return r;
  CO_RETURN_IF_ERROR(Signal(SIGKILL));
  co_return co_await Wait(Deadline::After(std::chrono::seconds(10)));
}

}  // namespace rt
