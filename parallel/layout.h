// The parallel layout of a run (DESIGN.md "Parallel layout"): how many ranks split the model by
// tensor (tp) and pipeline (pp) parallelism and the data by replicated and sharded data
// parallelism, the ZeRO stage and the pipeline schedule; the coordinates of a rank in it; and the
// process groups each rank talks over, built from the world communicator by Split.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/deadline.h"
#include "base/status.h"
#include "comm/communicator.h"
#include "parallel/config.h"

namespace rt::parallel {

// Order of forward and backward micro-batch passes on each pipeline stage.
enum class PipelineSchedule : uint8_t {
  kGpipe = 0,        // every forward, then every backward
  kOneFOneB = 1,     // warm-up forwards, then alternate one forward and one backward (1F1B)
  kInterleaved = 2,  // Megatron's interleaved 1F1B over `virtual_stages` model chunks per rank
};

// "gpipe", "1f1b", "interleaved".
std::string_view PipelineScheduleName(PipelineSchedule s);

// The layout. world = tp · dp_shard · dp_replicate · pp; a rank's coordinates vary tp fastest,
// then dp_shard, dp_replicate and pp (slowest).
struct ParallelLayout {
  int tp = 1;            // tensor-parallel ranks; default 1
  int pp = 1;            // pipeline stages; default 1
  int dp_replicate = 1;  // data-parallel replica groups (HSDP's outer all-reduce); default 1
  int dp_shard = 1;      // data-parallel ranks that shard ZeRO state among them; default 1
  int zero = 0;          // ZeRO stage 0 (DDP), 1 (optimizer state), 2 (+ gradients), 3 (+ params)
  bool sequence_parallel = false;  // shard LayerNorm/residual regions on the sequence; default off
  PipelineSchedule schedule = PipelineSchedule::kOneFOneB;  // default 1F1B
  // Model chunks per pipeline rank (interleaved schedule only; 1 otherwise): rank s holds the
  // virtual stages s, s + pp, ..., s + (virtual_stages−1)·pp of pp · virtual_stages.
  int virtual_stages = 1;

  int world() const { return tp * pp * dp_replicate * dp_shard; }
  int dp() const { return dp_replicate * dp_shard; }
};

// Parses "key=value,..." with keys tp, pp, dp (total data-parallel ranks), zero, hsdp_shard
// (dp_shard size; dp_replicate = dp / hsdp_shard), sp (0/1), schedule (gpipe, 1f1b,
// interleaved) and vpp (model chunks per pipeline rank, interleaved only; default 2 with
// schedule=interleaved); missing keys take their defaults; an empty string is one rank. Errors:
// InvalidArgument naming the key or value (unknown key, not a positive integer, zero outside
// 0..3, hsdp_shard not dividing dp or used with zero=0, vpp > 1 without schedule=interleaved,
// schedule=interleaved with pp = 1).
Result<ParallelLayout> ParseLayout(std::string_view spec);

// The canonical spec, e.g. "tp=2,pp=2,dp=2,zero=1,hsdp_shard=2,sp=0,schedule=1f1b" (",vpp=2"
// follows schedule=interleaved).
std::string DescribeLayout(const ParallelLayout& layout);

// Whether `layout` can train `config`'s model and batch (the rules every engine and the elastic
// planner share): tp divides model.n_head and model.vocab_size (and model.seq_len with sp=1);
// pp · vpp ≤ model.n_layer + 2; train.batch_size divisible by dp × train.micro_batches;
// schedule=interleaved needs train.micro_batches a multiple of pp; train.precision known.
// Errors: InvalidArgument naming the keys and values that do not fit.
Status CheckLayoutFits(const RunConfig& config, const ParallelLayout& layout);

// A rank's coordinates in the layout.
struct RankCoords {
  int tp = 0;
  int dp_shard = 0;
  int dp_replicate = 0;
  int pp = 0;
  // Index among the layout's dp() data-parallel ranks: dp_replicate · dp_shard-size + dp_shard.
  int dp = 0;
};

// Coordinates of `rank` (0 ≤ rank < world).
RankCoords CoordsOf(const ParallelLayout& layout, int rank);
// The rank at `coords` (the inverse of CoordsOf; `coords.dp` is ignored).
int RankOf(const ParallelLayout& layout, const RankCoords& coords);

// The communicators of one rank. Every group is ordered by its own coordinate, so a group's rank
// is that coordinate (tp group rank = coords.tp, and so on).
struct ProcessGroups {
  comm::Communicator* world = nullptr;               // borrowed; all ranks
  std::unique_ptr<comm::Communicator> tp;            // same dp and pp coordinates
  std::unique_ptr<comm::Communicator> dp_shard;      // same tp, dp_replicate and pp
  std::unique_ptr<comm::Communicator> dp_replicate;  // same tp, dp_shard and pp
  std::unique_ptr<comm::Communicator> pp_forward;    // same tp and dp: activations downstream
  std::unique_ptr<comm::Communicator> pp_backward;   // same tp and dp: gradients upstream
  // The first and last pipeline stages of one tp/dp position (tied embedding); nullptr on the
  // other stages and when pp = 1. Its rank 0 is the first stage.
  std::unique_ptr<comm::Communicator> embedding;
};

// Builds the groups by Split on `world` (collective: every rank of the world calls it with the
// same layout), named after their fields ("world/tp", ...; aborting `world` aborts them all),
// then waits for each to bootstrap. Errors: InvalidArgument if world's size is not
// layout.world(); those of Split and WaitReady, with the group named.
Result<ProcessGroups> BuildProcessGroups(comm::Communicator& world, const ParallelLayout& layout,
                                         Deadline deadline);

}  // namespace rt::parallel
