// ringchaos: the chaos campaign (docs/chaos.md). Starts a local cluster of ringtraind daemons,
// measures a fault-free job, then trains a job of the same size while injecting faults from a
// seeded schedule, and prints one summary.
//   ringchaos [--seed N] [--nodes N] [--seconds S] [--faults LIST] [--json FILE] [--dir DIR]
// Exit status: 0 when the invariants held (the job finished, no committed step lost, no
// corrupt checkpoint accepted, no hang, no daemon cut off from a majority trained on, final
// weights within 1e-5 of a fault-free replay of the layout history), 1 when one did not, 2 for
// bad arguments or a campaign that could not run; 128 + N after signal N (SIGINT, SIGTERM),
// with the namespaces and mounts it made removed.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <CLI/CLI.hpp>

#include "base/log.h"
#include "bench/chaos/campaign.h"
#include "bench/chaos/report.h"
#include "bench/chaos/signals.h"

int main(int argc, char** argv) {
  rt::chaos::CatchTerminationSignals();  // before any thread: namespaces and mounts are removed
  CLI::App app{"ringchaos: a chaos campaign against a local ringtraind cluster"};
  rt::chaos::CampaignOptions o;
  o.cluster.ringtraind = RINGTRAIND_BIN;
  o.ringckpt = RINGCKPT_BIN;
  o.ringtrain = RINGTRAIN_BIN;
  bool no_replay = false;
  std::string faults = "all", json_path, log_level = "info", dir;
  bool keep = false;
  double hang_limit_s = 60;
  app.add_option("--seed", o.seed, "seed of the fault schedule")->capture_default_str();
  app.add_option("--nodes", o.cluster.nodes, "daemons (>= 4; 5 keeps a majority when two die)")
      ->capture_default_str()
      ->check(CLI::Range(4, 16));
  app.add_option("--slots", o.cluster.slots, "CPU worker slots per daemon")
      ->capture_default_str()
      ->check(CLI::Range(1, 4));
  app.add_option("--worker-nice", o.cluster.worker_nice,
                 "the daemons' [worker] nice (default: theirs)")
      ->check(CLI::Range(0, 19));
  app.add_option("--seconds", o.work_seconds,
                 "the job's length as fault-free time (its steps = fault-free steps/s x this)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--steps", o.job_steps, "the job's steps instead of --seconds")
      ->check(CLI::PositiveNumber);
  app.add_option("--baseline-seconds", o.baseline_seconds, "fault-free measurement first")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-faults", o.max_faults, "stop injecting after this many (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--faults", faults, "comma-separated fault kinds, or all")->capture_default_str();
  app.add_option("--ckpt-every", o.ckpt_every, "the job's checkpoint interval in steps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--memory-every", o.memory_every,
                 "the job's memory-tier snapshot interval in steps (0: no memory tier)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--memory-copies", o.memory_copies,
                 "copies of each memory snapshot on other daemons (2 survives two at once)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4));
  app.add_flag("--no-replay", no_replay,
               "skip the fault-free replay of the layout history and the final-weights check");
  int64_t pause_ms = o.pause_min_ms, hang_ms = o.hang_min_ms;
  app.add_option("--pause-ms", pause_ms, "quiet time between faults: MIN..3*MIN ms")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--hang-ms", hang_ms, "SIGSTOP length: MIN..2*MIN ms")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--disk-full-ms", o.disk_full_ms, "how long the checkpoint tmpfs stays full")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--netns,!--no-netns", o.netns,
               "each daemon in its own network namespace (root; needed by the partitions)")
      ->capture_default_str();
  app.add_flag("--store", o.store,
               "checkpoints in the daemons' embedded chunk store (ringfs:///chaos); the "
               "checkpoint-file faults are left out");
  app.add_flag("--etcd", o.etcd,
               "membership in an etcd started on loopback (Debian's etcd-server); no partitions");
  int64_t partition_ms = o.partition_min_ms;
  app.add_option("--partition-ms", partition_ms, "how long a partition is held: MS..2*MS")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--hang-limit", hang_limit_s, "seconds after which a recovery is a hang")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--dir", dir, "campaign folder, must be empty (default: a new one in /tmp)");
  app.add_flag(
      "--keep", keep,
      "keep the campaign folder (logs; the checkpoints copied to DIR/ckpt.kept) afterwards");
  app.add_option("--json", json_path, "also write the summary as JSON to this file");
  app.add_option("--ringtraind", o.cluster.ringtraind, "the daemon binary")->capture_default_str();
  app.add_option("--ringckpt", o.ringckpt, "the ringckpt binary")->capture_default_str();
  app.add_option("--ringtrain", o.ringtrain, "the ringtrain binary (the replay)")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (rt::Status s = rt::InitLogging(log_level, "ringchaos"); !s.ok()) {
    std::fprintf(stderr, "ringchaos: %s\n", s.ToString().c_str());
    return 2;
  }
  rt::Result<std::vector<rt::chaos::FaultKind>> kinds = rt::chaos::ParseFaultKinds(faults);
  if (!kinds.ok()) {
    std::fprintf(stderr, "ringchaos: %s\n", kinds.status().ToString().c_str());
    return 2;
  }
  o.kinds = *kinds;
  o.hang_limit_ms = static_cast<int64_t>(hang_limit_s * 1000);
  if (no_replay) o.ringtrain.clear();
  o.pause_min_ms = pause_ms;
  o.pause_max_ms = 3 * pause_ms;
  o.hang_min_ms = hang_ms;
  o.hang_max_ms = 2 * hang_ms;
  o.partition_min_ms = partition_ms;
  o.partition_max_ms = 2 * partition_ms;
  if (dir.empty()) dir = "/tmp/ringchaos-" + std::to_string(::getpid());
  o.cluster.dir = dir;
  o.keep_checkpoints = keep;

  rt::Result<rt::chaos::CampaignResult> r = rt::chaos::RunCampaign(o);
  if (!keep) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  if (!r.ok()) {
    std::fprintf(stderr, "ringchaos: %s\n", r.status().ToString().c_str());
    return 2;
  }
  const rt::chaos::Summary s = rt::chaos::Summarize(*r);
  std::printf("%s", rt::chaos::SummaryText(*r, s).c_str());
  if (keep) std::printf("campaign folder (logs, checkpoints): %s\n", dir.c_str());
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << rt::chaos::SummaryJson(*r, s).dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "ringchaos: cannot write %s\n", json_path.c_str());
      return 2;
    }
  }
  // The final weights equal the replay's within 1e-5 (when a replay was asked for).
  const bool weights_held = o.ringtrain.empty() || (r->final_max_abs_difference >= 0 &&
                                                    r->final_max_abs_difference <= 1e-5);
  const bool held = r->finished && s.committed_steps_lost == 0 && s.corrupt_accepted == 0 &&
                    s.checkpoints_unchecked == 0 && s.hangs == 0 && s.minority_trained == 0 &&
                    weights_held && r->committed_regressions.empty();
  return held ? 0 : 1;
}
