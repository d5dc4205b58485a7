// Which elements to escalate (plan/escalation.h): the ones suspect after a tick, each with the
// node pairs whose flows cross it, so that the aggregator raises their probe rate and traces them.
#pragma once

#include <vector>

#include "daemon/aggregator/analysis/evaluation.h"
#include "daemon/aggregator/plan/escalation.h"

namespace fw::analysis {

// Elements the tracker holds suspect (bad, not yet firing) after this tick's evaluation `ev`:
// links and switches with the bad pairs whose equal-cost paths cross them, NICs and hosts with the
// bad pairs of their node, pairs with themselves. Pairs are most bad flows first; priority puts
// loss ahead of latency and bandwidth, then more bad flows. Elements with no crossing bad pair are
// left out (nothing to escalate). Weakly lossy links (ev.weak_loss) are asked for too, and the
// links of ev.lead_loss as leads (EscalationRequest::lead) with only their pairs that lost probes.
std::vector<aggregator::EscalationRequest> EscalationCandidates(const BlameContext& ctx,
                                                                const Analyzer::Evaluation& ev,
                                                                const ElementTracker& tracker);

}  // namespace fw::analysis
