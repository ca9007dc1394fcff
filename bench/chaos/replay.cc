#include "bench/chaos/replay.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "base/deadline.h"
#include "base/log.h"
#include "base/subprocess.h"

namespace rt::chaos {
namespace fs = std::filesystem;

namespace {

// "worker: generation G rank 0/N layout L, ..." (daemon/worker.cc).
const std::regex kWorkerLine(
    R"(worker: generation (\S+) rank 0/(\d+) layout ([^,\s]+(,[^,\s]+)*),)");
// "resuming from checkpoint S in URI (written by ..." or "... from memory snapshot S in URI ..."
// (parallel/checkpointing.cc).
// "... (written by layout L, run R)", and "checkpoint run id R" (parallel/checkpointing.cc).
const std::regex kResumeLine(
    R"(resuming from (?:memory snapshot|checkpoint) (\d+) in (\S+) \(written by layout \S+ run (\w+)\))");
const std::regex kRunIdLine(R"(checkpoint run id (\w+))");
// "checkpoint step S committed to URI in T s" (ckpt/writer.cc).
const std::regex kCommitLine(R"(checkpoint step (\d+) committed to (\S+) in )");

// The time stamp a log line starts with ("YYYY-MM-DD HH:MM:SS.mmm"), "" when none.
std::string LogTime(const std::string& line) {
  return line.size() >= 23 && line[4] == '-' && line[10] == ' ' ? line.substr(0, 23) : "";
}

}  // namespace

std::string StoreOf(const std::string& uri) {
  for (const std::string scheme : {"memtier://", "ringfs://"}) {
    if (uri.rfind(scheme, 0) != 0) continue;
    const size_t slash = uri.find('/', scheme.size());
    if (slash == std::string::npos) return uri;
    return scheme + (scheme == "ringfs://" ? "/" : "") + uri.substr(slash + 1);
  }
  return uri;
}

std::vector<TrainedGeneration> ReadGenerations(const std::string& dir, int nodes,
                                               const std::string& job) {
  std::vector<TrainedGeneration> out;
  const std::string prefix = job + "-";
  for (int id = 1; id <= nodes; ++id) {
    const fs::path jobs = fs::path(dir) / ("node" + std::to_string(id)) / "jobs";
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(jobs, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) != 0) continue;
      std::ifstream log(e.path() / "rank-0.log");
      if (!log) continue;
      TrainedGeneration g;
      g.folder = e.path().string();
      for (std::string line; std::getline(log, line);) {
        std::smatch m;
        if (g.layout.empty() && std::regex_search(line, m, kWorkerLine)) {
          g.generation = m[1].str();
          g.ranks = std::stoi(m[2].str());
          g.layout = m[3].str();
        } else if (g.resumed_from < 0 && std::regex_search(line, m, kResumeLine)) {
          g.resumed_from = std::stoll(m[1].str());
          g.resumed_uri = m[2].str();
          g.resumed_run = m[3].str();
        } else if (g.run_id.empty() && std::regex_search(line, m, kRunIdLine)) {
          g.run_id = m[1].str();
        } else if (std::regex_search(line, m, kCommitLine)) {
          g.commits.push_back({std::stoll(m[1].str()), m[2].str(), LogTime(line)});
        }
      }
      if (!g.layout.empty()) out.push_back(std::move(g));
    }
  }
  return out;
}

