// Supervised child processes: spawn a long-running child in its own process group, tied to this
// process by PR_SET_PDEATHSIG, and await its exit through Boost.Asio on a pidfd (no polling, no
// SIGCHLD handler). The daemon's workers are run this way (docs/daemon.md).
//
// Threading: a ChildProcess belongs to the executor it was spawned on; await Wait() and
// Terminate() there. Signal() and pid() may be called from any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "base/deadline.h"
#include "base/status.h"

namespace rt {

// What a spawned child gets.
struct SpawnOptions {
  // argv[0] is the executable's path (not searched on PATH); the rest are its arguments.
  std::vector<std::string> argv;
  // Exactly this environment ("NAME=value" entries); see EnvironmentWithout (base/subprocess.h).
  std::vector<std::string> env;
  // Working directory; "" = this process's.
  std::string cwd;
  // File that receives the child's stdout, appended to (created 0644); "" = /dev/null.
  std::string stdout_path;
  // File for stderr; "" = the same file as stdout.
  std::string stderr_path;
  // Signal the child gets when the thread that spawned it exits (PR_SET_PDEATHSIG): spawn from
  // a thread that lives as long as the supervisor (an io_context's thread). 0 = none.
  int death_signal = SIGKILL;
  // When >= 0: the child's stdout and stderr both go to this descriptor (e.g. a pipe's write
  // end), and the two paths above are not used. The caller keeps ownership.
  int output_fd = -1;
  // True: the child writes to this process's stdout and stderr, whatever they are (a terminal,
  // a pipe, a file); the two paths and `output_fd` are not used.
  bool inherit_output = false;
  // Added to the child's niceness before the exec (nice(2)): > 0 gives it a lower CPU priority
  // than this process, so this process's own work (a daemon's heartbeats and storage service)
  // preempts the child's computation. 0 = the same priority.
  int nice = 0;
};

// A child started by StartChild: its pid (also its process group id) and a pidfd on it, which
// the caller owns (close it after reaping the child through it).
struct StartedChild {
  pid_t pid = -1;
  int pidfd = -1;
};

// Starts `options.argv[0]` the one way every child of ringtrain is started: a new process
// group led by the child, PR_SET_PDEATHSIG, stdin from /dev/null, stdout/stderr as `options`
// say, a clean signal mask, then execve; synchronous. Errors: InvalidArgument for an empty
// argv; IoError naming the file for an output file that cannot be opened; IoError naming
// argv[0] and the errno when the fork, the setup in the child or the exec fails (the child's
// errno is reported back through a pipe, so a missing executable is an error here, not an exit
// status later).
Result<StartedChild> StartChild(const SpawnOptions& options);

// How a child ended.
struct ChildExit {
  bool exited = false;  // true: it called exit (exit_code set); false: a signal ended it
  int exit_code = -1;   // its exit status when `exited`
  int signal = 0;       // the signal that ended it otherwise
  // "exit status 3" or "signal 9 (Killed)".
  std::string Describe() const;
  bool ok() const { return exited && exit_code == 0; }
};

// Reaps the child behind `pidfd` (a StartedChild's), blocking until it exits, and says how it
// ended. Errors: IoError with the errno of waitid.
Result<ChildExit> ReapChild(int pidfd);

// One spawned child, owned by this object. Destroying it while the child still runs kills the
// child's process group with SIGKILL and reaps the child (never leaves a zombie or an orphan).
class ChildProcess {
 public:
  // Starts the child with StartChild and watches its pidfd on `executor`. Errors: StartChild's.
  static Result<std::unique_ptr<ChildProcess>> Spawn(boost::asio::any_io_executor executor,
                                                     SpawnOptions options);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // The child's pid (also its process group id).
  pid_t pid() const { return pid_; }
  // The exit, once Wait() has seen it.
  const std::optional<ChildExit>& exit() const { return exit_; }

  // Waits for the child to exit (the pidfd becomes readable) and reaps it. Returns at once once
  // it has exited. Errors: DeadlineExceeded naming the pid when `deadline` passes first (the
  // child runs on); Aborted when another Wait is already outstanding.
  boost::asio::awaitable<Result<ChildExit>> Wait(Deadline deadline);

  // Sends `signal` to the child's whole process group. Errors: IoError with the errno (none
  // once the child has been reaped: then it is a no-op). Thread-safe.
  Status Signal(int signal);

  // SIGTERM to the group, waits up to `grace`, then SIGKILL and waits for the exit (a SIGKILL'd
  // process exits promptly; the wait is bounded by `grace` + 10 s). Returns how it ended.
  boost::asio::awaitable<Result<ChildExit>> Terminate(std::chrono::milliseconds grace);

 private:
  struct Impl;
  ChildProcess(pid_t pid, std::unique_ptr<Impl> impl);
  pid_t pid_;
  std::unique_ptr<Impl> impl_;
  std::optional<ChildExit> exit_;
};

}  // namespace rt
