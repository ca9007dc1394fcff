// A job as `ringctl submit` hands it to the cluster: the run config (model, train, optim, data,
// eval, metrics, ckpt) plus an elastic policy — how its parallel layout follows the nodes that
// are alive. The job's TOML text is what the ring replicates; every daemon parses it the same way.
#pragma once

#include <string>
#include <vector>

#include "base/config.h"
#include "base/status.h"
#include "parallel/config.h"

namespace rt::elastic {

// [elastic]: the layout rules. Tensor parallelism stays inside a node; the planner fills the
// pipeline first and gives the rest of the nodes' slots to data parallelism. The global batch
// (train.batch_size) is the same at every size: only the data-parallel split and the number of
// micro-batches change, so the loss curve does not depend on how many nodes there were.
struct ElasticPolicy {
  int tp = 1;          // tensor-parallel ranks, all on one node; default 1
  int pp = 1;          // pipeline stages (the fewest when pp_max is set); default 1
  int pp_max = 0;      // most pipeline stages, 0 = pp (fixed); default 0
  int zero = 0;        // ZeRO stage 0 (DDP) to 3; default 0
  int hsdp_shard = 0;  // HSDP: ranks that shard ZeRO state, 0 = every dp rank; default 0
  bool sequence_parallel = false;  // sequence parallelism with tp > 1; default false
  std::string schedule = "1f1b";   // "gpipe", "1f1b" or "interleaved"; default "1f1b"
  int vpp = 2;                     // model chunks per pipeline rank (interleaved only); default 2
  int min_nodes = 1;               // fewer live nodes than this: the job waits; default 1
  int max_nodes = 0;  // use at most this many nodes (lowest ids first), 0 = all; default 0
  // Most rows (sequences) one rank runs in one micro-batch, 0 = train.batch_size /
  // train.micro_batches (what one process would run); default 0.
  int micro_rows = 0;
};

// A submitted job.
struct JobSpec {
  std::string name = "job";  // [job] name: shown by ringctl and in metrics; default "job"
  RunConfig run;             // the run config sections
  ElasticPolicy elastic;     // [elastic]
  std::string text;          // the TOML text it was parsed from
};

// Binds every field of `policy` (and the job name) to `schema` under [elastic] and [job].
void BindJobKeys(JobSpec* job, ConfigSchema* schema);

// Parses a job file's text; `source` names it in errors. The model's architecture keys are
// required, as in a run config. Errors: InvalidArgument naming the source, line and key (an
// unknown key, a wrong type, a value out of range), or the keys whose values contradict each
// other (ValidateRunConfig; pp_max below pp; hsdp_shard with zero=0; vpp without interleaved).
Result<JobSpec> ParseJobSpec(std::string text, const std::string& source);

// Reads and parses a job file. Errors: NotFound/IoError naming the path, and ParseJobSpec's.
Result<JobSpec> LoadJobSpec(const std::string& path);

}  // namespace rt::elastic
