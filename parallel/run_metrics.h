// The metrics file of a run (metrics.path): JSON lines, appended to on resume. Per step: step,
// loss, lr, tokens_per_s, grad_norm (null when not finite), skipped, loss_scale (fp16 only) and
// generation (the daemon's, when set); per evaluation: step, val_loss
// (docs/formats/metrics_file.md).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "base/status.h"

namespace rt {
struct StepStats;
}

namespace rt::parallel {

// Writes one run's metrics lines. The caller only formats a line and queues it; a writer thread
// of its own writes and flushes each line at once, so a slow file system (a network mount, a
// busy disk) never lengthens a training step. Not thread-safe.
class RunMetrics {
 public:
  RunMetrics() = default;
  RunMetrics(const RunMetrics&) = delete;
  RunMetrics& operator=(const RunMetrics&) = delete;
  // Writes every queued line, then closes the file.
  ~RunMetrics();

  // Opens `path` (nothing when empty: every Write then does nothing), appending to it when
  // `append` is set, and starts the writer thread. Errors: IoError naming the file.
  Status Open(const std::string& path, bool append);
  // The line of a step that ran `tokens_per_s`; `fp16` adds its loss_scale, a non-empty
  // `generation` its generation.
  void WriteStep(const StepStats& stats, double tokens_per_s, bool fp16,
                 const std::string& generation);
  // The line of the evaluation after step `step`.
  void WriteEval(int64_t step, double val_loss);

 private:
  // Queues `line` for the writer thread.
  void Queue(std::string line);
  // The writer thread: writes and flushes queued lines until the destructor stops it.
  void WriteLines();

  std::ofstream out_;
  std::thread writer_;
  std::mutex mu_;
  std::condition_variable queued_;
  std::deque<std::string> lines_;  // guarded by mu_
  bool closing_ = false;           // guarded by mu_
};

}  // namespace rt::parallel
