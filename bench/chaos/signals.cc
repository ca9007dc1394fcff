#include "bench/chaos/signals.h"

#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <map>
#include <mutex>
#include <thread>

#include "base/log.h"

namespace rt::chaos {
namespace {

std::mutex& Mu() {
  static std::mutex mu;
  return mu;
}

std::map<int, std::function<void()>>& Cleanups() {
  static std::map<int, std::function<void()>> cleanups;
  return cleanups;
}

int next_id = 1;

}  // namespace

void CatchTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    int signal = 0;
    if (::sigwait(&set, &signal) != 0) return;
    LOG_WARN("chaos: signal {}: removing what the campaign made, then exiting", signal);
    std::lock_guard lock(Mu());
    for (auto it = Cleanups().rbegin(); it != Cleanups().rend(); ++it) it->second();
    spdlog::default_logger()->flush();
    ::_exit(128 + signal);
  }).detach();
}

int AddSignalCleanup(std::function<void()> cleanup) {
  std::lock_guard lock(Mu());
  Cleanups()[next_id] = std::move(cleanup);
  return next_id++;
}

void RemoveSignalCleanup(int id) {
  std::lock_guard lock(Mu());
  Cleanups().erase(id);
}

}  // namespace rt::chaos
