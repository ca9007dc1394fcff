#include "bench/chaos/report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/chaos/observe.h"

namespace rt::chaos {
namespace {

// The nearest-rank percentile `p` (0..100) of `v` (sorted here); 0 when empty.
double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

const RecoveryLine* LineOf(const CampaignResult& r, const std::string& generation) {
  for (const RecoveryLine& line : r.recoveries)
    if (line.generation == generation) return &line;
  return nullptr;
}

}  // namespace

Summary Summarize(const CampaignResult& r) {
  Summary s;
  std::vector<double> recoveries, rejoins;
  std::map<std::string, std::vector<double>> by_kind;
  double recovering = 0;
  for (const FaultRecord& f : r.faults) {
    const std::string name(FaultName(f.kind));
    if (!f.skipped.empty()) {
      ++s.skipped[name];
      continue;
    }
    ++s.injected[name];
    if (f.hang) ++s.hangs;
    s.minority_trained += f.minority_trained;
    if (f.recovery_s >= 0) {
      recoveries.push_back(f.recovery_s);
      by_kind[name].push_back(f.recovery_s);
      recovering += f.recovery_s;
    }
    if (f.rejoin_s >= 0) rejoins.push_back(f.rejoin_s);
    if (f.gen_after.empty() || f.gen_after == f.gen_before) continue;
    const RecoveryLine* line = LineOf(r, f.gen_after);
    if (line == nullptr) {
      ++s.unmatched;
      continue;
    }
    ++s.restarts;
    const int64_t resumed = line->first_step - 1;
    if (f.corrupted_step >= 0 && resumed < f.corrupted_step) ++s.flips_fell_back;
    s.committed_steps_lost += std::max<int64_t>(0, f.committed_before - resumed);
    s.steps_repeated += std::max<int64_t>(0, f.step_before - resumed);
  }
  for (const auto& [name, times] : by_kind)
    s.recovery_by_kind[name] = {Percentile(times, 50), Percentile(times, 100)};
  s.recoveries = static_cast<int>(recoveries.size());
  s.recovery_median_s = Percentile(recoveries, 50);
  s.recovery_p95_s = Percentile(recoveries, 95);
  s.recovery_max_s = Percentile(recoveries, 100);
  s.rejoin_median_s = Percentile(rejoins, 50);
  s.rejoin_max_s = Percentile(rejoins, 100);
  for (const VerifiedCheckpoint& v : r.verified) {
    if (!v.checked) {
      ++s.checkpoints_unchecked;
      continue;
    }
    if (v.passed) ++s.checkpoints_verified;
    if (!v.passed) ++s.checkpoints_refused;
    if (v.passed == v.corrupted) ++s.corrupt_accepted;
  }
  s.corrupt_accepted += static_cast<int>(r.corrupt_resumes.size()) + r.flips_undetected;
  if (r.chaos_wall_s > 0 && r.baseline_steps_per_s > 0) {
    const double fault_free_s = static_cast<double>(r.job_steps) / r.baseline_steps_per_s;
    s.throughput_share = fault_free_s / r.chaos_wall_s;
    if (r.chaos_wall_s > recovering)
      s.throughput_share_net = fault_free_s / (r.chaos_wall_s - recovering);
  }
  return s;
}

std::string SummaryText(const CampaignResult& r, const Summary& s) {
  std::string out = fmt::format(
      "chaos campaign: {}, seed {}, {} daemons; fault-free {:.2f} steps/s; job of {} steps {} "
      "(step {}) in {:.1f} s\n",
      r.started, r.seed, r.nodes, r.baseline_steps_per_s, r.job_steps,
      r.finished ? "finished" : "NOT finished", r.final_step, r.chaos_wall_s);
  out += fmt::format("{:>3} {:>7} {:<23} {:<48} {:>9} {:>8} {:>9} {:>8}\n", "#", "at s", "fault",
                     "target", "recovery", "rejoin", "gen after", "resumed");
  int i = 0;
  for (const FaultRecord& f : r.faults) {
    const RecoveryLine* line = LineOf(r, f.gen_after);
    out += fmt::format(
        "{:>3} {:>7.1f} {:<23} {:<48} {:>9} {:>8} {:>9} {:>8}{}\n", ++i, f.at_s, FaultName(f.kind),
        f.skipped.empty() ? f.target.substr(0, 48) : "skipped: " + f.skipped.substr(0, 39),
        f.hang              ? "HANG"
        : f.recovery_s >= 0 ? fmt::format("{:.2f} s", f.recovery_s)
                            : "-",
        f.rejoin_s >= 0 ? fmt::format("{:.1f} s", f.rejoin_s) : "-",
        f.gen_after.empty() ? "-" : f.gen_after,
        line != nullptr && f.gen_after != f.gen_before ? std::to_string(line->first_step - 1) : "-",
        f.note.empty() ? "" : "  (" + f.note + ")");
  }
  out += "faults injected:";
  int total = 0;
  for (const auto& [name, n] : s.injected) {
    out += fmt::format(" {} {},", name, n);
    total += n;
  }
  out += fmt::format(" total {}\n", total);
  for (const auto& [name, n] : s.skipped) out += fmt::format("faults skipped: {} {}\n", name, n);
  out += fmt::format(
      "recoveries: {} timed, median {:.2f} s, p95 {:.2f} s, max {:.2f} s; rejoin of restarted "
      "daemons median {:.2f} s, max {:.2f} s\n",
      s.recoveries, s.recovery_median_s, s.recovery_p95_s, s.recovery_max_s, s.rejoin_median_s,
      s.rejoin_max_s);
  for (const auto& [name, times] : s.recovery_by_kind)
    out += fmt::format("  {:<23} median {:.2f} s, max {:.2f} s\n", name, times.first, times.second);
  out += fmt::format("hangs (no progress within the limit): {}\n", s.hangs);
  out += fmt::format(
      "restarts from a checkpoint: {} ({} without a recovery line); committed steps lost: {}; "
      "steps repeated: {}\n",
      s.restarts, s.unmatched, s.committed_steps_lost, s.steps_repeated);
  out += fmt::format(
      "checkpoints: {} committed at the end, {} verified, {} refused (corrupted by the "
      "campaign: {}), {} could not be checked; flipped bytes refused by ringckpt verify at once: "
      "{}/{}; resumes right "
      "after a flip that fell back past it: {}; resumes from a corrupted step: {}; corrupt "
      "checkpoints accepted: {}\n",
      r.verified.size(), s.checkpoints_verified, s.checkpoints_refused, r.corrupted.size(),
      s.checkpoints_unchecked, r.flips_detected, r.flips_detected + r.flips_undetected,
      s.flips_fell_back, r.corrupt_resumes.size(), s.corrupt_accepted);
  out += fmt::format(
      "throughput: {:.0f}% of fault-free over the run, {:.0f}% after removing recovery time\n",
      100 * s.throughput_share, 100 * s.throughput_share_net);
  out += fmt::format("daemons that died without being killed: {}\n", r.unexpected_exits);
  if (r.checkpoints != "a folder") {
    out += fmt::format(
        "committed checkpoints gone from the store before a newer commit retired them: {}\n",
        r.committed_regressions.size());
    for (const std::string& what : r.committed_regressions) out += "  " + what + "\n";
  }
  if (!r.disk_full_off.empty()) out += "disk-full: " + r.disk_full_off + "\n";
  out += "checkpoints: " + r.checkpoints + "\n";
  if (!r.file_faults_off.empty()) out += "checkpoint-file faults: " + r.file_faults_off + "\n";
  out += "membership: " + r.membership + "\n";
  if (r.partitions_off.empty()) {
    out += fmt::format(
        "partitions (daemons in network namespaces): daemons that trained on while cut off from "
        "a majority: {}\n",
        s.minority_trained);
  } else {
    out += "partitions: " + r.partitions_off + "\n";
  }
  if (r.final_max_abs_difference >= 0) {
    out += fmt::format(
        "final weights vs a fault-free replay of the same layout history ({} generations: {}): "
        "largest absolute difference {:.3g}{}\n",
        r.replayed.size(), fmt::join(r.replayed, ", "), r.final_max_abs_difference,
        r.final_max_abs_difference == 0 ? " (bitwise equal)" : "");
  } else {
    out += "final weights vs a fault-free replay of the same layout history: not compared (" +
           (r.replay_error.empty() ? std::string("no replay asked for") : r.replay_error) + ")\n";
  }
  return out;
}

daemon::Json SummaryJson(const CampaignResult& r, const Summary& s) {
  daemon::Json faults = daemon::Json::array();
  for (const FaultRecord& f : r.faults)
    faults.push_back({{"kind", FaultName(f.kind)},
                      {"target", f.target},
                      {"at_s", f.at_s},
                      {"skipped", f.skipped},
                      {"gen_before", f.gen_before},
                      {"step_before", f.step_before},
                      {"committed_before", f.committed_before},
                      {"gen_after", f.gen_after},
                      {"recovery_s", f.recovery_s},
                      {"hang", f.hang},
                      {"rejoin_s", f.rejoin_s},
                      {"minority_trained", f.minority_trained},
                      {"note", f.note}});
  int injected = 0;
  for (const auto& [name, n] : s.injected) injected += n;
  return {{"started", r.started},
          {"seed", r.seed},
          {"nodes", r.nodes},
          {"baseline_steps_per_s", r.baseline_steps_per_s},
          {"job_steps", r.job_steps},
          {"finished", r.finished},
          {"final_step", r.final_step},
          {"chaos_wall_s", r.chaos_wall_s},
          {"faults_injected", injected},
          {"injected", s.injected},
          {"skipped", s.skipped},
          {"recoveries", s.recoveries},
          {"recovery_median_s", s.recovery_median_s},
          {"recovery_p95_s", s.recovery_p95_s},
          {"recovery_max_s", s.recovery_max_s},
          {"recovery_by_kind", s.recovery_by_kind},
          {"hangs", s.hangs},
          {"restarts", s.restarts},
          {"unmatched_restarts", s.unmatched},
          {"committed_steps_lost", s.committed_steps_lost},
          {"steps_repeated", s.steps_repeated},
          {"checkpoints_committed", r.verified.size()},
          {"checkpoints_verified", s.checkpoints_verified},
          {"checkpoints_refused", s.checkpoints_refused},
          {"checkpoints_unchecked", s.checkpoints_unchecked},
          {"flips_detected", r.flips_detected},
          {"flips_fell_back", s.flips_fell_back},
          {"flips_undetected", r.flips_undetected},
          {"corrupt_resumes", r.corrupt_resumes},
          {"corrupt_accepted", s.corrupt_accepted},
          {"throughput_share", s.throughput_share},
          {"throughput_share_net", s.throughput_share_net},
          {"unexpected_exits", r.unexpected_exits},
          {"committed_regressions", r.committed_regressions},
          {"disk_full_off", r.disk_full_off},
          {"partitions_off", r.partitions_off},
          {"checkpoints", r.checkpoints},
          {"file_faults_off", r.file_faults_off},
          {"membership", r.membership},
          {"minority_trained", s.minority_trained},
          {"replayed", r.replayed},
          {"final_max_abs_difference", r.final_max_abs_difference},
          {"replay_error", r.replay_error},
          {"faults", std::move(faults)}};
}

}  // namespace rt::chaos
