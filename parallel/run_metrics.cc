#include "parallel/run_metrics.h"

#include <cerrno>
#include <cmath>

#include <nlohmann/json.hpp>

#include "parallel/trainer.h"

namespace rt::parallel {

Status RunMetrics::Open(const std::string& path, bool append) {
  if (path.empty()) return Status();
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!out_) return ErrnoStatus(errno, "open metrics file '" + path + "'");
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
  out_ << line.dump() << "\n" << std::flush;
}

void RunMetrics::WriteEval(int64_t step, double val_loss) {
  if (!out_.is_open()) return;
  out_ << nlohmann::ordered_json({{"step", step}, {"val_loss", val_loss}}).dump() << "\n"
       << std::flush;
}

}  // namespace rt::parallel
