#include "parallel/run_metrics.h"

#include <cerrno>
#include <cmath>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "parallel/trainer.h"

namespace rt::parallel {

RunMetrics::~RunMetrics() {
  if (!writer_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  queued_.notify_one();
  writer_.join();
}

Status RunMetrics::Open(const std::string& path, bool append) {
  if (path.empty()) return Status();
  path_ = path;
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!out_) return ErrnoStatus(errno, "open metrics file '" + path + "'");
  writer_ = std::thread([this] { WriteLines(); });
  return Status();
}

void RunMetrics::WriteStep(const StepStats& s, double tokens_per_s, bool fp16,
                           const std::string& generation) {
  if (!out_.is_open()) return;
  nlohmann::ordered_json line = {{"step", s.step},
                                 {"loss", s.loss},
                                 {"lr", s.lr},
                                 {"tokens_per_s", tokens_per_s},
                                 {"grad_norm", s.grad_norm},
                                 {"skipped", s.skipped}};
  if (fp16) line["loss_scale"] = s.loss_scale;
  if (!std::isfinite(s.grad_norm)) line["grad_norm"] = nullptr;
  if (!generation.empty()) line["generation"] = generation;
  Queue(line.dump());
}

void RunMetrics::WriteEval(int64_t step, double val_loss) {
  if (!out_.is_open()) return;
  Queue(nlohmann::ordered_json({{"step", step}, {"val_loss", val_loss}}).dump());
}

Status RunMetrics::WaitWritten(std::chrono::milliseconds deadline) {
  if (!out_.is_open()) return Status();
  std::unique_lock lock(mu_);
  const uint64_t queued = lines_queued_;
  if (!written_.wait_for(lock, deadline, [&] { return lines_written_ >= queued; }))
    return DeadlineExceeded("metrics file '" + path_ +
                            "': " + std::to_string(queued - lines_written_) +
                            " lines not written in " + std::to_string(deadline.count()) + " ms");
  return Status();
}

void RunMetrics::WaitWrittenBeforeCheckpoint(int64_t step) {
  if (Status s = WaitWritten(std::chrono::seconds(10)); !s.ok())
    LOG_WARN("checkpoint of step {} goes ahead without every metrics line: {}", step, s.ToString());
}

void RunMetrics::Queue(std::string line) {
  line += '\n';
  {
    std::lock_guard lock(mu_);
    lines_.push_back(std::move(line));
    ++lines_queued_;
  }
  queued_.notify_one();
}

void RunMetrics::WriteLines() {
  std::unique_lock lock(mu_);
  for (;;) {
    queued_.wait(lock, [this] { return closing_ || !lines_.empty(); });
    if (lines_.empty()) return;  // closing, and every line is written
    std::deque<std::string> batch;
    batch.swap(lines_);
    lock.unlock();
    for (const std::string& line : batch) out_ << line;
    out_ << std::flush;
    lock.lock();
    lines_written_ += batch.size();
    written_.notify_all();
  }
}

}  // namespace rt::parallel
