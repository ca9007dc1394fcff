#include "bench/chaos/observe.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <regex>
#include <thread>

namespace rt::chaos {

std::string Observer::Generation(const Json& s) {
  const auto it = s.find("progress");
  return it != s.end() && it->contains("generation") ? (*it)["generation"].get<std::string>() : "";
}

std::string Observer::NewestGeneration(const Json& s) {
  std::string newest = Generation(s);
  if (s.contains("nodes"))
    for (const Json& n : s["nodes"]) {
      const std::string g = n.value("generation", "");
      if (!g.empty() && GenerationOrder(g) > GenerationOrder(newest)) newest = g;
    }
  return newest;
}

namespace {
// An integer field of the status's progress; 0 when absent.
int64_t ProgressField(const Json& s, const char* key) {
  const auto it = s.find("progress");
  return it != s.end() ? it->value(key, int64_t{0}) : 0;
}
}  // namespace

int64_t Observer::FirstStepUnixMs(const Json& s) { return ProgressField(s, "first_unix_ms"); }

int64_t Observer::ProgressUnixMs(const Json& s) { return ProgressField(s, "unix_ms"); }

int64_t Observer::Step(const Json& s) {
  const auto it = s.find("progress");
  return it != s.end() && it->contains("step") ? (*it)["step"].get<int64_t>() : 0;
}

std::vector<int> Observer::MemberIds(const Json& s) {
  std::vector<int> ids;
  if (s.contains("view"))
    for (const Json& m : s["view"]["members"]) ids.push_back(m["id"].get<int>());
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<WorkerInfo> Observer::Workers(const Json& s) {
  std::vector<WorkerInfo> workers;
  if (!s.contains("nodes")) return workers;
  for (const Json& n : s["nodes"]) {
    if (!n.contains("workers")) continue;
    for (const Json& w : n["workers"])
      workers.push_back({n.value("node", 0), w.value("rank", 0), w.value("pid", 0)});
  }
  return workers;
}

bool Observer::Finished(const Json& s) {
  return s.contains("job") && s["job"].value("desire", "") == "finished";
}

int64_t Observer::FinishedStep(const Json& s) {
  return s.contains("job") ? s["job"].value("finished_step", int64_t{0}) : 0;
}

Result<Json> Observer::Until(const std::string& what, Deadline deadline,
                             const std::function<bool(const Json&)>& done) {
  Json last;
  while (true) {
    Result<Json> s = cluster_.ClusterStatus(Deadline::AfterMs(call_ms_));
    if (s.ok()) {
      last = std::move(*s);
      if (done(last)) return last;
    }
    if (deadline.Expired()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return DeadlineExceeded("waiting for " + what + "; last status: " + last.dump());
}

Result<Json> Observer::WaitProgress(const std::string& generation, int64_t step,
                                    bool new_generation, Deadline deadline) {
  return Until("progress after generation " + generation + " step " + std::to_string(step),
               deadline, [&](const Json& s) {
                 const std::string g = Generation(s);
                 if (Finished(s)) return true;
                 if (!g.empty() && g != generation) return true;
                 return !new_generation && g == generation && Step(s) > step;
               });
}

Result<Json> Observer::WaitHealthy(int nodes, Deadline deadline) {
  std::string generation;
  int64_t first_step = -1;
  return Until(
      "a healthy cluster of " + std::to_string(nodes) + " training", deadline, [&](const Json& s) {
        if (Finished(s)) return true;
        const std::string g = Generation(s);
        bool whole = static_cast<int>(MemberIds(s).size()) == nodes && !g.empty();
        for (const Json& n : s.value("nodes", Json::array()))
          whole =
              whole && n.value("generation", "") == g && !n.value("workers", Json::array()).empty();
        if (!whole) {
          generation.clear();
          return false;
        }
        if (g != generation) {
          generation = g;
          first_step = Step(s);
          return false;
        }
        return Step(s) > first_step;
      });
}

Result<Json> Observer::WaitFinished(Deadline deadline) {
  return Until("the job to finish", deadline, [](const Json& s) { return Finished(s); });
}

Result<Json> Observer::WaitStep(int64_t step, Deadline deadline) {
  return Until("step " + std::to_string(step), deadline,
               [&](const Json& s) { return Step(s) >= step; });
}

Status Observer::WaitNoWorkers(Deadline deadline) {
  return Until("no workers", deadline, [](const Json& s) { return Workers(s).empty(); }).status();
}

Result<double> Observer::MeasureRate(int nodes, double seconds, Deadline deadline) {
  while (!deadline.Expired()) {
    ASSIGN_OR_RETURN(Json s, WaitHealthy(nodes, deadline));
    ASSIGN_OR_RETURN(s, WaitStep(Step(s) + 5, deadline));
    const MonoTime t0 = MonoClock::now();
    const int64_t s0 = Step(s);
    const std::string generation = Generation(s);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    ASSIGN_OR_RETURN(Json end, cluster_.ClusterStatus(Deadline::AfterMs(call_ms_)));
    if (Generation(end) != generation) continue;  // something restarted it: measure again
    const double elapsed = std::chrono::duration<double>(MonoClock::now() - t0).count();
    return static_cast<double>(Step(end) - s0) / elapsed;
  }
  return DeadlineExceeded("measuring the fault-free steps per second");
}

std::pair<int64_t, int64_t> GenerationOrder(const std::string& generation) {
  long long job = 0, view = 0, epoch = 0;
  if (std::sscanf(generation.c_str(), "%lld.%lld.%lld", &job, &view, &epoch) != 3) return {-1, -1};
  return {view, epoch};
}

std::vector<RecoveryLine> ReadRecoveryLines(const std::string& dir, int nodes) {
  static const std::regex kLine(
      R"(recovery: (.*); generation ([0-9]+\.[0-9]+\.[0-9]+); .*resumed at step ([0-9]+))");
  std::vector<RecoveryLine> lines;
  for (int id = 1; id <= nodes; ++id) {
    std::ifstream in(dir + "/node" + std::to_string(id) + "/daemon.log");
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, kLine)) continue;
      lines.push_back({m[2].str(), std::stoll(m[3].str()), m[1].str()});
    }
  }
  std::sort(lines.begin(), lines.end(), [](const RecoveryLine& a, const RecoveryLine& b) {
    return GenerationOrder(a.generation) < GenerationOrder(b.generation);
  });
  return lines;
}

void CheckCorruptResumes(CampaignResult& r) {
  for (const FaultRecord& f : r.faults) {
    if (f.kind != FaultKind::kFlipByte || !f.skipped.empty()) continue;
    for (const RecoveryLine& line : r.recoveries)
      if (GenerationOrder(line.generation) > GenerationOrder(f.gen_before) &&
          r.corrupted.contains(line.first_step - 1))
        r.corrupt_resumes.push_back(line.generation);
  }
  std::sort(r.corrupt_resumes.begin(), r.corrupt_resumes.end());
  r.corrupt_resumes.erase(std::unique(r.corrupt_resumes.begin(), r.corrupt_resumes.end()),
                          r.corrupt_resumes.end());
}

}  // namespace rt::chaos
