// The fault-free replay of a chaos job's layout history (docs/chaos.md, "Final weights"): the
// generations whose states the job's final checkpoint descends from, read from their rank 0's
// log, are trained again one after another with `ringtrain train` — each with its generation's
// run config and layout, from the step it resumed from up to the step the next one resumed
// from (`--stop-after`) — and the final checkpoint is compared with the chaos job's.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace rt::chaos {

// One training generation of a job as the log of its rank 0 tells it.
struct TrainedGeneration {
  std::string generation;     // "job.view.epoch"
  std::string folder;         // its rank 0's folder: run.toml and rank-0.log
  std::string layout;         // the layout the worker ran
  int ranks = 0;              // its world size
  int64_t resumed_from = -1;  // the step whose saved state it loaded; -1: it started afresh
  std::string resumed_uri;    // the storage that state came from (checkpoints or memory tier)
  std::string resumed_run;    // the run id the state it loaded carries
  std::string run_id;         // the run id its own saves carry ("" if not logged)
  // Saves its rank 0 committed: (step, storage URI, log time).
  struct Commit {
    int64_t step = 0;
    std::string uri;
    std::string at;
  };
  std::vector<Commit> commits;
};

// The generations of job `job` whose rank 0 ran on one of nodes 1..`nodes` of the campaign
// folder `dir` (dir/nodeN/jobs/JOB-GEN/rank-0.log), in no particular order.
std::vector<TrainedGeneration> ReadGenerations(const std::string& dir, int nodes,
                                               const std::string& job);

// One piece of a layout history: a generation's config and layout, trained from step `from`
// (0: from scratch) up to step `to`.
struct HistorySegment {
  std::string generation;
  std::string run_config;  // path of its run.toml
  std::string layout;
  int ranks = 0;
  int64_t from = 0;
  int64_t to = 0;
};

// The store a checkpoint URI names, for comparing URIs: the memory tier's
// `memtier://HOST:PORT/job-N` names job N's snapshots through one daemon, and every daemon reaches
// the same snapshots, so the address is dropped ("memtier://job-N"); so is a ringfs:// URI's (the
// daemons' embedded store is one store: "ringfs:///PATH"); other URIs are unchanged.
std::string StoreOf(const std::string& uri);

// The chain of generations that produced the state of step `final_step` saved in `final_uri`,
// oldest first: the last generation that committed it there, the generation that wrote the
// state it resumed from, and so on back to a generation that started afresh. A resume's writer is
// the generation whose run id the loaded state carries (exact even when the writer was killed
// before it logged the commit). Errors: NotFound naming the step or run whose writer is unknown.
Result<std::vector<HistorySegment>> LayoutHistory(const std::vector<TrainedGeneration>& gens,
                                                  int64_t final_step, const std::string& final_uri);

// What the replay found.
struct ReplayOutcome {
  std::vector<HistorySegment> history;
  double max_abs_difference = -1;  // over every tensor of the final checkpoints
  std::string diff;                // ringckpt diff's report
};

// Trains `history` again in `work_dir` (made; its checkpoints and logs stay there) with the
// `ringtrain` binary, then compares the final checkpoint with step `final_step` of `ckpt_uri`
// using `ringckpt diff` (with `ringckpt_options` before the subcommand: --secret-file). Errors: a
// replay run that fails (naming the segment, with its output), tensors only in one checkpoint or of
// other shapes (Internal, with the diff).
Result<ReplayOutcome> ReplayHistory(const std::vector<HistorySegment>& history,
                                    const std::string& ringtrain, const std::string& ringckpt,
                                    const std::string& work_dir, const std::string& ckpt_uri,
                                    int64_t final_step,
                                    const std::vector<std::string>& ringckpt_options);

}  // namespace rt::chaos
