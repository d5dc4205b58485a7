// Metric registry and streaming Prometheus text exposition (format 0.0.4).
#include "exporter/registry.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace fw::metrics {

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "fabricwatch metrics: %s\n", what.c_str());
  std::abort();
}

}  // namespace

bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

void AppendEscapedLabelValue(std::string& out, std::string_view v) {
  for (char c : v) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
}

void AppendEscapedHelp(std::string& out, std::string_view v) {
  for (char c : v) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
}

void AppendNumber(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
  } else {
    char buf[32];
    // Shortest representation that round-trips; integers print without an exponent up to 2^53.
    std::to_chars_result r;
    if (std::fabs(v) < 9007199254740992.0 && v == std::floor(v)) {
      r = std::to_chars(buf, buf + sizeof buf, static_cast<int64_t>(v));
    } else {
      r = std::to_chars(buf, buf + sizeof buf, v);
    }
    out.append(buf, r.ptr);
  }
}

Histogram::Histogram(const std::vector<double>& bounds)
    : bounds_(bounds), buckets_(new std::atomic<uint64_t>[bounds.size() + 1]) {
  for (size_t i = 0; i + 1 < bounds_.size(); ++i) {
    if (!(bounds_[i] < bounds_[i + 1])) Die("histogram bounds must be strictly increasing");
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::Observe(double v) {
  // Linear search beats binary search for the short bucket lists used here.
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Take() const {
  Snapshot s;
  s.cumulative.resize(bounds_.size() + 1);
  uint64_t acc = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    acc += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = acc;
  }
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

FamilyBase::FamilyBase(std::string name, std::string help, std::vector<std::string> label_names,
                       MetricType type)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      type_(type) {}

void FamilyBase::RenderHeader(std::string& out) const {
  out += "# HELP ";
  out += name_;
  out += ' ';
  AppendEscapedHelp(out, help_);
  out += "\n# TYPE ";
  out += name_;
  switch (type_) {
    case MetricType::kCounter:
      out += " counter\n";
      break;
    case MetricType::kGauge:
      out += " gauge\n";
      break;
    case MetricType::kHistogram:
      out += " histogram\n";
      break;
  }
}

void FamilyBase::AppendLabels(std::string& out, const std::vector<std::string>& values) const {
  for (size_t i = 0; i < label_names_.size(); ++i) {
    out += i == 0 ? '{' : ',';
    out += label_names_[i];
    out += "=\"";
    AppendEscapedLabelValue(out, values[i]);
    out += '"';
  }
}

template <typename M>
M& Family<M>::WithLabels(const std::vector<std::string>& values) {
  if (values.size() != label_names_.size()) {
    Die("metric " + name_ + ": expected " + std::to_string(label_names_.size()) +
        " label values, got " + std::to_string(values.size()));
  }
  MutexLock lock(mu_);
  auto it = series_.find(values);
  if (it == series_.end()) {
    Entry e;
    if constexpr (std::is_same_v<M, Histogram>) {
      e.metric = &metrics_.emplace_back(bounds_);
    } else {
      e.metric = &metrics_.emplace_back();
    }
    e.offset = staged_.size();
    if constexpr (std::is_same_v<M, Histogram>) {
      AppendLabels(staged_, values);
    } else {
      staged_ += name_;
      AppendLabels(staged_, values);
      if (!label_names_.empty()) staged_ += '}';
      staged_ += ' ';
    }
    e.size = staged_.size() - e.offset;
    it = series_.emplace(values, e).first;
    index_stale_ = true;
  } else if (!it->second.visible) {
    it->second.visible = true;
    index_stale_ = true;
  }
  return *it->second.metric;
}

template <typename M>
void Family<M>::Remove(const std::vector<std::string>& values) {
  MutexLock lock(mu_);
  auto it = series_.find(values);
  if (it != series_.end() && it->second.visible) {
    it->second.visible = false;
    index_stale_ = true;
  }
}

template <typename M>
size_t Family<M>::size() const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& [k, e] : series_) n += e.visible ? 1 : 0;
  return n;
}

template <typename M>
void Family<M>::RebuildIndex() const {
  auto index = std::make_shared<RenderIndex>();
  const std::string* old_text = index_ ? &index_->text : nullptr;
  index->text.reserve((old_text ? old_text->size() : 0) + staged_.size());
  index->lines.reserve(series_.size());
  for (auto& [values, entry] : series_) {
    const std::string& from = entry.staged ? staged_ : *old_text;
    size_t offset = index->text.size();
    index->text.append(from, entry.offset, entry.size);
    entry.offset = offset;
    entry.staged = false;
    if (entry.visible) index->lines.push_back({entry.metric, offset, entry.size});
  }
  staged_.clear();
  staged_.shrink_to_fit();
  index_ = std::move(index);
  index_stale_ = false;
}

template <typename M>
void Family<M>::Render(std::string& out, const std::function<void(std::string_view)>& sink) const {
  std::shared_ptr<const RenderIndex> index;
  {
    MutexLock lock(mu_);
    if (index_stale_) RebuildIndex();
    index = index_;
  }
  // From here on no lock: the index is immutable and the metrics are atomics, so WithLabels() and
  // other scrapes go on while the sink blocks on a slow reader. Series created meanwhile show in
  // the next render.
  RenderHeader(out);
  const char* text = index->text.data();
  for (const auto& line : index->lines) {
    if constexpr (std::is_same_v<M, Histogram>) {
      std::string_view labels(text + line.offset, line.size);
      Histogram::Snapshot snap = line.metric->Take();
      const auto& bounds = line.metric->bounds();
      for (size_t i = 0; i <= bounds.size(); ++i) {
        out += name_;
        out += "_bucket";
        out += labels;
        out += label_names_.empty() ? "{le=\"" : ",le=\"";
        if (i < bounds.size()) {
          AppendNumber(out, bounds[i]);
        } else {
          out += "+Inf";
        }
        out += "\"} ";
        AppendNumber(out, static_cast<double>(snap.cumulative[i]));
        out += '\n';
      }
      for (const char* suffix : {"_sum", "_count"}) {
        out += name_;
        out += suffix;
        out += labels;
        if (!label_names_.empty()) out += '}';
        out += ' ';
        AppendNumber(out,
                     suffix[1] == 's' ? snap.sum : static_cast<double>(snap.cumulative.back()));
        out += '\n';
      }
    } else {
      out.append(text + line.offset, line.size);
      AppendNumber(out, line.metric->Value());
      out += '\n';
    }
    if (out.size() >= Registry::kChunkBytes) {
      sink(out);
      out.clear();
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

void Registry::CheckNewName(const std::string& name, const std::vector<std::string>& label_names) {
  if (!IsValidMetricName(name)) Die("invalid metric name '" + name + "'");
  std::set<std::string> seen;
  for (const auto& l : label_names) {
    if (!IsValidLabelName(l)) Die("metric " + name + ": invalid label name '" + l + "'");
    if (!seen.insert(l).second) Die("metric " + name + ": duplicate label name '" + l + "'");
  }
  for (const auto& f : families_) {
    if (f->name() == name) Die("metric " + name + " registered twice");
  }
}

Family<Counter>& Registry::AddCounter(std::string name, std::string help,
                                      std::vector<std::string> label_names) {
  MutexLock lock(mu_);
  CheckNewName(name, label_names);
  auto f = std::make_unique<Family<Counter>>(std::move(name), std::move(help),
                                             std::move(label_names), MetricType::kCounter);
  auto& ref = *f;
  families_.push_back(std::move(f));
  return ref;
}

Family<Gauge>& Registry::AddGauge(std::string name, std::string help,
                                  std::vector<std::string> label_names) {
  MutexLock lock(mu_);
  CheckNewName(name, label_names);
  auto f = std::make_unique<Family<Gauge>>(std::move(name), std::move(help), std::move(label_names),
                                           MetricType::kGauge);
  auto& ref = *f;
  families_.push_back(std::move(f));
  return ref;
}

Family<Histogram>& Registry::AddHistogram(std::string name, std::string help,
                                          std::vector<std::string> label_names,
                                          std::vector<double> bucket_bounds) {
  MutexLock lock(mu_);
  CheckNewName(name, label_names);
  for (const auto& l : label_names) {
    if (l == "le") Die("metric " + name + ": histograms cannot use the label 'le'");
  }
  auto f =
      std::make_unique<Family<Histogram>>(std::move(name), std::move(help), std::move(label_names),
                                          MetricType::kHistogram, std::move(bucket_bounds));
  auto& ref = *f;
  families_.push_back(std::move(f));
  return ref;
}

void Registry::AddBeforeRender(std::function<void()> hook) {
  MutexLock lock(mu_);
  hooks_.push_back(std::move(hook));
}

void Registry::Render(const std::function<void(std::string_view)>& sink) const {
  std::vector<std::function<void()>> hooks;
  std::vector<const FamilyBase*> families;
  {
    MutexLock lock(mu_);
    hooks = hooks_;
    for (const auto& f : families_) families.push_back(f.get());
  }
  for (const auto& h : hooks) h();
  std::string out;
  out.reserve(kChunkBytes + 4096);
  for (const FamilyBase* f : families) f->Render(out, sink);
  if (!out.empty()) sink(out);
}

std::string Registry::RenderToString() const {
  std::string all;
  Render([&](std::string_view chunk) { all.append(chunk); });
  return all;
}

}  // namespace fw::metrics
