// Checks that processes are gone, for the tests of tools that start process trees
// (`ringtrain launch`, `ringtrain demo`).
#pragma once

#include <poll.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace rt::testing {

// The whole text of a file ("" when it cannot be read).
inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// True when `pid` has exited (or is gone) within `timeout`, seen through a pidfd.
inline bool ExitsWithin(pid_t pid, std::chrono::milliseconds timeout) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;
  pollfd p{fd, POLLIN, 0};
  const int rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
  ::close(fd);
  return rc == 1;
}

// The pids of live (not zombie) processes whose command line contains `text`.
inline std::vector<pid_t> ProcessesMentioning(const std::string& text) {
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = ReadFile(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    const std::string stat = ReadFile(entry.path() / "stat");
    const size_t state = stat.rfind(") ");
    const bool zombie = state != std::string::npos && stat.compare(state + 2, 1, "Z") == 0;
    if (!zombie && cmdline.find(text) != std::string::npos) found.push_back(std::stoi(name));
  }
  return found;
}

}  // namespace rt::testing
