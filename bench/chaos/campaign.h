// The chaos campaign (docs/chaos.md): a local cluster trains config tiny with checkpoints while
// faults from a seeded schedule are injected one after another; every recovery is timed and
// every committed checkpoint verified afterwards.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/chaos/cluster.h"
#include "bench/chaos/faults.h"

namespace rt::chaos {

// How a campaign runs. Times in milliseconds unless named otherwise.
struct CampaignOptions {
  ClusterOptions cluster;        // dir, ringtraind, nodes (default 5), slots (default 1)
  std::string ringckpt;          // the ringckpt binary (`ringckpt verify`, `ringckpt diff`)
  std::string ringtrain;         // the ringtrain binary (the fault-free replay); "" = no replay
  uint64_t seed = 1;             // the fault schedule's seed
  std::vector<FaultKind> kinds;  // the faults to draw from (default: all)
  double baseline_seconds = 20;  // fault-free job first: its steps per second are the reference
  // The chaos job's length as fault-free time: its steps = baseline steps/s × this. Faults are
  // injected until it finishes.
  double work_seconds = 120;
  int64_t job_steps = 0;        // > 0: exactly this many steps instead
  int max_faults = 0;           // > 0: no more faults after this many
  int64_t ckpt_every = 10;      // the job's [ckpt] every (steps)
  int64_t memory_every = 1;     // the job's [ckpt] memory_every (steps; 0 = no memory tier)
  int memory_copies = 2;        // the job's [ckpt] memory_copies (kill-two-daemons takes two)
  int64_t pause_min_ms = 1000;  // quiet time between a recovery and the next fault
  int64_t pause_max_ms = 3000;
  int64_t hang_min_ms = 3000;  // how long a SIGSTOP lasts
  int64_t hang_max_ms = 6000;
  int64_t disk_full_ms = 4000;      // how long the checkpoint file system stays full
  int64_t restart_delay_ms = 1000;  // a killed daemon is started again after this
  int64_t hang_limit_ms = 60000;    // a recovery slower than this counts as a hang
  // Delay at the fault points ckpt.save.after_data and ckpt.commit.after_fragments (through
  // RINGTRAIN_FAULTS), so that the kill -9 of the two checkpoint faults lands inside the window;
  // only when one of those faults is drawn.
  int64_t window_delay_ms = 300;
  int64_t tmpfs_mib = 64;         // size of the tmpfs mounted on the checkpoint folder (root)
  bool keep_checkpoints = false;  // copy the tmpfs's final contents to DIR/ckpt.kept at the end
  // Each daemon in its own network namespace (bench/chaos/netns.h) when the machine allows it;
  // the partition faults need it and are left out of the schedule without it.
  bool netns = true;
  // The daemons keep their membership in an etcd the campaign starts on loopback
  // (elastic/membership/local_etcd.h). Their namespaces could not reach it: no partitions.
  bool etcd = false;
  // The job's checkpoints live in the daemons' embedded chunk store (every daemon a [store]
  // node, replication min(3, nodes); ckpt.dir = "ringfs:///chaos") instead of a folder. The
  // checkpoint-file faults (kill during a shard write or a manifest write, disk-full, flip-byte)
  // watch or damage files in a folder: they are left out.
  bool store = false;
  int64_t partition_min_ms = 3000;  // how long a partition is held
  int64_t partition_max_ms = 6000;
  int partition_flaps = 3;    // partition-flap: splits, each held and healed for
  int64_t flap_min_ms = 300;  // flap_min_ms..flap_max_ms
  int64_t flap_max_ms = 1500;
};

// What happened to one fault.
struct FaultRecord {
  FaultKind kind = FaultKind::kKillWorker;
  std::string target;             // "daemon 3", "worker rank 2 (pid 1234)", "step-40 rank-1"
  double at_s = 0;                // when, in seconds since the chaos job's first step
  std::string skipped;            // why it was not injected ("" = injected)
  std::string gen_before;         // training generation when it was injected
  int64_t step_before = 0;        // newest step seen before it
  int64_t committed_before = -1;  // newest intact committed checkpoint before it (-1: none)
  std::string gen_after;          // generation in which training went on ("" = none seen)
  double recovery_s = -1;         // injection (or SIGCONT / freed disk) → progress; -1 = none
  bool hang = false;              // no progress within hang_limit_ms
  double rejoin_s = -1;           // restart of killed daemons → full cluster training again
  int64_t corrupted_step = -1;    // flip-byte: the committed step it corrupted
  // Partitions: daemons cut off from a majority that trained on while cut off (a step of a
  // newer generation, or more than one step of the one they had): the invariant is none.
  int minority_trained = 0;
  std::string note;  // what else was seen
};

// One committed checkpoint checked by `ringckpt verify` at the end.
struct VerifiedCheckpoint {
  int64_t step = 0;
  bool passed = false;     // ringckpt verify exited 0
  bool corrupted = false;  // the campaign flipped a byte in it
  std::string output;      // ringckpt's output when it failed
  // False: ringckpt could not check it (exit 2: the store unreachable) through any daemon
  // within the time allowed; neither passed nor refused.
  bool checked = true;
};

// A generation's first step as the rank-0 daemon logged it ("recovery: ...").
struct RecoveryLine {
  std::string generation;
  int64_t first_step = 0;  // the first step done: it resumed from the state after step-1
  std::string cause;
};

// Everything a campaign observed; the summary (report.h) is computed from it.
struct CampaignResult {
  std::string started;  // UTC date and time
  int nodes = 0;
  uint64_t seed = 0;
  double baseline_steps_per_s = 0;
  int64_t job_steps = 0;
  double chaos_wall_s = 0;  // from the chaos job's first step to its end
  bool finished = false;    // the job reached job_steps (desire "finished")
  int64_t final_step = 0;
  std::vector<FaultRecord> faults;
  std::vector<RecoveryLine> recoveries;
  std::vector<VerifiedCheckpoint> verified;
  std::set<int64_t> corrupted;  // steps the campaign flipped a byte in
  int flips_detected = 0;       // ringckpt verify refused the checkpoint right after the flip
  int flips_undetected = 0;     // ... or accepted it
  std::vector<std::string> corrupt_resumes;  // generations that resumed from a corrupted step
  int unexpected_exits = 0;                  // daemons that died without being killed
  // Store campaigns: each time the store's newest committed checkpoint (its `latest`) was seen
  // older than one seen before — a committed checkpoint gone before any newer commit retired
  // it. The invariant is none.
  std::vector<std::string> committed_regressions;
  std::string disk_full_off;    // why disk-full could not run ("" = it could)
  std::string partitions_off;   // why the partitions could not run ("" = they could)
  std::string file_faults_off;  // why the checkpoint-file faults could not run ("" = they could)
  std::string checkpoints = "a folder";  // where the checkpoints were ("a folder", the store)
  std::string membership = "ring";       // "ring", or "etcd URL" (CampaignOptions::etcd)
  // The final checkpoint against a fault-free replay of the job's layout history
  // (bench/chaos/replay.h): the generations replayed, and the largest absolute difference over
  // every tensor (-1: not compared; `replay_error` says why).
  std::vector<std::string> replayed;  // "GEN LAYOUT FROM..TO" per segment, oldest first
  double final_max_abs_difference = -1;
  std::string replay_error;
};

// Runs a campaign in `options.cluster.dir` (made if absent; it must be empty). Errors: a
// cluster that cannot be started or never trains (DeadlineExceeded naming the wait); faults
// that go wrong are recorded, not returned.
Result<CampaignResult> RunCampaign(const CampaignOptions& options);

}  // namespace rt::chaos
