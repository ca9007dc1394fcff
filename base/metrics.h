// Metrics for Prometheus: counters, gauges and histograms, with labels, kept in a registry that
// renders the Prometheus text exposition format (version 0.0.4) for a /metrics scrape.
//
// Names follow Prometheus conventions, which the registry enforces: [a-zA-Z_:][a-zA-Z0-9_:]*,
// counters end in `_total`, units in the name (`_seconds`, `_bytes`). docs/metrics.md lists the
// daemon's metrics.
//
// Thread safety: everything here is thread-safe. Updating a metric is lock-free for counters and
// gauges and takes a per-histogram mutex for histograms; Exposition() may run concurrently with
// updates. Metric objects live as long as their registry and never move (hold references).
//
// Example:
//     MetricsRegistry registry;
//     ASSIGN_OR_RETURN(auto* recoveries, registry.AddCounter(
//         "ringtrain_recoveries_total", "Recoveries of the job, by cause.", {"cause"}));
//     recoveries->With({"node_lost"}).Increment();
//     std::string text = registry.Exposition();
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"

namespace rt {

// The Content-Type of Exposition()'s text.
inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// A value that only goes up (events, bytes, seconds spent).
class Counter {
 public:
  // Adds `amount` (must be >= 0: a counter never goes down; a negative amount is a bug and
  // aborts).
  void Increment(double amount = 1);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down (a size, a step, a rate).
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double amount);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into buckets with fixed upper bounds (durations, sizes).
class Histogram {
 public:
  // `bounds`: the buckets' inclusive upper bounds, strictly increasing and finite (the registry
  // checks them); a +Inf bucket is implied.
  explicit Histogram(std::vector<double> bounds);
  // Counts one observation.
  void Observe(double value);

  // A consistent copy of the state.
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound: observations <= bound
    uint64_t count = 0;                // all observations (the +Inf bucket)
    double sum = 0;
  };
  Snapshot Read() const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> per_bucket_;  // GUARDED_BY(mu_), one per bound plus +Inf
  double sum_ = 0;                    // GUARDED_BY(mu_)
};

// Bucket bounds start, start*factor, ... (`count` of them), e.g. (0.001, 2, 16) for seconds.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// What a family holds.
enum class MetricType { kCounter, kGauge, kHistogram };

// One named metric and its children, one per combination of label values.
template <typename Metric>
class MetricFamily {
 public:
  // The child for `label_values` (one per label name, in the order they were registered),
  // created at 0 on first use. A wrong number of values is a bug and aborts.
  Metric& With(const std::vector<std::string>& label_values);
  // The only child of a family without labels.
  Metric& Get() { return With({}); }

 private:
  friend class MetricsRegistry;
  MetricFamily(std::vector<std::string> label_names, std::vector<double> bounds)
      : label_names_(std::move(label_names)), bounds_(std::move(bounds)) {}
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;  // histograms only
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> children_;  // GUARDED_BY(mu_)
};

// A set of metric families and their text exposition.
class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Registers a family; the registry owns it. Errors: InvalidArgument for a name or label name
  // that breaks the conventions (a counter not ending in `_total`, reserved `__` labels, `le`
  // on a histogram, repeated labels, bad bucket bounds), AlreadyExists for a name already
  // registered. A family without labels shows 0 from the start.
  Result<MetricFamily<Counter>*> AddCounter(std::string name, std::string help,
                                            std::vector<std::string> label_names = {});
  Result<MetricFamily<Gauge>*> AddGauge(std::string name, std::string help,
                                        std::vector<std::string> label_names = {});
  Result<MetricFamily<Histogram>*> AddHistogram(std::string name, std::string help,
                                                std::vector<double> bounds,
                                                std::vector<std::string> label_names = {});

  // The Prometheus text exposition of every family, sorted by name, children sorted by labels.
  std::string Exposition() const;

 private:
  struct Entry;
  Status CheckNew(const std::string& name, MetricType type,
                  const std::vector<std::string>& label_names) const;  // REQUIRES(mu_)
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Entry>> families_;  // GUARDED_BY(mu_)
};

// Formats a sample value as the exposition format writes it ("1", "0.25", "+Inf", "NaN").
std::string FormatMetricValue(double value);

// `value` escaped for a label value in the exposition format (\\, \" and \n).
std::string EscapeLabelValue(std::string_view value);

template <typename Metric>
Metric& MetricFamily<Metric>::With(const std::vector<std::string>& label_values) {
  RT_CHECK(label_values.size() == label_names_.size());
  std::lock_guard lock(mu_);
  auto& child = children_[label_values];
  if (!child) {
    if constexpr (std::is_same_v<Metric, Histogram>)
      child = std::make_unique<Histogram>(bounds_);
    else
      child = std::make_unique<Metric>();
  }
  return *child;
}

}  // namespace rt
