// Progress output of `ringtrain train`: a live one-line bar on a terminal, plain lines otherwise.
#pragma once

#include <cstdint>
#include <string>

namespace rt::cli {

// Prints training progress to stdout. Not thread-safe.
class Progress {
 public:
  // `total_steps` is the run's last step; `plain_every` the step interval of plain lines.
  Progress(int64_t total_steps, int plain_every);
  // Reports a finished step; `elapsed_s` is the training time so far (for the ETA).
  void Step(int64_t step, double loss, double lr, double tokens_per_s, double elapsed_s,
            bool skipped);
  // Prints a line that must stay visible (an evaluation, a note), under the bar.
  void Line(const std::string& text);
  // Ends the bar's line.
  void Finish();

 private:
  int64_t total_;
  int plain_every_;
  bool tty_;
  bool bar_open_ = false;
};

}  // namespace rt::cli
