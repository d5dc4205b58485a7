// Metric registry: counters, gauges and histograms in label families, rendered as Prometheus text.
//
// Callers create a family once, resolve each series once with WithLabels() and cache the reference.
// Updating a series touches only atomics. Rendering streams through a sink in bounded chunks and
// never builds the whole exposition in memory (see prometheus-cpp #646 for why).
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"

namespace fw::metrics {

class Counter {
 public:
  // Adds v (>= 0; negative values are ignored so the counter stays monotonic).
  void Inc(double v = 1.0) {
    if (v > 0) value_.fetch_add(v, std::memory_order_relaxed);
  }
  // Mirrors an external running total, such as a sysfs counter.
  void Set(double total) { value_.store(total, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  // `bounds` are the sorted, finite upper bounds; +Inf is implicit.
  explicit Histogram(const std::vector<double>& bounds);
  void Observe(double v);
  // Cumulative snapshot for rendering: counts[i] observations <= bounds[i], plus count and sum.
  struct Snapshot {
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf
    double sum = 0;
  };
  Snapshot Take() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1
  std::atomic<double> sum_{0};
};

enum class MetricType { kCounter, kGauge, kHistogram };

// Type-erased family interface used by the registry for rendering.
class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, std::vector<std::string> label_names,
             MetricType type);
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  // Appends this family's exposition to `out`, flushing it to `sink` whenever it grows past a
  // chunk.
  virtual void Render(std::string& out,
                      const std::function<void(std::string_view)>& sink) const = 0;

 protected:
  void RenderHeader(std::string& out) const;
  // `{a="x",b="y"` without the closing brace, or empty when the family has no labels.
  void AppendLabels(std::string& out, const std::vector<std::string>& values) const;

  std::string name_;
  std::string help_;
  std::vector<std::string> label_names_;
  MetricType type_;
};

template <typename M>
class Family final : public FamilyBase {
 public:
  Family(std::string name, std::string help, std::vector<std::string> label_names, MetricType type,
         std::vector<double> bounds = {})
      : FamilyBase(std::move(name), std::move(help), std::move(label_names), type),
        bounds_(std::move(bounds)) {}

  // Returns the series for these label values (in label-name order), creating it once. The
  // reference stays valid for the registry's lifetime. A wrong number of values is a programming
  // error.
  M& WithLabels(const std::vector<std::string>& values);
  // Stops exporting the series. Its reference stays valid; WithLabels() revives it.
  void Remove(const std::vector<std::string>& values);
  size_t size() const;

  void Render(std::string& out, const std::function<void(std::string_view)>& sink) const override;

 private:
  // What a render walks: the visible series in exposition order, each with its pre-rendered
  // `name{labels} ` (or `{labels` for histograms) as a range of one contiguous text. Immutable once
  // built, so a render reads it without the lock; contiguous, so a render at 100k series copies
  // memory in order instead of chasing map nodes and scattered strings.
  struct RenderIndex {
    struct Line {
      const M* metric;
      size_t offset;
      size_t size;
    };
    std::string text;         // every series' prefix, hidden ones included, in label-value order
    std::vector<Line> lines;  // visible series only
  };
  struct Entry {
    M* metric;
    // The prefix's range in index_->text, or in staged_ while `staged` (created since the last
    // rebuild).
    size_t offset = 0;
    size_t size = 0;
    bool staged = true;
    bool visible = true;
  };
  // Rebuilds index_ from series_ after series were created, hidden or revived.
  void RebuildIndex() const FW_REQUIRES(mu_);

  std::vector<double> bounds_;
  mutable Mutex mu_;
  mutable std::map<std::vector<std::string>, Entry> series_ FW_GUARDED_BY(mu_);
  // The metrics themselves: a deque keeps references stable and packs them densely.
  std::deque<M> metrics_ FW_GUARDED_BY(mu_);
  mutable std::string staged_ FW_GUARDED_BY(mu_);  // prefixes of entries not yet in index_
  mutable std::shared_ptr<const RenderIndex> index_ FW_GUARDED_BY(mu_);
  mutable bool index_stale_ FW_GUARDED_BY(mu_) = true;
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Names and label names must be valid Prometheus identifiers and unique in the registry; anything
  // else is a programming error and aborts with a message.
  Family<Counter>& AddCounter(std::string name, std::string help,
                              std::vector<std::string> label_names = {});
  Family<Gauge>& AddGauge(std::string name, std::string help,
                          std::vector<std::string> label_names = {});
  Family<Histogram>& AddHistogram(std::string name, std::string help,
                                  std::vector<std::string> label_names,
                                  std::vector<double> bucket_bounds);

  // Runs before every render, e.g. to refresh process metrics or derived gauges. Must not call
  // Render.
  void AddBeforeRender(std::function<void()> hook);

  // Streams the text format 0.0.4 to `sink` in chunks of about `kChunkBytes`.
  void Render(const std::function<void(std::string_view)>& sink) const;
  // Convenience for tests and small registries: the whole exposition as one string.
  std::string RenderToString() const;

  static constexpr size_t kChunkBytes = 64 * 1024;

 private:
  void CheckNewName(const std::string& name, const std::vector<std::string>& label_names)
      FW_REQUIRES(mu_);

  mutable Mutex mu_;
  std::vector<std::unique_ptr<FamilyBase>> families_ FW_GUARDED_BY(mu_);  // registration order
  std::vector<std::function<void()>> hooks_ FW_GUARDED_BY(mu_);
};

// Text-format helpers, exposed for tests.
void AppendEscapedLabelValue(std::string& out, std::string_view v);
void AppendEscapedHelp(std::string& out, std::string_view v);
void AppendNumber(std::string& out, double v);
bool IsValidMetricName(std::string_view name);
bool IsValidLabelName(std::string_view name);

}  // namespace fw::metrics
