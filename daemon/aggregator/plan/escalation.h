// Adaptive escalation: while an element is suspect, the node pairs whose flows cross it probe at
// a raised rate for a while, so that the analyzer confirms or drops the suspicion from dense data
// in seconds. A fleet budget bounds the extra probes at any moment; the escalated pairs reach the
// agents as plan overlays (plan_overlay.h). Pure logic on injected times; docs/planner.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "daemon/aggregator/plan/plan_overlay.h"

namespace fw::aggregator {

struct EscalationConfig {
  // An escalated pair's flows probe at this multiple of the base rate (both directions)...
  double rate_factor = 10;
  // ...or, when the budget left cannot pay for that, at the multiple it can pay for, if at least
  // this much: a pair of many flows (an inter-leaf representative carries up to 32) still gets
  // denser data on a small fleet.
  double min_rate_factor = 1.5;
  // An escalation lasts this long, renewed while its element stays suspect, up to max_duration_s
  // in all; then the element waits cooldown_s before it can be escalated again.
  double duration_s = 10;
  double max_duration_s = 30;
  double cooldown_s = 60;
  // A lead (EscalationRequest::lead) lasts this long and is never renewed by a lead: its one lost
  // probe stays in the analyzer's 10 s window and would otherwise keep it for 10 s or more. It
  // runs its course even when its link is no longer asked for, runs on as an ordinary escalation
  // (renewed, widened) once its link is asked for as one, and after it ends its element waits
  // `cooldown_s` before another lead, but not before an ordinary escalation; a lead's first pair
  // (its lost flow's) starts no other lead for `cooldown_s` either, whichever link names it. 1 s:
  // the escalation starts at the evaluation that saw the lead and the next evaluation reads the
  // dense second; it either asks for the link as an ordinary escalation then, or the lead ends.
  double lead_duration_s = 0.5;
  // A lead's pairs probe at this multiple of the base rate (rate_factor applies once the lead is
  // asked for as an ordinary escalation). A lead's dense probes count only where they are in by
  // the next evaluation, a fraction of a second after the lead started: three times the
  // ordinary rate for half a second gives that evaluation three times the lost probes of a 5 %
  // link for about the probes of one second at the ordinary rate (docs/analysis.md, "Dense
  // leads").
  double lead_rate_factor = 30;
  // Leads may spend up to this many extra probes per second (all escalations together, leads
  // served last), or the plain budget where that is more: a lead raises the pairs whose flows
  // surely crossed its link, and its next evaluation needs ~80 probes over the link in that one
  // second to reach a finding's significance from 5 % loss. A healthy fleet pays it for
  // `lead_duration_s` per lost probe (docs/analysis.md, "Escalation leads"). Weak evidence that is
  // no suspicion may spend it too for `lead_duration_s` (EscalationRequest::lead_budget).
  double lead_budget_pps = 450;
  // The extra probes of all escalations together stay within this share of the fleet's planned
  // probes per second (the target: escalation under 5 % of baseline probe traffic).
  double budget_fraction = 0.03;
  // ...and never less than this many extra probes per second (a small fleet still escalates one
  // pair).
  double min_budget_pps = 40;
  // While some request is a suspicion (EscalationRequest::suspicion: evidence a healthy fleet
  // almost never shows), the floor is this instead: enough for 8 one-flow pairs at 10x, so that a
  // small fleet confirms a lossy link from dense data in one evaluation. Without a suspicion (a
  // healthy fleet) escalation stays within `budget_fraction` and `min_budget_pps`, under issue
  // 16's 5 % of the planned probes; a fleet whose share is above this floor keeps its share.
  // Safe for a failing switch because a link's suspicion also escalates pairs beside it under its
  // switches, and a link's dense confirmation waits while a link beside it loses probes too
  // (docs/analysis.md, "Escalation budget under a suspicion").
  double suspicion_budget_pps = 150;
  // Pairs escalated per element at most: enough flows to separate the element from its
  // neighbours, not every pair that crosses a spine. Pairs that raise only the flows that crossed
  // the element cost less each, but more of them were measured to spend more of a healthy fleet's
  // probes on leads (docs/planner.md, "Escalation": 16 gave 4.1-5.7 % in the traced suite's
  // healthy run against its 5 % target).
  size_t max_pairs_per_element = 8;
  // An escalated pair's UDP probes are reported lost after this many ms without an echo instead
  // of the agent's default 1 s (PlanOverlay::probe_timeout_ms), so that the dense probes' losses
  // reach the analyzer sooner. A reply after it counts as lost (and late at the agent): a host
  // stalled longer than that, or a queue deeper than that on the escalated link, reads as loss
  // (docs/planner.md, "Escalation": a congested link with a 1 s queue came out as down and
  // flapping at 250 ms). 0, the default: the agent's own. --escalation-probe-timeout.
  uint32_t probe_timeout_ms = 0;
};

// A node pair whose flows cross a suspect element: one NIC pair of it where the NICs are known
// (a_nic, b_nic), as flow ids are per plan entry; two NIC pairs of the same nodes are two pairs.
struct EscalationPair {
  std::string a;  // the two nodes; both directions are escalated
  std::string b;
  // Planned flows per direction of its entries (the extra cost scales with those raised).
  uint32_t flows = 1;
  // Set by EscalationBudget when escalated: the multiple of the base rate the pair's flows run at
  // (rate_factor, or less where the budget was short).
  double rate_factor = 0;
  // The NICs of `a` and `b` whose flows cross the element (both set, or neither: the first
  // entry toward the peer). A multi-NIC plan holds one entry per NIC pair toward a peer; the
  // overlay raises the entries between these NICs (a's toward b's, and b's toward a's), so a
  // rail-1 suspicion densifies rail 1's flows, and in a leaf-per-host fabric each NIC pair whose
  // flows crossed the element raises its own.
  std::string a_nic{};
  std::string b_nic{};
  // The flows raised in each direction (a's flows toward b, b's toward a, on the entries between
  // a_nic and b_nic; FlowBit sets of those entries' flow ids): those that surely crossed the
  // element, where the analyzer knows them, so that the budget pays only for probes over it.
  // kAllFlows (the default): every flow; 0: that direction is not raised.
  uint64_t a_flows = kAllFlows;
  uint64_t b_flows = kAllFlows;
};

// One suspect element and the pairs that cross it, most telling first.
struct EscalationRequest {
  std::string element;  // the analyzer's element, e.g. "link:leaf1~spine2"
  // Higher is served first when the budget is short (loss before latency, more bad flows first).
  double priority = 0;
  // The element is suspect on evidence that fires without waiting for persistence (loss, not
  // latency alone), or its weak loss is strong enough that a healthy fleet almost never shows it
  // (AnalysisConfig::escalate_suspicion_significance): the budget's floor is then
  // EscalationConfig::suspicion_budget_pps.
  bool suspicion = false;
  // Only a lead: one lost flow on a link (AnalysisConfig::escalate_lead_significance), which a
  // healthy fleet shows every few tens of seconds. Served after every other request, within
  // EscalationConfig::lead_budget_pps (it never raises the others' floor), for
  // EscalationConfig::lead_duration_s; running leads end when a new ordinary request cannot get
  // its first pair at the full rate from what is left.
  bool lead = false;
  // Only an ordinary request that is no suspicion: weak loss on a fabric link (lost probes on
  // more than one flow, evidence at least a lead's). For its first
  // EscalationConfig::lead_duration_s it may also spend what a lead may
  // (EscalationConfig::lead_budget_pps) on its further pairs, so that the next evaluation reads
  // a dense second as after a lead; then it keeps the pairs the plain budget paid for, unless it
  // became a suspicion meanwhile.
  bool lead_budget = false;
  std::vector<EscalationPair> pairs;
};

struct EscalationStats {
  uint64_t started = 0;         // elements escalated (each start, not each renewal)
  uint64_t leads_started = 0;   // ...of those, started as a lead
  uint64_t refused_budget = 0;  // element escalations refused (or cut short) by the budget
  uint64_t pairs_started = 0;   // pairs escalated
  size_t active_elements = 0;   // now
  size_t active_pairs = 0;      // now
  size_t active_flows = 0;      // now: escalated flows, both directions
  double extra_pps = 0;         // now: probes per second above the base plan
  double extra_probes = 0;      // since start: Σ extra_pps over time
};

// Not thread-safe: the aggregator's tick thread owns it.
class EscalationBudget {
 public:
  // Each escalation asks the agents to trace its pairs' flows under a new trace id, counting up
  // from `first_trace_id` (the aggregator starts it from the wall clock, so that ids stay new to
  // agents across its restarts).
  explicit EscalationBudget(EscalationConfig config = {}, uint64_t first_trace_id = 1)
      : config_(config), next_trace_id_(first_trace_id == 0 ? 1 : first_trace_id) {}

