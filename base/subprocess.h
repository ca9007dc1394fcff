// Child processes without an event loop: running a short-lived one to completion under a
// deadline with its output captured (RunProcess), and supervising a long-running one from a tool
// or a test (SyncChild). Both start their children with base/process.h's StartChild.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/process.h"
#include "base/status.h"

namespace rt {

// How a child process ended and what it wrote.
struct ProcessOutcome {
  bool exited = false;     // true: it called exit (exit_code is set); false: a signal ended it
  int exit_code = -1;      // its exit status when `exited`
  int signal = 0;          // the signal that ended it when !`exited` (SIGKILL after a deadline)
  bool timed_out = false;  // the deadline passed and the child was killed with SIGKILL
  std::string output;      // everything it wrote to stdout and stderr, interleaved
  // "exit status 3", "signal 4 (Illegal instruction)" or "killed after its deadline".
  std::string Describe() const;
};

// Starts `argv[0]` (a path, not searched on PATH) with arguments `argv` and exactly the
// environment `env` ("NAME=value" entries), stdin from /dev/null, stdout and stderr into one
// pipe; collects the output and waits for the child, killing it with SIGKILL when `deadline`
// passes first (the outcome says so: no hang). Output beyond `max_output` bytes is dropped.
// Errors: InvalidArgument for an empty argv, IoError naming argv[0] when it cannot be started.
// Thread-safe (it reaps only its own child).
Result<ProcessOutcome> RunProcess(const std::vector<std::string>& argv,
                                  const std::vector<std::string>& env, Deadline deadline,
                                  size_t max_output = 1 << 20);

// This process's environment as "NAME=value" entries, without those whose name is in `drop`.
std::vector<std::string> EnvironmentWithout(const std::vector<std::string>& drop);

// A child started by StartChild and supervised synchronously: its waits poll its pidfd under a
// deadline. Destroying it while the child runs kills the child's process group with SIGKILL and
// reaps the child. Not thread-safe.
class SyncChild {
 public:
  // Starts the child. Errors: StartChild's.
  static Result<std::unique_ptr<SyncChild>> Start(const SpawnOptions& options);
  ~SyncChild();
  SyncChild(const SyncChild&) = delete;
  SyncChild& operator=(const SyncChild&) = delete;

  // The child's pid (also its process group id).
  pid_t pid() const { return pid_; }
  // How it ended, once a wait has reaped it.
  const std::optional<ChildExit>& exit() const { return exit_; }

  // Sends `signal` to the child's process group; a no-op once it has been reaped. Errors:
  // IoError with the errno.
  Status Signal(int signal);
  // Waits until the child exits (and reaps it) or `deadline` passes: its exit, or nullopt when
  // it still runs. Returns at once once it has exited.
  std::optional<ChildExit> WaitExit(Deadline deadline);
  // SIGKILL to the group, then reaps it: how it ended (its own exit if that came first).
  ChildExit Kill();

 private:
  SyncChild(pid_t pid, int pidfd) : pid_(pid), pidfd_(pidfd) {}
  pid_t pid_;
  int pidfd_;
  std::optional<ChildExit> exit_;
};

}  // namespace rt
