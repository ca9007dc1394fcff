#include "base/metrics.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

namespace rt {
namespace {

bool IsNameChar(char c, bool first, bool colon_allowed) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (c == ':') return colon_allowed;
  return !first && c >= '0' && c <= '9';
}

bool IsValidName(std::string_view name, bool colon_allowed) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (!IsNameChar(name[i], i == 0, colon_allowed)) return false;
  return true;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

// `{a="x",b="y"}` (with `extra` appended, e.g. le="0.5"), or "" when there are no labels.
std::string LabelSet(const std::vector<std::string>& names, const std::vector<std::string>& values,
                     std::string_view extra = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out +=
        fmt::format("{}{}=\"{}\"", out.empty() ? "" : ",", names[i], EscapeLabelValue(values[i]));
  if (!extra.empty()) out += fmt::format("{}{}", out.empty() ? "" : ",", extra);
  return out.empty() ? "" : "{" + out + "}";
}

void AtomicAdd(std::atomic<double>& target, double amount) {
  double old = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(old, old + amount, std::memory_order_relaxed)) {
  }
}

}  // namespace

void Counter::Increment(double amount) {
  RT_CHECK(amount >= 0);
  AtomicAdd(value_, amount);
}

void Gauge::Add(double amount) { AtomicAdd(value_, amount); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), per_bucket_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  // The first bucket whose bound is >= value (buckets are inclusive upper bounds).
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  std::lock_guard lock(mu_);
  ++per_bucket_[bucket];
  sum_ += value;
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot snapshot;
  snapshot.bounds = bounds_;
  std::lock_guard lock(mu_);
  uint64_t running = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    running += per_bucket_[i];
    snapshot.cumulative.push_back(running);
  }
  snapshot.count = running + per_bucket_.back();
  snapshot.sum = sum_;
  return snapshot;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  double bound = start;
  for (int i = 0; i < count; ++i, bound *= factor) bounds.push_back(bound);
  return bounds;
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

struct MetricsRegistry::Entry {
  MetricType type;
  std::string help;
  std::unique_ptr<MetricFamily<Counter>> counter;
  std::unique_ptr<MetricFamily<Gauge>> gauge;
  std::unique_ptr<MetricFamily<Histogram>> histogram;
};

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

Status MetricsRegistry::CheckNew(const std::string& name, MetricType type,
                                 const std::vector<std::string>& label_names) const {
  if (!IsValidName(name, true))
    return InvalidArgument("metric name '" + name + "' is not [a-zA-Z_:][a-zA-Z0-9_:]*");
  if (type == MetricType::kCounter && !EndsWith(name, "_total"))
    return InvalidArgument("counter '" + name + "' must end in _total");
  if (type != MetricType::kCounter && EndsWith(name, "_total"))
    return InvalidArgument("'" + name + "' ends in _total but is not a counter");
  if (type == MetricType::kHistogram &&
      (EndsWith(name, "_bucket") || EndsWith(name, "_count") || EndsWith(name, "_sum")))
    return InvalidArgument("histogram '" + name + "' must not end in _bucket, _count or _sum");
  std::set<std::string> seen;
  for (const auto& label : label_names) {
    if (!IsValidName(label, false) || label.rfind("__", 0) == 0)
      return InvalidArgument("metric '" + name + "': bad label name '" + label + "'");
    if (type == MetricType::kHistogram && label == "le")
      return InvalidArgument("histogram '" + name + "' must not have a label named le");
    if (!seen.insert(label).second)
      return InvalidArgument("metric '" + name + "': label '" + label + "' repeated");
  }
  if (families_.count(name))
    return Status(StatusCode::kAlreadyExists, "metric '" + name + "' already registered");
  return Status();
}

Result<MetricFamily<Counter>*> MetricsRegistry::AddCounter(std::string name, std::string help,
                                                           std::vector<std::string> label_names) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(CheckNew(name, MetricType::kCounter, label_names));
  auto entry = std::make_unique<Entry>(Entry{MetricType::kCounter, std::move(help), {}, {}, {}});
  const bool unlabelled = label_names.empty();
  entry->counter.reset(new MetricFamily<Counter>(std::move(label_names), {}));
  if (unlabelled) entry->counter->Get();
  auto* family = entry->counter.get();
  families_.emplace(std::move(name), std::move(entry));
  return family;
}

Result<MetricFamily<Gauge>*> MetricsRegistry::AddGauge(std::string name, std::string help,
                                                       std::vector<std::string> label_names) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(CheckNew(name, MetricType::kGauge, label_names));
  auto entry = std::make_unique<Entry>(Entry{MetricType::kGauge, std::move(help), {}, {}, {}});
  const bool unlabelled = label_names.empty();
  entry->gauge.reset(new MetricFamily<Gauge>(std::move(label_names), {}));
  if (unlabelled) entry->gauge->Get();
  auto* family = entry->gauge.get();
  families_.emplace(std::move(name), std::move(entry));
  return family;
}

Result<MetricFamily<Histogram>*> MetricsRegistry::AddHistogram(
    std::string name, std::string help, std::vector<double> bounds,
    std::vector<std::string> label_names) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(CheckNew(name, MetricType::kHistogram, label_names));
  if (bounds.empty()) return InvalidArgument("histogram '" + name + "' has no buckets");
  for (size_t i = 0; i < bounds.size(); ++i)
    if (!std::isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1]))
      return InvalidArgument("histogram '" + name +
                             "': bucket bounds must be finite and strictly increasing");
  auto entry = std::make_unique<Entry>(Entry{MetricType::kHistogram, std::move(help), {}, {}, {}});
  const bool unlabelled = label_names.empty();
  entry->histogram.reset(new MetricFamily<Histogram>(std::move(label_names), std::move(bounds)));
  if (unlabelled) entry->histogram->Get();
  auto* family = entry->histogram.get();
  families_.emplace(std::move(name), std::move(entry));
  return family;
}

std::string MetricsRegistry::Exposition() const {
  std::string out;
  std::lock_guard lock(mu_);
  for (const auto& [family_name, entry] : families_) {
    const std::string& name =
        family_name;  // a lambda below uses it (clang 14: no binding captures)
    static constexpr const char* kTypeNames[] = {"counter", "gauge", "histogram"};
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, EscapeHelp(entry->help), name,
                       kTypeNames[static_cast<int>(entry->type)]);
    auto simple = [&](const auto& family) {
      std::lock_guard family_lock(family.mu_);
      for (const auto& [values, metric] : family.children_)
        out += fmt::format("{}{} {}\n", name, LabelSet(family.label_names_, values),
                           FormatMetricValue(metric->value()));
    };
    if (entry->counter) simple(*entry->counter);
    if (entry->gauge) simple(*entry->gauge);
    if (entry->histogram) {
      const auto& family = *entry->histogram;
      std::lock_guard family_lock(family.mu_);
      for (const auto& [values, metric] : family.children_) {
        const Histogram::Snapshot snapshot = metric->Read();
        for (size_t i = 0; i < snapshot.bounds.size(); ++i) {
          const std::string le = "le=\"" + FormatMetricValue(snapshot.bounds[i]) + "\"";
          out += fmt::format("{}_bucket{} {}\n", name, LabelSet(family.label_names_, values, le),
                             snapshot.cumulative[i]);
        }
        out += fmt::format("{}_bucket{} {}\n", name,
                           LabelSet(family.label_names_, values, "le=\"+Inf\""), snapshot.count);
        const std::string labels = LabelSet(family.label_names_, values);
        out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, labels,
                           FormatMetricValue(snapshot.sum), name, labels, snapshot.count);
      }
    }
  }
  return out;
}

}  // namespace rt