  // One tick at `now_s`: `suspects` are the elements suspect now. `baseline_pps` is the fleet's
  // planned probes per second and `base_rate_pps` one flow's base rate. Starts escalations for new
  // suspects within the budget (leads last), renews those whose element is still suspect (not by
  // a lead), ends the others and the expired ones. True when the set of escalated pairs changed (the plans must follow).
  bool Update(double now_s, const std::vector<EscalationRequest>& suspects, double baseline_pps,
              double base_rate_pps);

  // The overlays for the escalated pairs: one per NIC pair of a node pair (a < b by name), id
  // "escalation:<a>~<b>/<a_nic>~<b_nic>" ("escalation:<a>~<b>" for a pair without NICs), naming
  // those NICs (PlanOverlay::nics) and the flows raised each way (flow_sets: the union of its
  // escalations' sets for that NIC pair), at the highest of their rate factors x base rate, and
  // a trace request for every flow of the pair under the newest trace id of the node pair's
  // escalations, which agents serve before their other flows.
  std::vector<PlanOverlay> Overlays() const;

  // The escalated elements now, with the pairs each escalated (for the findings' evidence).
  struct Escalated {
    double since_s = 0;
    std::vector<EscalationPair> pairs;
  };
  std::map<std::string, Escalated> Escalations() const;

