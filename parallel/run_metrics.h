// The metrics file of a run (metrics.path): JSON lines, appended to on resume. Per step: step,
// loss, lr, tokens_per_s, grad_norm (null when not finite), skipped, loss_scale (fp16 only) and
// generation (the daemon's, when set); per evaluation: step, val_loss
// (docs/formats/metrics_file.md).
#pragma once

#include <chrono>
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
  // Waits until every line queued so far is written and flushed, or `deadline` passed (then
  // DeadlineExceeded naming the file). A run calls it before a checkpoint, so that the file
  // holds every step up to the one it resumes from after a crash.
  Status WaitWritten(std::chrono::milliseconds deadline);
  // Before the checkpoint of step `step`: WaitWritten with 10 s, logging a warning that names
  // the step when it fails (the run goes on; only the metrics file may then miss lines).
  void WaitWrittenBeforeCheckpoint(int64_t step);

 private:
  // Queues `line` for the writer thread.
  void Queue(std::string line);
  // The writer thread: writes and flushes queued lines until the destructor stops it.
  void WriteLines();

  std::string path_;
  std::ofstream out_;
  std::thread writer_;
  std::mutex mu_;
  std::condition_variable queued_;
  std::condition_variable written_;
  std::deque<std::string> lines_;  // guarded by mu_
  uint64_t lines_queued_ = 0;      // guarded by mu_: lines queued since Open
  uint64_t lines_written_ = 0;     // guarded by mu_: of those, written and flushed
  bool closing_ = false;           // guarded by mu_
};

}  // namespace rt::parallel
