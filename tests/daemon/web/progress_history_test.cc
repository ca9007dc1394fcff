// daemon/web/progress_history: bounded, ordered, recent points at full resolution, steps trained
// again replaced — checked against a plain list of every point added.
#include "daemon/web/progress_history.h"

#include <gtest/gtest.h>

namespace rt::web {
namespace {

ProgressPoint At(int64_t step) { return {step, 10.0 / step, 100.0 * step, 1.7e9 + step}; }

TEST(ProgressHistory, KeepsTheWholeRunWithinItsCapacity) {
  constexpr size_t kCapacity = 100;
  ProgressHistory history(kCapacity);
  constexpr int64_t kSteps = 10'000;
  for (int64_t step = 1; step <= kSteps; ++step) {
    history.Add(At(step));
    ASSERT_LE(history.Points().size(), kCapacity) << "after step " << step;
  }
  const std::vector<ProgressPoint> points = history.Points();
  ASSERT_GE(points.size(), kCapacity / 2);
  EXPECT_EQ(points.front().step, 1);      // the start of the run stays
  EXPECT_EQ(points.back().step, kSteps);  // and the newest point
  for (size_t i = 1; i < points.size(); ++i) {
    EXPECT_LT(points[i - 1].step, points[i].step);
    // Each kept point is the point that was added for its step.
    EXPECT_DOUBLE_EQ(points[i].loss, At(points[i].step).loss);
  }
  // The newest points are all there (full resolution at the end).
  for (size_t i = points.size() - kCapacity / 4; i < points.size(); ++i)
    EXPECT_EQ(points[i].step, kSteps - static_cast<int64_t>(points.size() - 1 - i));
}

TEST(ProgressHistory, StepsTrainedAgainReplaceTheirPoints) {
  ProgressHistory history(50);
  for (int64_t step = 1; step <= 30; ++step) history.Add(At(step));
  // A recovery went back to step 20: the next report is step 21 again.
  ProgressPoint again = At(21);
  again.loss = 1.5;
  history.Add(again);
  std::vector<ProgressPoint> points = history.Points();
  ASSERT_EQ(points.size(), 21u);
  EXPECT_EQ(points.back().step, 21);
  EXPECT_DOUBLE_EQ(points.back().loss, 1.5);
  const nlohmann::json json = history.ToJson();
  ASSERT_EQ(json.size(), 21u);
  EXPECT_EQ(json[0],
            (nlohmann::json{
                {"step", 1}, {"loss", 10.0}, {"tokens_per_second", 100.0}, {"time", 1.7e9 + 1}}));
  EXPECT_EQ(json[20]["loss"], 1.5);
}

}  // namespace
}  // namespace rt::web
