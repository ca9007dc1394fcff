// The metrics file of a run (metrics.path): JSON lines, appended to on resume. Per step: step,
// loss, lr, tokens_per_s, grad_norm (null when not finite), skipped, loss_scale (fp16 only) and
// generation (the daemon's, when set); per evaluation: step, val_loss
// (docs/formats/metrics_file.md).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "base/status.h"

namespace rt {
struct StepStats;
}

namespace rt::parallel {

// Writes one run's metrics lines, each flushed as it is written. Not thread-safe.
class RunMetrics {
 public:
  // Opens `path` (nothing when empty: every Write then does nothing), appending to it when
  // `append` is set. Errors: IoError naming the file.
  Status Open(const std::string& path, bool append);
  // The line of a step that ran `tokens_per_s`; `fp16` adds its loss_scale, a non-empty
  // `generation` its generation.
  void WriteStep(const StepStats& stats, double tokens_per_s, bool fp16,
                 const std::string& generation);
  // The line of the evaluation after step `step`.
  void WriteEval(int64_t step, double val_loss);

 private:
  std::ofstream out_;
};

}  // namespace rt::parallel
