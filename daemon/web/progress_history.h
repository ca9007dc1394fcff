// The job's progress over the whole run for the status page's chart (`job.history` in
// docs/formats/status_api.md): a bounded series of (step, loss, tokens/s, time) points that keeps
// the recent points at full resolution and thins older ones.
//
// Thread-safe: Add and ToJson may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

namespace rt::web {

// One progress point.
struct ProgressPoint {
  int64_t step = 0;
  double loss = 0;
  double tokens_per_second = 0;
  double time = 0;  // Unix seconds
};

// A bounded, step-ordered series of progress points.
class ProgressHistory {
 public:
  // Keeps at most `capacity` points (at least 4).
  explicit ProgressHistory(size_t capacity = 2000);

  // Appends a point. A step at or before the newest one (the job went back to a restore point
  // after a recovery) first drops the points from that step on: they were trained again. When
  // the series is full, every other point of its older half is dropped, so the chart keeps
  // the whole run with the recent part at full resolution.
  void Add(const ProgressPoint& point);

  // The points, oldest first, as the status API's `history` array.
  nlohmann::json ToJson() const;
  // A copy of the points, oldest first.
  std::vector<ProgressPoint> Points() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::vector<ProgressPoint> points_;  // GUARDED_BY(mu_), steps strictly increasing
};

}  // namespace rt::web
