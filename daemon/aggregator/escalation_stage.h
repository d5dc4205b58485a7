// Adaptive escalation wired in (docs/planner.md, "Escalation"): after each analyzer tick, the
// suspect elements go to the EscalationBudget, and the pairs it escalates become PlanBook
// overlays (raised probe rate, trace requests served first); ended escalations clear theirs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "daemon/aggregator/analysis/analyzer.h"
#include "daemon/aggregator/plan/escalation.h"
#include "daemon/aggregator/plan/plan_book.h"
#include "exporter/registry.h"

namespace fw::aggregator {

// What the PlanBook must be told to go from the escalation overlays set on it (`set`: id -> trace
// id) to
// EscalationBudget::Overlays() (`now`): the overlays new or under another trace id, to set, and
// the ids no longer there, to clear. A pair's overlay takes the newest trace id of the escalations
// that raise it, so a second element's flows on it, or the end of the newer of two, sets it again.
// An overlay whose content changed under the same trace id is not set again: setting overlays
// again on every change was measured to slow the traced suite's 5 % link (docs/planner.md).
struct OverlayChanges {
  std::vector<PlanOverlay> set;
  std::vector<std::string> clear;
};
OverlayChanges ChangedOverlays(const std::map<std::string, uint64_t>& set,
                               std::vector<PlanOverlay> now);

// Not thread-safe: the aggregator's tick thread owns it.
class EscalationStage {
 public:
  // `base_rate_pps` is one planned flow's probe rate (PlannerConfig::latency_pps_per_flow).
  // `first_trace_id` should differ across restarts (the wall clock).
  EscalationStage(EscalationConfig config, analysis::Analyzer& analyzer, PlanBook& plans,
                  double base_rate_pps, const Clock& clock, metrics::Registry& registry,
                  uint64_t first_trace_id);

  // After Analyzer::Tick(): escalates, renews and ends; the overlays and the analyzer's escalation
  // evidence follow.
  void Tick();
  // Between ticks, after Analyzer::BetweenTicks(): the leads it found start now, with the last
  // tick's requests (which renew as at a tick) so that nothing else ends early. True when the
  // overlays changed (the plans must be pushed).
  bool BetweenTicks();

  const EscalationBudget& budget() const { return budget_; }

 private:
  EscalationBudget budget_;
  analysis::Analyzer& analyzer_;
  PlanBook& plans_;
  const double base_rate_pps_;
  const Clock& clock_;
  // Budget update with `requests`, overlays, the analyzer's escalations and the metrics; true when
  // the escalated pairs changed.
  bool Apply(const std::vector<aggregator::EscalationRequest>& requests);
  std::map<std::string, uint64_t> overlays_;  // set on the PlanBook now: id -> trace id
  EscalationStats last_;                      // counters are fed by the difference
  metrics::Gauge& active_elements_;
  metrics::Gauge& active_pairs_;
  metrics::Gauge& active_flows_;
  metrics::Gauge& extra_pps_;
  metrics::Gauge& budget_pps_;
  metrics::Counter& started_;
  metrics::Counter& leads_;
  metrics::Counter& refused_;
  metrics::Counter& extra_probes_;
  metrics::Counter& trace_requests_;
  metrics::Counter& between_ticks_;
};

}  // namespace fw::aggregator