Result<std::vector<HistorySegment>> LayoutHistory(const std::vector<TrainedGeneration>& gens,
                                                  int64_t final_step,
                                                  const std::string& final_uri) {
  // The final state's writer: the generation that last logged its commit (the job finished, so
  // its rank 0 lived to log it).
  const TrainedGeneration* g = nullptr;
  std::string last_at;
  for (const TrainedGeneration& candidate : gens)
    for (const TrainedGeneration::Commit& c : candidate.commits)
      if (c.step == final_step && StoreOf(c.uri) == StoreOf(final_uri) &&
          (g == nullptr || c.at > last_at)) {
        g = &candidate;
        last_at = c.at;
      }
  if (g == nullptr)
    return NotFound("no generation's rank 0 logged the commit of step " +
                    std::to_string(final_step) + " to " + final_uri);
  std::vector<HistorySegment> chain;
  int64_t to = final_step;
  for (size_t links = 0; links <= gens.size(); ++links) {
    chain.push_back({g->generation, g->folder + "/run.toml", g->layout, g->ranks,
                     std::max<int64_t>(g->resumed_from, 0), to});
    if (g->resumed_from < 0) {
      std::reverse(chain.begin(), chain.end());
      return chain;
    }
    // The state it loaded names the run that wrote it; each generation logged its run id. (Not
    // the commit lines: a writer killed between its commit and the log line leaves none.)
    const std::string what = "generation " + g->generation + " resumed from step " +
                             std::to_string(g->resumed_from) + " in " + g->resumed_uri;
    if (g->resumed_run.empty()) return NotFound(what + " but its log names no run id for it");
    const TrainedGeneration* from = nullptr;
    for (const TrainedGeneration& candidate : gens)
      if (candidate.run_id == g->resumed_run) from = &candidate;
    if (from == nullptr)
      return NotFound(what + ", written by run " + g->resumed_run +
                      ", which no generation's rank 0 logged");
    if (from->resumed_from >= g->resumed_from)
      return Internal(what + " of run " + g->resumed_run + " (generation " + from->generation +
                      "), which itself started at step " + std::to_string(from->resumed_from));
    to = g->resumed_from;
    g = from;
  }
  return Internal("the layout history of step " + std::to_string(final_step) + " loops");
}

Result<ReplayOutcome> ReplayHistory(const std::vector<HistorySegment>& history,
                                    const std::string& ringtrain, const std::string& ringckpt,
                                    const std::string& work_dir, const std::string& ckpt_uri,
                                    int64_t final_step,
                                    const std::vector<std::string>& ringckpt_options) {
  ReplayOutcome out;
  out.history = history;
  const std::string ckpt = work_dir + "/ckpt";
  std::error_code ec;
  fs::create_directories(ckpt, ec);
  if (ec) return Status(StatusCode::kIoError, "create " + ckpt + ": " + ec.message());
  const std::vector<std::string> env = EnvironmentWithout({"RINGTRAIN_FAULTS"});
  for (const HistorySegment& s : history) {
    std::vector<std::string> argv = {
        ringtrain, "--log-level", "warn", "train", "--config", s.run_config, "--layout", s.layout,
        "--ranks", std::to_string(s.ranks), "--stop-after", std::to_string(s.to),
        // Saves only where it stops (and synchronously): the next segment resumes from there.
        "--set", "ckpt.dir=" + ckpt, "--set", "ckpt.every=1000000000", "--set",
        "ckpt.memory_every=0", "--set", "ckpt.async=false", "--set", "ckpt.keep=2"};
    if (s.from > 0) argv.push_back("--resume");
    const std::string what = "replay of generation " + s.generation + " (" + s.layout + ", steps " +
                             std::to_string(s.from + 1) + ".." + std::to_string(s.to) + ")";
    ASSIGN_OR_RETURN(ProcessOutcome run, RunProcess(argv, env, Deadline::AfterMs(1'800'000)));
    std::ofstream(work_dir + "/" + s.generation + ".log") << run.output;
    if (!run.exited || run.exit_code != 0)
      return Internal(what + " failed: " + run.Describe() + "\n" + run.output);
    const std::string said = "resumed from the checkpoint of step " + std::to_string(s.from);
    if (s.from > 0 && run.output.find(said) == std::string::npos)
      return Internal(what + " did not resume from step " + std::to_string(s.from) + ":\n" +
                      run.output);
  }
  const std::string step = std::to_string(final_step);
  std::vector<std::string> argv = {ringckpt};
  argv.insert(argv.end(), ringckpt_options.begin(), ringckpt_options.end());
  argv.insert(argv.end(), {"diff", ckpt_uri, ckpt, "--step-a", step, "--step-b", step});
  ASSIGN_OR_RETURN(ProcessOutcome diff, RunProcess(argv, env, Deadline::AfterMs(300'000)));
  out.diff = diff.output;
  if (!diff.exited || diff.exit_code != 0)
    return Internal("ringckpt diff of the final checkpoints failed: " + diff.output);
  if (out.diff.find("only in") != std::string::npos ||
      out.diff.find("shapes differ") != std::string::npos)
    return Internal("the final checkpoints hold different tensors:\n" + out.diff);
  const std::string largest = "largest absolute difference ";
  const size_t at = out.diff.find(largest);
  if (at == std::string::npos) return Internal("ringckpt diff said no difference:\n" + out.diff);
  out.max_abs_difference = std::stod(out.diff.substr(at + largest.size()));
  return out;
}

}  // namespace rt::chaos
