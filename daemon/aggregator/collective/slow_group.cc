// Slow-group detection with a sustained-shift gate and hysteresis.
#include "daemon/aggregator/collective/slow_group.h"

#include <vector>

#include "probes/collective/collective.h"

namespace fw::aggregator::collective {

double SlowGroupTracker::Expected(const std::string& group, const State& s, double profile_busbw,
                                  std::string* basis) const {
  if (profile_busbw > 0) {
    *basis = "profile";
    return profile_busbw;
  }
  double expected = 0;
  basis->clear();
  if (s.healthy.size() >= config_.min_history) {
    expected = s.baseline;
    *basis = "history";
  }
  std::vector<double> peers;
  for (const auto& [name, other] : groups_) {
    if (name != group && other.shape == s.shape && other.baseline > 0) {
      peers.push_back(other.baseline);
    }
  }
  if (peers.size() >= config_.min_peers) {
    const double p = fw::collective::Median(std::move(peers));
    if (p > expected) {
      expected = p;
      *basis = "peers";
    }
  }
  return expected;
}

GroupVerdict SlowGroupTracker::OnRun(const std::string& group, const std::string& shape,
                                     double busbw, double profile_busbw) {
  State& s = groups_[group];
  s.shape = shape;
  GroupVerdict v;
  v.measured = busbw;
  if (s.slow) {
    v.expected = s.frozen_expected;
    v.basis = s.frozen_basis;
    s.above = busbw >= config_.recover_ratio * s.frozen_expected ? s.above + 1 : 0;
    if (s.above >= config_.exit_runs) {
      s.slow = false;
      s.below = 0;
      s.above = 0;
      v.recovered = true;
    }
    v.slow = s.slow;
    return v;
  }
  v.expected = Expected(group, s, profile_busbw, &v.basis);
  const bool below = v.expected > 0 && busbw < (1 - config_.shift) * v.expected;
  if (below) {
    if (++s.below >= config_.enter_runs) {
      s.slow = true;
      s.above = 0;
      s.frozen_expected = v.expected;
      s.frozen_basis = v.basis;
      v.became_slow = true;
    }
  } else {
    s.below = 0;
    s.healthy.push_back(busbw);
    if (s.healthy.size() > config_.history) s.healthy.pop_front();
    if (s.healthy.size() >= config_.min_history) {
      s.baseline = fw::collective::Median({s.healthy.begin(), s.healthy.end()});
    }
  }
  v.slow = s.slow;
  return v;
}

bool SlowGroupTracker::slow(const std::string& group) const {
  auto it = groups_.find(group);
  return it != groups_.end() && it->second.slow;
}

void SlowGroupTracker::Forget(const std::string& group) { groups_.erase(group); }

}  // namespace fw::aggregator::collective
