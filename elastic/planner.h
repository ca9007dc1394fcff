// The layout planner: on every new view each daemon computes, from the live nodes and the job,
// the same parallel layout and the same rank → (node, slot) assignment — a pure function, so no
// message is needed to agree on it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "elastic/job.h"
#include "parallel/layout.h"

namespace rt::elastic {

// A live node and how many workers it may run (its GPUs, or CPU ranks).
struct NodeSlots {
  uint64_t id = 0;
  int slots = 0;
};

// Where one rank runs.
struct RankPlace {
  uint64_t node = 0;
  int slot = 0;  // 0-based worker slot on that node (its GPU index)
  bool operator==(const RankPlace&) const = default;
};

// A job's layout on a set of nodes.
struct JobPlan {
  parallel::ParallelLayout layout;
  int micro_batches = 1;         // per step and rank; train.batch_size stays the same
  std::vector<RankPlace> ranks;  // rank r runs at ranks[r]; ranks.size() = layout.world()
  // "tp=2,pp=1,dp=3,... on nodes 1,2,3 (6 of 8 slots), 2 micro-batches of 4 rows".
  std::string Describe() const;
};

// Plans `job` on `nodes` (any order; ids unique). Rules: only nodes with at least elastic.tp
// slots count, lowest ids first, at most elastic.max_nodes; a tensor-parallel group never spans
// nodes; among the layouts that fit (parallel::CheckLayoutFits, train.batch_size divisible by
// dp, hsdp_shard dividing dp) the one with the most ranks wins, then the one with more pipeline
// stages; the micro-batches are the fewest that keep a rank's micro-batch within
// elastic.micro_rows rows and, where the rows allow it, at least one per pipeline stage
// (a multiple of pp for the interleaved schedule). Ranks fill nodes in id order, tp groups
// whole. Errors: FailedPrecondition when the job must wait, saying why (fewer than
// elastic.min_nodes eligible nodes, or no layout fits — naming the rule that failed last).
Result<JobPlan> PlanJob(std::span<const NodeSlots> nodes, const JobSpec& job);

}  // namespace rt::elastic
