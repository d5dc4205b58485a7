// Decides when a collective group is slow: its bus bandwidth falls clearly below what is expected
// of it (its profile, else the better of its own history and the groups of the same shape), for
// several runs in a row. Hysteresis on the way back, so noise never starts or stops a bisection.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <string>

namespace fw::aggregator::collective {

struct SlowGroupConfig {
  double shift = 0.10;          // slow runs read below (1 - shift) x expected
  int enter_runs = 3;           // consecutive slow runs before the group is slow
  double recover_ratio = 0.95;  // a slow group recovers at or above this fraction of expected
  int exit_runs = 3;            // consecutive such runs
  size_t min_history = 3;       // own healthy runs before its own history is an expectation
  size_t history = 20;          // healthy runs kept per group
  size_t min_peers = 2;         // peer groups of the same shape before peers are an expectation
};

struct GroupVerdict {
  bool slow = false;         // the group's state after this run
  bool became_slow = false;  // this run made it slow (start a bisection)
  bool recovered = false;    // this run ended a slow spell
  double measured = 0;
  double expected = 0;  // 0 while learning
  std::string basis;    // "profile", "history", "peers", or empty while learning
};

// Not thread-safe: the aggregator's collective stage owns it on one thread.
class SlowGroupTracker {
 public:
  explicit SlowGroupTracker(SlowGroupConfig config = {}) : config_(config) {}

  // One run of `group` (a stable name across runs) of `shape` (groups that should perform alike,
  // e.g. "inter_leaf/8"). `profile_busbw` > 0 is the busbw the hardware profile promises.
  GroupVerdict OnRun(const std::string& group, const std::string& shape, double busbw,
                     double profile_busbw = 0);
  bool slow(const std::string& group) const;
  void Forget(const std::string& group);
  size_t size() const { return groups_.size(); }

 private:
  struct State {
    std::string shape;
    std::deque<double> healthy;  // recent runs that were not slow
    double baseline = 0;         // median of `healthy` once there are min_history of them
    int below = 0;
    int above = 0;
    bool slow = false;
    double frozen_expected = 0;  // the expectation when the spell began
    std::string frozen_basis;
  };
  // The expectation for `group` now, and what it rests on.
  double Expected(const std::string& group, const State& s, double profile_busbw,
                  std::string* basis) const;

  const SlowGroupConfig config_;
  std::map<std::string, State> groups_;
};

}  // namespace fw::aggregator::collective