  // The extra probes per second all escalations together may use with this baseline, while some
  // element is (`suspicion`) or is not suspect.
  double BudgetPps(double baseline_pps, bool suspicion = false) const;
  // ...and what leads may spend (EscalationConfig::lead_budget_pps).
  double LeadBudgetPps(double baseline_pps) const;

  // Whether some escalation's course (or a lead's budget lent to weak evidence) is over at `now_s`
  // (Update's clock): the next Update ends it.
  bool HasExpiredBy(double now_s) const;
  // Whether `element` is escalated now, and since when (seconds, Update's clock); -1 when not.
  double EscalatedSince(const std::string& element) const;
  // The budget of the last Update (with or without a suspicion).
  double last_budget_pps() const { return last_budget_pps_; }
  const EscalationStats& stats() const { return stats_; }
  const EscalationConfig& config() const { return config_; }

 private:
  struct Active {
    double since_s = 0;
    double until_s = 0;
    double extra_pps = 0;
    uint64_t trace_id = 0;
    bool suspicion = false;  // escalated (or widened) with the suspicion's budget
    bool lead = false;       // a lead not (yet) asked for as an ordinary escalation
    std::vector<EscalationPair> pairs;
    // EscalationRequest::lead_budget: until this time (0: none) the pairs from `plain_pairs` on
    // ran on a lead's budget, and `plain_extra_pps` is what the first `plain_pairs` cost.
    double boost_until_s = 0;
    size_t plain_pairs = 0;
    double plain_extra_pps = 0;
  };
  // Extra probes/s of escalating `p` at `factor` times the base rate.
  double PairCost(const EscalationPair& p, double factor) const;
  void Recount();

  EscalationConfig config_;
  double base_rate_pps_ = 1;
  double last_now_s_ = -1;
  double last_budget_pps_ = 0;
  uint64_t next_trace_id_;
  std::map<std::string, Active> active_;   // by element
  std::map<std::string, double> cooling_;  // element -> may escalate again at this time
  std::map<std::string, double> lead_cooling_;  // element -> may start a lead again at this time
  // The first pair of each lead started (its lost flow's) -> no lead starts with it before then.
  std::map<std::pair<std::string, std::string>, double> lead_pairs_cooling_;
  EscalationStats stats_;
};

}  // namespace fw::aggregator
