// The metrics file writer (parallel/run_metrics.h): every queued line reaches the file in order
// and parses back to what was written, WaitWritten returns only once the lines queued before it
// are in the file, a resumed run appends, and a writer without a path writes nothing.
#include "parallel/run_metrics.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "parallel/trainer.h"

namespace rt::parallel {
namespace {

namespace fs = std::filesystem;

std::vector<nlohmann::json> ReadLines(const fs::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

StepStats Stats(int64_t step) {
  StepStats s;
  s.step = step;
  s.loss = 2.5 + 1.0 / static_cast<double>(step);
  s.lr = 1e-3;
  s.grad_norm = step == 3 ? INFINITY : 0.5;
  s.skipped = step == 3;
  s.loss_scale = 1024;
  return s;
}

class RunMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() /
        ("run_metrics_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(RunMetricsTest, EveryLineReachesTheFileInOrder) {
  const fs::path path = dir_ / "m.jsonl";
  constexpr int kSteps = 5000;
  {
    RunMetrics metrics;
    ASSERT_TRUE(metrics.Open(path.string(), false).ok());
    for (int64_t step = 1; step <= kSteps; ++step) {
      metrics.WriteStep(Stats(step), 100.0 * static_cast<double>(step), true, "1.2.3");
      if (step % 1000 == 0) metrics.WriteEval(step, 1.5);
    }
  }  // the destructor writes what is still queued
  const std::vector<nlohmann::json> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kSteps + kSteps / 1000));
  size_t i = 0;
  for (int64_t step = 1; step <= kSteps; ++step) {
    const nlohmann::json& l = lines[i++];
    const StepStats want = Stats(step);
    EXPECT_EQ(l["step"], step);
    EXPECT_EQ(l["loss"].get<double>(), want.loss);
    EXPECT_EQ(l["tokens_per_s"].get<double>(), 100.0 * static_cast<double>(step));
    EXPECT_EQ(l["loss_scale"].get<double>(), 1024.0);
    EXPECT_EQ(l["generation"], "1.2.3");
    if (step == 3) {
      EXPECT_TRUE(l["grad_norm"].is_null());
      EXPECT_EQ(l["skipped"], true);
    }
    if (step % 1000 == 0) {
      EXPECT_EQ(lines[i]["step"], step);
      EXPECT_EQ(lines[i++]["val_loss"].get<double>(), 1.5);
    }
  }
}

TEST_F(RunMetricsTest, WaitWrittenReturnsOnceTheQueuedLinesAreInTheFile) {
  const fs::path path = dir_ / "m.jsonl";
  RunMetrics metrics;
  ASSERT_TRUE(metrics.Open(path.string(), false).ok());
  for (int64_t step = 1; step <= 3000; ++step) {
    metrics.WriteStep(Stats(step), 1.0, false, "");
    if (step % 1000 != 0) continue;
    const Status s = metrics.WaitWritten(std::chrono::seconds(30));
    ASSERT_TRUE(s.ok()) << s.ToString();
    const std::vector<nlohmann::json> lines = ReadLines(path);  // while the writer still runs
    ASSERT_EQ(lines.size(), static_cast<size_t>(step));
    EXPECT_EQ(lines.back()["step"], step);
  }
  RunMetrics none;  // without a file there is nothing to wait for
  EXPECT_TRUE(none.WaitWritten(std::chrono::milliseconds(0)).ok());
}

TEST_F(RunMetricsTest, AResumedRunAppendsAndAFreshOneTruncates) {
  const fs::path path = dir_ / "m.jsonl";
  for (const bool append : {false, true}) {
    RunMetrics metrics;
    ASSERT_TRUE(metrics.Open(path.string(), append).ok());
    metrics.WriteStep(Stats(append ? 2 : 1), 1.0, false, "");
  }
  std::vector<nlohmann::json> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["step"], 1);
  EXPECT_EQ(lines[1]["step"], 2);
  EXPECT_FALSE(lines[1].contains("loss_scale"));
  EXPECT_FALSE(lines[1].contains("generation"));
  {
    RunMetrics metrics;
    ASSERT_TRUE(metrics.Open(path.string(), false).ok());
    metrics.WriteStep(Stats(7), 1.0, false, "");
  }
  lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["step"], 7);
}

TEST_F(RunMetricsTest, NoPathWritesNothingAndABadOneIsNamed) {
  RunMetrics none;
  ASSERT_TRUE(none.Open("", false).ok());
  none.WriteStep(Stats(1), 1.0, false, "");
  EXPECT_TRUE(fs::is_empty(dir_));

  RunMetrics bad;
  const std::string missing = (dir_ / "no" / "such" / "m.jsonl").string();
  const Status s = bad.Open(missing, false);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find(missing), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace rt::parallel
