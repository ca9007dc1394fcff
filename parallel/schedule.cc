#include "parallel/schedule.h"

#include <algorithm>

namespace rt::parallel {

std::vector<PipelineOp> BuildPipelineSchedule(PipelineSchedule schedule, int stages, int stage,
                                              int micro, int chunks) {
  std::vector<PipelineOp> ops;
  const int m = micro;
  if (schedule == PipelineSchedule::kGpipe) {
    for (int i = 0; i < m; ++i) ops.push_back({true, 0, i});
    for (int i = 0; i < m; ++i) ops.push_back({false, 0, i});
    return ops;
  }
  if (schedule == PipelineSchedule::kOneFOneB) {
    const int warmup = std::min(stages - stage - 1, m);
    for (int i = 0; i < warmup; ++i) ops.push_back({true, 0, i});
    for (int i = 0; i < m - warmup; ++i) {
      ops.push_back({true, 0, warmup + i});
      ops.push_back({false, 0, i});
    }
    for (int i = m - warmup; i < m; ++i) ops.push_back({false, 0, i});
    return ops;
  }
  // Interleaved: virtual micro-batch k → (chunk, micro-batch), as Megatron's get_model_chunk_id
  // and get_microbatch_id_in_model_chunk.
  const int group = stages * chunks, total = m * chunks;
  auto op = [&](int k, bool forward) {
    const int in_group = k % group;
    int chunk = in_group / stages;
    if (!forward) chunk = chunks - 1 - chunk;
    return PipelineOp{forward, chunk, (k / group) * stages + in_group % stages};
  };
  const int warmup =
      m == stages ? total : std::min((stages - stage - 1) * 2 + (chunks - 1) * stages, total);
  for (int k = 0; k < warmup; ++k) ops.push_back(op(k, true));
  for (int k = 0; k < total - warmup; ++k) {
    ops.push_back(op(k + warmup, true));
    ops.push_back(op(k, false));
  }
  for (int k = total - warmup; k < total; ++k) ops.push_back(op(k, false));
  return ops;
}

std::vector<int> MaxInFlight(const std::vector<PipelineOp>& ops, int chunks) {
  std::vector<int> alive(static_cast<size_t>(chunks), 0), most(static_cast<size_t>(chunks), 0);
  for (const PipelineOp& op : ops) {
    int& a = alive[static_cast<size_t>(op.chunk)];
    a += op.forward ? 1 : -1;
    most[static_cast<size_t>(op.chunk)] = std::max(most[static_cast<size_t>(op.chunk)], a);
  }
  return most;
}

}  // namespace rt::parallel
