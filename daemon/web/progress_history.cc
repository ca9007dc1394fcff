#include "daemon/web/progress_history.h"

#include <algorithm>

namespace rt::web {

ProgressHistory::ProgressHistory(size_t capacity) : capacity_(std::max<size_t>(capacity, 4)) {}

void ProgressHistory::Add(const ProgressPoint& point) {
  std::lock_guard lock(mu_);
  // Drop points the job trains again (steps from `point.step` on).
  auto first_redone =
      std::lower_bound(points_.begin(), points_.end(), point.step,
                       [](const ProgressPoint& p, int64_t step) { return p.step < step; });
  points_.erase(first_redone, points_.end());
  if (points_.size() >= capacity_) {
    // Keep the even-indexed points of the older half, and the newer half as it is.
    const size_t older = points_.size() / 2;
    size_t kept = 0;
    for (size_t i = 0; i < older; i += 2) points_[kept++] = points_[i];
    points_.erase(std::move(points_.begin() + older, points_.end(), points_.begin() + kept),
                  points_.end());
  }
  points_.push_back(point);
}

nlohmann::json ProgressHistory::ToJson() const {
  nlohmann::json out = nlohmann::json::array();
  std::lock_guard lock(mu_);
  for (const ProgressPoint& p : points_)
    out.push_back({{"step", p.step},
                   {"loss", p.loss},
                   {"tokens_per_second", p.tokens_per_second},
                   {"time", p.time}});
  return out;
}

std::vector<ProgressPoint> ProgressHistory::Points() const {
  std::lock_guard lock(mu_);
  return points_;
}

}  // namespace rt::web
