// EscalationStage: analyzer suspects -> EscalationBudget -> PlanBook overlays, with metrics.
#include "daemon/aggregator/escalation_stage.h"

#include <iterator>
#include <set>

#include "common/log.h"

namespace fw::aggregator {

EscalationStage::EscalationStage(EscalationConfig config, analysis::Analyzer& analyzer,
                                 PlanBook& plans, double base_rate_pps, const Clock& clock,
                                 metrics::Registry& registry, uint64_t first_trace_id)
    : budget_(config, first_trace_id),
      analyzer_(analyzer),
      plans_(plans),
      base_rate_pps_(base_rate_pps),
      clock_(clock),
      active_elements_(registry
                           .AddGauge("fabricwatch_escalation_active_elements",
                                     "Suspect elements (links, switches, NICs, hosts, pairs) "
                                     "whose pairs probe at a raised rate now.")
                           .WithLabels({})),
      active_pairs_(registry
                        .AddGauge("fabricwatch_escalation_active_pairs",
                                  "Node pairs escalated now (both directions), once per NIC pair "
                                  "escalated.")
                        .WithLabels({})),
      active_flows_(registry
                        .AddGauge("fabricwatch_escalation_active_flows",
                                  "Planned flows probing at the raised rate now, both directions.")
                        .WithLabels({})),
      extra_pps_(registry
                     .AddGauge("fabricwatch_escalation_probes_per_second",
                               "Probes per second the escalations add to the planned rate now.")
                     .WithLabels({})),
      budget_pps_(registry
                      .AddGauge("fabricwatch_escalation_budget_probes_per_second",
                                "The most probes per second all escalations together may add: "
                                "a share of the fleet's planned probes (3 %, at least 40/s, "
                                "or the suspicion floor while an element is suspect).")
                      .WithLabels({})),
      started_(registry
                   .AddCounter("fabricwatch_escalation_started_total",
                               "Escalations started (an element escalated; renewals not counted).")
                   .WithLabels({})),
      leads_(registry
                 .AddCounter("fabricwatch_escalation_leads_total",
                             "Escalations started as a lead: one lost flow on a link, a short "
                             "escalation served after the others (also in "
                             "fabricwatch_escalation_started_total).")
                 .WithLabels({})),
      refused_(registry
                   .AddCounter("fabricwatch_escalation_refused_total",
                               "Suspect elements not escalated because the budget was spent.")
                   .WithLabels({})),
      extra_probes_(registry
                        .AddCounter("fabricwatch_escalation_probes_total",
                                    "Probes the escalations added, estimated from their rates.")
                        .WithLabels({})),
      trace_requests_(registry
                          .AddCounter("fabricwatch_escalation_trace_requests_total",
                                      "Trace requests sent to agents for escalated pairs (one per "
                                      "pair and direction; the agent traces every flow of it).")
                          .WithLabels({})),
      between_ticks_(registry
                         .AddCounter("fabricwatch_escalation_between_ticks_total",
                                     "Escalations started between the analyzer's ticks: leads "
                                     "from lost probes just ingested (also in "
                                     "fabricwatch_escalation_started_total).")
                         .WithLabels({})) {}

OverlayChanges ChangedOverlays(const std::map<std::string, uint64_t>& set,
                               std::vector<PlanOverlay> now) {
  OverlayChanges out;
  std::set<std::string> ids;
  for (PlanOverlay& o : now) {
    ids.insert(o.id);
    // Only new overlays and those under another trace id are set (OverlayChanges).
    auto it = set.find(o.id);
    if (it == set.end() || it->second != o.trace_id) out.set.push_back(std::move(o));
  }
  for (const auto& [id, trace_id] : set) {
    if (!ids.contains(id)) out.clear.push_back(id);
  }
  return out;
}

void EscalationStage::Tick() { Apply(analyzer_.escalation_candidates()); }

bool EscalationStage::BetweenTicks() {
  std::vector<aggregator::EscalationRequest> leads = analyzer_.TakeBetweenTickLeads();
  // Without new leads, only to end the escalations whose course is over (a lead's half second)
  // on time: the last tick's requests renew nothing they did not renew at the tick.
  if (leads.empty() && !budget_.HasExpiredBy(static_cast<double>(clock_.MonotonicNanos()) * 1e-9)) {
    return false;
  }
  std::vector<aggregator::EscalationRequest> requests = analyzer_.escalation_candidates();
  requests.insert(requests.end(), std::make_move_iterator(leads.begin()),
                  std::make_move_iterator(leads.end()));
  const uint64_t started = budget_.stats().started;
  const bool changed = Apply(requests);
  between_ticks_.Inc(static_cast<double>(budget_.stats().started - started));
  return changed;
}

bool EscalationStage::Apply(const std::vector<aggregator::EscalationRequest>& requests) {
  const double now_s = static_cast<double>(clock_.MonotonicNanos()) * 1e-9;
  const double baseline = plans_.BasePps();
  const bool changed = budget_.Update(now_s, requests, baseline, base_rate_pps_);
  if (changed) {
    OverlayChanges c = ChangedOverlays(overlays_, budget_.Overlays());
    for (const std::string& id : c.clear) {
      plans_.ClearOverlay(id);
      overlays_.erase(id);
    }
    for (PlanOverlay& o : c.set) {
      overlays_[o.id] = o.trace_id;
      plans_.SetOverlay(std::move(o));
    }
  }
  analyzer_.SetEscalated(budget_.Escalations());

  const EscalationStats& s = budget_.stats();
  active_elements_.Set(static_cast<double>(s.active_elements));
  active_pairs_.Set(static_cast<double>(s.active_pairs));
  active_flows_.Set(static_cast<double>(s.active_flows));
  extra_pps_.Set(s.extra_pps);
  budget_pps_.Set(budget_.last_budget_pps());
  started_.Inc(static_cast<double>(s.started - last_.started));
  leads_.Inc(static_cast<double>(s.leads_started - last_.leads_started));
  refused_.Inc(static_cast<double>(s.refused_budget - last_.refused_budget));
  extra_probes_.Inc(std::max(0.0, s.extra_probes - last_.extra_probes));
  trace_requests_.Inc(2.0 * static_cast<double>(s.pairs_started - last_.pairs_started));
  if (s.started != last_.started) {
    spdlog::info(
        "msg=\"escalation\" active_elements={} active_pairs={} extra_pps={:.1f} budget_pps={:.1f} "
        "leads_started={}",
        s.active_elements, s.active_pairs, s.extra_pps, budget_.last_budget_pps(),
        s.leads_started - last_.leads_started);
  }
  last_ = s;
  return changed;
}

}  // namespace fw::aggregator
