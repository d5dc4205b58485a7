// Recent healthy RTT medians per path class, from finished qualifications.
#include "daemon/aggregator/qualify/fleet_history.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/log.h"

namespace fw::qualify {
namespace {

// The median of a non-empty list (the mean of the middle two for an even count).
double Median(std::vector<double> v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  return (hi + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
}

}  // namespace

bool FleetHistory::KnownClass(const std::string& c) {
  if (c.starts_with(kRdmaPrefix)) return KnownClass(c.substr(kRdmaPrefix.size()));
  return c == "intra_leaf" || c == "inter_leaf" || c == "unknown";
}

std::string FleetHistory::Describe(const std::string& c) {
  if (c.starts_with(kRdmaPrefix)) return "RDMA " + Describe(c.substr(kRdmaPrefix.size()));
  if (c == "intra_leaf") return "same-leaf";
  if (c == "inter_leaf") return "cross-leaf";
  return "unmapped";
}

void FleetHistory::Add(const std::string& path_class, double rtt_p99_s) {
  MutexLock lock(mu_);
  if (!KnownClass(path_class) || !std::isfinite(rtt_p99_s) || rtt_p99_s <= 0) {
    ++skipped_;
    return;
  }
  std::deque<double>& runs = runs_[path_class];
  runs.push_back(rtt_p99_s);
  if (runs.size() > kMaxRuns) runs.pop_front();
}

std::optional<PathClassBaseline> FleetHistory::Baseline(const std::string& path_class) const {
  MutexLock lock(mu_);
  auto it = runs_.find(path_class);
  if (it == runs_.end() || it->second.size() < kMinRuns) return std::nullopt;
  std::vector<double> v(it->second.begin(), it->second.end());
  return PathClassBaseline{Median(v), v.size()};
}

std::map<std::string, PathClassBaseline> FleetHistory::Baselines() const {
  std::map<std::string, PathClassBaseline> out;
  for (const char* c : {"intra_leaf", "inter_leaf", "unknown"}) {
    if (auto b = Baseline(c)) out[c] = *b;
  }
  return out;
}

size_t FleetHistory::Load(const nlohmann::json& reports) {
  size_t bad = 0;
  std::string first;
  const auto skip = [&](const std::string& why) {
    if (bad++ == 0) first = why;
  };
  // Oldest first, so that the newest runs are the ones kept.
  std::vector<std::pair<std::string, double>> found;
  if (!reports.is_array()) {
    skip("the history is not a list of reports");
  } else {
    for (auto r = reports.rbegin(); r != reports.rend(); ++r) {
      if (!r->is_object()) {
        skip("a report is not an object");
        continue;
      }
      auto pc = r->find("path_classes");
      if (pc == r->end()) continue;
      if (!pc->is_object()) {
        skip("path_classes is not an object");
        continue;
      }
      for (const auto& [cls, entry] : pc->items()) {
        const auto v = entry.is_object() ? entry.find("rtt_p99_s") : entry.end();
        if (!KnownClass(cls) || v == entry.end() || !v->is_number() ||
            !std::isfinite(v->get<double>()) || v->get<double>() <= 0) {
          skip("path class '" + cls.substr(0, 40) + "' has no positive rtt_p99_s");
          continue;
        }
        found.emplace_back(cls, v->get<double>());
      }
    }
  }
  for (const auto& [cls, v] : found) Add(cls, v);
  if (bad > 0) {
    {
      MutexLock lock(mu_);
      skipped_ += bad;
    }
    spdlog::warn(
        "component=qualify msg=\"fleet history entries skipped; the rest is used\" count={} "
        "first={}",
        bad, LogQuote(first));
  }
  return bad;
}

uint64_t FleetHistory::skipped() const {
  MutexLock lock(mu_);
  return skipped_;
}

}  // namespace fw::qualify
