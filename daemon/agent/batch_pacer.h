// When the agent sends its probe results (docs/uplink.md, "Report pacing"): at least every report
// interval the aggregator's plan sets, and at once when they hold news the aggregator acts on.
#pragma once

#include <algorithm>
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

  // Which of the report loop's two periodic jobs run at `now`: the counter pass (due at
  // `pass_due`, every `pass_period`) and the batch (due at `batch_due`, every `batch_interval`).
  // Either one due takes the other along when that one falls due within half the shorter of the
  // two periods: a batch sent a little before its interval, or a pass taken a little early (its
  // rates run over the measured interval). Both then keep one phase, so the report loop and the
  // uplink wake once for the two instead of at two phases that drift apart, and a phase shifted
  // by an urgent batch is pulled back at the next pass.
  struct Jobs {
    bool pass = false;
    bool batch = false;
  };
  // When the counter pass is due next, after one that ran at `now` and was due at `pass_due`: a
  // period after it was due when it ran early (taken along by a batch), so that batches pulled
  // forward by urgent results cannot make the passes run more often than every period; a period
  // after `now` when it ran late (the wakeup's latency is not caught up on).
  static Clock::time_point NextPass(Clock::time_point now, Clock::time_point pass_due,
                                    std::chrono::nanoseconds pass_period) {
    return std::max(now, pass_due) + pass_period;
  }
  static Jobs DueTogether(Clock::time_point now, Clock::time_point pass_due,
                          std::chrono::nanoseconds pass_period, Clock::time_point batch_due,
                          std::chrono::nanoseconds batch_interval) {
    Jobs j{now >= pass_due, now >= batch_due};
    const auto slack = std::min(pass_period, batch_interval) / 2;
    if (j.pass && batch_due - now <= slack) j.batch = true;
    if (j.batch && pass_due - now <= slack) j.pass = true;
    return j;
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
