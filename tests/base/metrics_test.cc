// base/metrics: the exposition text against hand-written references, name rules, histograms
// against a naive count, and concurrent updates.
#include "base/metrics.h"

#include <random>
#include <thread>

#include <gtest/gtest.h>

namespace rt {
namespace {

TEST(Metrics, ExpositionOfEveryTypeMatchesTheReference) {
  MetricsRegistry registry;
  auto counter = registry.AddCounter("rt_events_total", "Events seen.\nSecond \\ line.", {"kind"});
  ASSERT_TRUE(counter.ok());
  (*counter)->With({"a\"b"}).Increment(2);
  (*counter)->With({"x\ny\\"}).Increment();
  auto gauge = registry.AddGauge("rt_size_bytes", "A size.");
  ASSERT_TRUE(gauge.ok());
  (*gauge)->Get().Set(1.5e9);
  (*gauge)->Get().Add(-0.5e9);
  auto histogram = registry.AddHistogram("rt_wait_seconds", "Waits.", {0.1, 1, 10}, {"op"});
  ASSERT_TRUE(histogram.ok());
  for (double v : {0.05, 0.1, 0.5, 20.0}) (*histogram)->With({"save"}).Observe(v);
  auto empty = registry.AddGauge("rt_empty", "Labelled, no children yet.", {"node"});
  ASSERT_TRUE(empty.ok());

  const std::string expected =
      "# HELP rt_empty Labelled, no children yet.\n"
      "# TYPE rt_empty gauge\n"
      "# HELP rt_events_total Events seen.\\nSecond \\\\ line.\n"
      "# TYPE rt_events_total counter\n"
      "rt_events_total{kind=\"a\\\"b\"} 2\n"
      "rt_events_total{kind=\"x\\ny\\\\\"} 1\n"
      "# HELP rt_size_bytes A size.\n"
      "# TYPE rt_size_bytes gauge\n"
      "rt_size_bytes 1000000000\n"
      "# HELP rt_wait_seconds Waits.\n"
      "# TYPE rt_wait_seconds histogram\n"
      "rt_wait_seconds_bucket{op=\"save\",le=\"0.1\"} 2\n"
      "rt_wait_seconds_bucket{op=\"save\",le=\"1\"} 3\n"
      "rt_wait_seconds_bucket{op=\"save\",le=\"10\"} 3\n"
      "rt_wait_seconds_bucket{op=\"save\",le=\"+Inf\"} 4\n"
      "rt_wait_seconds_sum{op=\"save\"} 20.65\n"
      "rt_wait_seconds_count{op=\"save\"} 4\n";
  EXPECT_EQ(registry.Exposition(), expected);
}

TEST(Metrics, UnlabelledFamiliesShowZeroFromTheStart) {
  MetricsRegistry registry;
  ASSERT_TRUE(registry.AddCounter("a_total", "A.").ok());
  ASSERT_TRUE(registry.AddHistogram("b_seconds", "B.", {1}).ok());
  EXPECT_EQ(registry.Exposition(),
            "# HELP a_total A.\n# TYPE a_total counter\na_total 0\n"
            "# HELP b_seconds B.\n# TYPE b_seconds histogram\n"
            "b_seconds_bucket{le=\"1\"} 0\nb_seconds_bucket{le=\"+Inf\"} 0\n"
            "b_seconds_sum 0\nb_seconds_count 0\n");
}

TEST(Metrics, NamesThatBreakTheConventionsAreRefused) {
  MetricsRegistry registry;
  EXPECT_EQ(registry.AddCounter("events", "no _total").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddGauge("size_total", "a gauge named like a counter").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddGauge("9lives", "starts with a digit").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddGauge("has-dash", "dash").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddGauge("ok_gauge", "reserved label", {"__x"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddGauge("ok_gauge", "label with colon", {"a:b"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddGauge("ok_gauge", "repeated", {"a", "a"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddHistogram("h_seconds", "le label", {1}, {"le"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddHistogram("h_seconds", "unsorted", {2, 1}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddHistogram("h_seconds", "none", {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddHistogram("h_count", "suffix", {1}).status().code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(registry.AddGauge("ns:ok_gauge", "fine", {"node_id"}).ok());
  Status again = registry.AddCounter("ns:ok_gauge", "taken").status();
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument);  // not _total: the rule comes first
  EXPECT_EQ(registry.AddGauge("ns:ok_gauge", "taken").status().code(), StatusCode::kAlreadyExists);
}

TEST(Metrics, HistogramBucketsMatchANaiveCount) {
  const std::vector<double> bounds = ExponentialBuckets(0.001, 2, 12);
  ASSERT_EQ(bounds.size(), 12u);
  EXPECT_DOUBLE_EQ(bounds[11], 0.001 * 2048);
  Histogram histogram(bounds);
  std::mt19937 rng(7);
  std::exponential_distribution<double> dist(5.0);
  std::vector<double> values;
  for (int i = 0; i < 5000; ++i) values.push_back(dist(rng));
  values.push_back(bounds[3]);  // exactly on a bound: counted in that bucket
  double sum = 0;
  for (double v : values) {
    histogram.Observe(v);
    sum += v;
  }
  const Histogram::Snapshot snapshot = histogram.Read();
  for (size_t b = 0; b < bounds.size(); ++b) {
    uint64_t naive = 0;
    for (double v : values) naive += v <= bounds[b] ? 1 : 0;
    EXPECT_EQ(snapshot.cumulative[b], naive) << "bucket le=" << bounds[b];
  }
  EXPECT_EQ(snapshot.count, values.size());
  EXPECT_NEAR(snapshot.sum, sum, 1e-9 * sum);
}

TEST(Metrics, ConcurrentUpdatesAreAllCounted) {
  MetricsRegistry registry;
  auto* counter = *registry.AddCounter("c_total", "C.", {"thread"});
  auto* gauge = *registry.AddGauge("g", "G.");
  auto* histogram = *registry.AddHistogram("h_seconds", "H.", {0.5});
  std::vector<std::thread> threads;
  constexpr int kThreads = 4, kEach = 20000;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        counter->With({"shared"}).Increment();
        counter->With({std::to_string(t)}).Increment(0.5);
        gauge->Get().Add(1);
        histogram->Get().Observe(i % 2 ? 1.0 : 0.25);
        if (i % 5000 == 0) {
          EXPECT_FALSE(registry.Exposition().empty());
        }
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(counter->With({"shared"}).value(), kThreads * kEach);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(counter->With({std::to_string(t)}).value(), kEach / 2);
  }
  EXPECT_EQ(gauge->Get().value(), kThreads * kEach);
  const auto snapshot = histogram->Get().Read();
  EXPECT_EQ(snapshot.count, uint64_t{kThreads * kEach});
  EXPECT_EQ(snapshot.cumulative[0], uint64_t{kThreads * kEach / 2});
}

TEST(Metrics, ValuesAreFormattedAsPrometheusReadsThem) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(3), "3");
  EXPECT_EQ(FormatMetricValue(0.25), "0.25");
  EXPECT_EQ(FormatMetricValue(1e20), "1e+20");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
}

}  // namespace
}  // namespace rt
