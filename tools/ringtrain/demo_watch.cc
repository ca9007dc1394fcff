// Progress and recovery lines of `ringtrain demo` (demo_watch.h).
#include "tools/ringtrain/demo_watch.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

namespace rt::cli {

using Json = nlohmann::json;

int64_t Step(const Json& s) {
  return s.contains("progress") ? s["progress"].value("step", int64_t{0}) : 0;
}

std::string Generation(const Json& s) {
  return s.contains("progress") ? s["progress"].value("generation", std::string()) : "";
}

std::string Plan(const Json& s) {
  if (!s.contains("nodes")) return "";
  for (const Json& n : s["nodes"]) {
    const std::string plan = n.value("plan", std::string());
    if (!plan.empty()) return plan;
  }
  return "";
}

std::vector<pid_t> WorkerPids(const Json& s, int id) {
  std::vector<pid_t> pids;
  if (!s.contains("nodes")) return pids;
  for (const Json& n : s["nodes"])
    if (n.value("node", 0) == id && n.contains("workers"))
      for (const Json& w : n["workers"]) pids.push_back(w["pid"].get<pid_t>());
  return pids;
}

Result<Json> DemoWatch::Until(const std::string& what, const std::function<bool(const Json&)>& done,
                              Deadline deadline) {
  auto show = [this](const Json& s) {
    const std::string generation = Generation(s);
    const int64_t step = Step(s);
    const auto now = std::chrono::steady_clock::now();
    if (generation.empty() || step == shown_step_) return;
    if (generation == shown_generation_ && now - shown_at_ < std::chrono::seconds(2)) return;
    std::string layout = Plan(s);
    layout = layout.substr(0, layout.find(" on node"));
    const Json& p = s["progress"];
    std::printf("   step %5lld/%d  loss %.4f  %7.0f tok/s  %s  generation %s\n",
                static_cast<long long>(step), steps_, p.value("loss", 0.0),
                p.value("tokens_per_s", 0.0), layout.c_str(), generation.c_str());
    std::fflush(stdout);
    shown_generation_ = generation;
    shown_step_ = step;
    shown_at_ = now;
  };
  return cluster_.WaitFor(
      what,
      [&](const Json& s) {
        show(s);
        return done(s);
      },
      deadline, StopRequested);
}

void DemoWatch::MarkLogs() {
  log_marks_.clear();
  for (int id : cluster_.RunningNodes()) {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(cluster_.LogPath(id), ec);
    log_marks_[id] = ec ? 0 : size;
  }
}

Status DemoWatch::PrintRecovery(Deadline deadline) {
  const Deadline wait = Deadline::AfterMs(std::min<int64_t>(10'000, deadline.RemainingMs()));
  while (!wait.Expired() && !StopRequested()) {
    for (int id : cluster_.RunningNodes()) {
      std::ifstream log(cluster_.LogPath(id));
      log.seekg(static_cast<std::streamoff>(log_marks_[id]));
      for (std::string line; std::getline(log, line);) {
        const size_t at = line.find("recovery: ");
        if (at == std::string::npos) continue;
        std::printf("   | node %d: %s\n", id, line.substr(at).c_str());
        // "resumed at step N, steps lost K (...)" (docs/daemon.md).
        static const std::regex kResumed("resumed at step ([0-9]+), steps lost ([0-9]+)");
        std::smatch m;
        if (std::regex_search(line, m, kResumed)) {
          const long long first = std::stoll(m[1]);
          if (first > 1) {
            std::printf("== loaded from the checkpoint of step %lld; %s step(s) lost\n", first - 1,
                        m[2].str().c_str());
          } else {
            std::printf("== no checkpoint yet: started from step 1; %s step(s) lost\n",
                        m[2].str().c_str());
          }
        }
        std::fflush(stdout);
        MarkLogs();
        return Status();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return DeadlineExceeded("no daemon logged a recovery line within 10 s");
}

}  // namespace rt::cli
