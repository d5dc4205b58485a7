// When the agent sends its probe results (docs/uplink.md, "Report pacing"): at least every report
// interval the aggregator's plan sets, and at once when they hold news the aggregator acts on.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <unordered_set>

#include "common/mutex.h"
#include "common/string_hash.h"
#include "fabricwatch.pb.h"
#include "probes/net/probe_result.h"

namespace fw::agent {

class BatchPacer {
 public:
  using Clock = std::chrono::steady_clock;
  // Urgent results go at most this often: a node whose every probe is lost sends at most four
  // batches a second, not one per lost probe.
  static constexpr std::chrono::milliseconds kMinUrgentGap{250};
  // A plan's report_interval_ms is held to this range.
  static constexpr std::chrono::milliseconds kMinInterval{250};
  static constexpr std::chrono::milliseconds kMaxInterval{10'000};

  explicit BatchPacer(std::chrono::nanoseconds default_interval) : default_(default_interval) {
    interval_ns_.store(default_interval.count());
  }

  // Takes the plan's report interval (0: the default) and the flows it traces ahead (escalation's
  // suspects: ProbePlan.trace_requests, by peer). Any thread.
  void SetPlan(const fabricwatch::v1::ProbePlan& plan);
  std::chrono::nanoseconds interval() const { return std::chrono::nanoseconds(interval_ns_.load()); }

  // Whether `r` must not wait for the interval: bad news (a lost probe: loss, timeout, a failed or
  // refused burst) or a result toward a peer the plan escalated. Any thread; cheap when no flow is
  // escalated.
  bool Urgent(const net::ProbeResult& r) const;

  // When the waiting results are due, the previous batch having gone at `last`: `last` + interval,
  // or, when an urgent result waits, as soon as kMinUrgentGap after `last` allows.
  static Clock::time_point Due(Clock::time_point last, std::chrono::nanoseconds interval,
                               bool urgent) {
    return urgent ? last + std::min<std::chrono::nanoseconds>(interval, kMinUrgentGap)
                  : last + interval;
  }

 private:
  const std::chrono::nanoseconds default_;
  std::atomic<int64_t> interval_ns_{0};
  std::atomic<bool> any_escalated_{false};
  mutable Mutex mu_;
  // Looked up by a result's peer name (a string_view) without allocating.
  using PeerSet = std::unordered_set<std::string, StringHash, std::equal_to<>>;
  std::shared_ptr<const PeerSet> escalated_ FW_GUARDED_BY(mu_);
};

}  // namespace fw::agent
