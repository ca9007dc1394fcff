#include "elastic/planner.h"

#include <algorithm>
#include <optional>

namespace rt::elastic {
namespace {

// The fewest micro-batches m dividing `rows` (one rank's rows per step) with rows/m ≤ max_rows,
// at least one per stage where the rows allow it, a multiple of pp when interleaved; 0 if none.
int ChooseMicroBatches(int rows, int max_rows, int pp, bool interleaved) {
  for (int m = 1; m <= rows; ++m) {
    if (rows % m != 0 || rows / m > max_rows) continue;
    if (interleaved && m % pp != 0) continue;
    if (m < pp && m != rows) continue;
    return m;
  }
  return 0;
}

Result<parallel::PipelineSchedule> ScheduleOf(const std::string& name) {
  if (name == "gpipe") return parallel::PipelineSchedule::kGpipe;
  if (name == "1f1b") return parallel::PipelineSchedule::kOneFOneB;
  if (name == "interleaved") return parallel::PipelineSchedule::kInterleaved;
  return InvalidArgument("elastic.schedule: unknown schedule '" + name + "'");
}

}  // namespace

std::string JobPlan::Describe() const {
  std::vector<uint64_t> used;
  for (const RankPlace& p : ranks)
    if (used.empty() || used.back() != p.node) used.push_back(p.node);
  std::string nodes;
  for (uint64_t id : used) nodes += (nodes.empty() ? "" : ",") + std::to_string(id);
  return parallel::DescribeLayout(layout) + " on node" + (used.size() == 1 ? " " : "s ") + nodes +
         ", " + std::to_string(micro_batches) + " micro-batch" + (micro_batches == 1 ? "" : "es");
}

Result<JobPlan> PlanJob(std::span<const NodeSlots> nodes, const JobSpec& job) {
  const ElasticPolicy& e = job.elastic;
  std::vector<NodeSlots> eligible;
  for (const NodeSlots& n : nodes)
    if (n.slots >= e.tp) eligible.push_back(n);
  std::sort(eligible.begin(), eligible.end(),
            [](const NodeSlots& a, const NodeSlots& b) { return a.id < b.id; });
  if (e.max_nodes > 0 && eligible.size() > static_cast<size_t>(e.max_nodes))
    eligible.resize(static_cast<size_t>(e.max_nodes));
  if (eligible.size() < static_cast<size_t>(e.min_nodes))
    return FailedPrecondition("job '" + job.name +
                              "' waits: elastic.min_nodes = " + std::to_string(e.min_nodes) +
                              " nodes with at least elastic.tp = " + std::to_string(e.tp) +
                              " slots needed, " + std::to_string(eligible.size()) + " live");
  int groups = 0;  // tensor-parallel groups the nodes can hold
  for (const NodeSlots& n : eligible) groups += n.slots / e.tp;

  ASSIGN_OR_RETURN(const parallel::PipelineSchedule schedule, ScheduleOf(e.schedule));
  const int batch = job.run.train.batch_size;
  const int max_rows =
      e.micro_rows > 0 ? e.micro_rows : batch / std::max(1, job.run.train.micro_batches);
  const int pp_max = e.pp_max > 0 ? e.pp_max : e.pp;
  Status last = FailedPrecondition("no pipeline depth in [" + std::to_string(e.pp) + ", " +
                                   std::to_string(pp_max) + "] fits " + std::to_string(groups) +
                                   " tensor-parallel groups of " + std::to_string(e.tp));
  std::optional<JobPlan> best;
  for (int pp = pp_max; pp >= e.pp; --pp) {
    for (int dp = groups / pp; dp >= 1; --dp) {
      if (best && pp * dp <= best->layout.pp * best->layout.dp()) break;
      if (batch % dp != 0) {
        last = FailedPrecondition("train.batch_size (" + std::to_string(batch) +
                                  ") is not divisible by dp = " + std::to_string(dp));
        continue;
      }
      if (e.hsdp_shard > 0 && dp % e.hsdp_shard != 0) {
        last = FailedPrecondition("elastic.hsdp_shard (" + std::to_string(e.hsdp_shard) +
                                  ") does not divide dp = " + std::to_string(dp));
        continue;
      }
      const bool interleaved = schedule == parallel::PipelineSchedule::kInterleaved;
      const int micro = ChooseMicroBatches(batch / dp, max_rows, pp, interleaved);
      if (micro == 0) {
        last = FailedPrecondition("no micro-batch count splits " + std::to_string(batch / dp) +
                                  " rows per rank into micro-batches of at most " +
                                  std::to_string(max_rows) + " rows" +
                                  (interleaved ? " (a multiple of pp)" : ""));
        continue;
      }
      JobPlan plan;
      parallel::ParallelLayout& l = plan.layout;
      l.tp = e.tp;
      l.pp = pp;
      l.zero = e.zero;
      l.dp_shard = e.hsdp_shard > 0 ? e.hsdp_shard : dp;
      l.dp_replicate = dp / l.dp_shard;
      l.sequence_parallel = e.sequence_parallel;
      l.schedule = schedule;
      l.virtual_stages = interleaved ? e.vpp : 1;
      plan.micro_batches = micro;
      RunConfig run = job.run;
      run.train.micro_batches = micro;
      if (Status fits = parallel::CheckLayoutFits(run, l); !fits.ok()) {
        last = FailedPrecondition(std::string(fits.message()));
        continue;
      }
      best = std::move(plan);
    }
  }
  if (!best)
    return FailedPrecondition("job '" + job.name + "' waits: no layout fits " +
                              std::to_string(eligible.size()) + " node(s) with " +
                              std::to_string(groups * e.tp) +
                              " usable slots: " + std::string(last.message()));
  // Tensor-parallel groups fill the nodes in id order.
  const int world = best->layout.world();
  for (const NodeSlots& n : eligible) {
    for (int slot = 0; slot + e.tp <= n.slots && static_cast<int>(best->ranks.size()) < world;
         slot += e.tp) {
      for (int t = 0; t < e.tp; ++t) best->ranks.push_back({n.id, slot + t});
    }
  }
  return *std::move(best);
}

}  // namespace rt::elastic
