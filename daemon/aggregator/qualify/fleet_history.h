// The fleet's history per path class: the third threshold source of a qualification (after the
// profile's limits and the set's own median). Each finished run leaves, per path class, the median
// RTT p99 of its healthy pairs (both ends passed); a later set is held to the median of the recent
// runs of the same class, so a set that is uniformly bad still fails against what the fleet did
// before. Path classes are the fabric map's: "intra_leaf", "inter_leaf", "unknown" (no map, or a
// node outside it); the RDMA UD mesh's network RTTs (microseconds, not the host stack's
// milliseconds) keep their own history under the same classes prefixed "rdma_".
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/mutex.h"

namespace fw::qualify {

struct PathClassBaseline {
  double rtt_p99_s = 0;  // the median of the recent runs' medians
  size_t runs = 0;       // how many runs it is the median of
};

// Thread-safe.
class FleetHistory {
 public:
  static constexpr std::string_view kRdmaPrefix = "rdma_";
  static constexpr size_t kMaxRuns = 50;  // recent runs kept per path class
  static constexpr size_t kMinRuns = 3;   // fewer: no baseline (one run says little)

  // One run's healthy median for `path_class`; a value that is not a positive finite number, or
  // an unknown class, is ignored and counted as skipped.
  void Add(const std::string& path_class, double rtt_p99_s);
  // nullopt while fewer than kMinRuns runs of the class are known.
  std::optional<PathClassBaseline> Baseline(const std::string& path_class) const;
  std::map<std::string, PathClassBaseline> Baselines() const;

  // Rebuilds from stored reports, newest first (QualificationStore::Find, docs/qualify.md JSON:
  // each report's "path_classes": {"inter_leaf": {"rtt_p99_s": 0.0004}}). A report without the
  // field is skipped silently (older aggregators, runs with no healthy pair); a malformed field
  // or value is skipped, counted and logged once per load. Returns the malformed count.
  size_t Load(const nlohmann::json& reports);

  // Malformed entries skipped by Add() and Load() since construction.
  uint64_t skipped() const;

  // "same-leaf", "cross-leaf", "unmapped": the class as a reason names it.
  static std::string Describe(const std::string& path_class);
  static bool KnownClass(const std::string& path_class);

 private:
  mutable Mutex mu_;
  std::map<std::string, std::deque<double>> runs_ FW_GUARDED_BY(mu_);  // oldest first
  uint64_t skipped_ FW_GUARDED_BY(mu_) = 0;
};

}  // namespace fw::qualify
