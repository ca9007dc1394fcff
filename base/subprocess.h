// Running a short-lived child process to completion under a deadline, its output captured.
#pragma once

#include <string>
#include <vector>

#include "base/deadline.h"
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

}  // namespace rt
