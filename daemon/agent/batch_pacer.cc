#include "daemon/agent/batch_pacer.h"

#include <algorithm>

namespace fw::agent {

void BatchPacer::SetPlan(const fabricwatch::v1::ProbePlan& plan) {
  std::chrono::nanoseconds interval = default_;
  if (plan.report_interval_ms() > 0) {
    interval = std::clamp<std::chrono::nanoseconds>(
        std::chrono::milliseconds(plan.report_interval_ms()), kMinInterval, kMaxInterval);
  }
  interval_ns_.store(interval.count());
  auto peers = std::make_shared<PeerSet>();
  for (const auto& t : plan.trace_requests()) peers->insert(t.peer());
  const bool any = !peers->empty();
  {
    MutexLock lock(mu_);
    escalated_ = std::move(peers);
  }
  any_escalated_.store(any);
}

bool BatchPacer::Urgent(const net::ProbeResult& r) const {
  if (r.lost) return true;
  if (!any_escalated_.load(std::memory_order_relaxed)) return false;
  MutexLock lock(mu_);
  return escalated_ && escalated_->contains(r.PeerName());
}

}  // namespace fw::agent
