// The order of forward and backward passes on one pipeline rank: GPipe, 1F1B and Megatron's
// interleaved 1F1B over virtual stages (Narayanan et al. 2021, "Efficient Large-Scale Language
// Model Training on GPU Clusters Using Megatron-LM", and Megatron-LM's
// forward_backward_pipelining_with_interleaving).
#pragma once

#include <vector>

#include "parallel/layout.h"

namespace rt::parallel {

// One pass of one micro-batch through one model chunk of the rank.
struct PipelineOp {
  bool forward = true;
  int chunk = 0;  // the rank's chunk (0 unless interleaved)
  int micro = 0;  // micro-batch
};

// The passes of stage `stage` of `stages` over `micro` micro-batches with `chunks` model chunks
// per rank (1 unless kInterleaved), in the order they run:
//   - GPipe: every forward, then every backward;
//   - 1F1B: min(stages − stage − 1, micro) warm-up forwards, then one forward and one backward
//     alternately, then the remaining backwards;
//   - interleaved (micro a multiple of stages): virtual micro-batch k = 0..micro·chunks−1 runs
//     chunk (k mod stages·chunks) / stages (backwards: chunks − 1 − that) on micro-batch
//     (k / (stages·chunks))·stages + k mod stages; (stages − stage − 1)·2 + (chunks − 1)·stages
//     warm-up forwards (all of them when micro = stages), then 1F1B over virtual micro-batches.
std::vector<PipelineOp> BuildPipelineSchedule(PipelineSchedule schedule, int stages, int stage,
                                              int micro, int chunks);

// Per chunk, the most micro-batches whose forward ran and backward did not yet, over `ops`
// (the activation sets a chunk needs). Forward-only ops lists count every forward.
std::vector<int> MaxInFlight(const std::vector<PipelineOp>& ops, int chunks);

}  // namespace rt::parallel
