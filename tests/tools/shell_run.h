// Runs a command line through the shell for the CLI tests, capturing stdout and stderr together.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "base/status.h"

namespace rt::testing {

// What a command printed and how it ended.
struct ShellOutcome {
  int exit_code;  // -1 if killed by a signal
  std::string output;
};

// Runs `command` (a shell command line) with stderr joined to stdout; killed after
// `timeout_s` seconds (exit code 124 or 137 then), so a hung tool fails the test.
inline ShellOutcome RunShell(const std::string& command, int timeout_s = 600) {
  const std::string cmd =
      "timeout --kill-after=10 " + std::to_string(timeout_s) + " " + command + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  RT_CHECK(pipe != nullptr);
  ShellOutcome run{0, ""};
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) run.output.append(buf.data(), n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

}  // namespace rt::testing
