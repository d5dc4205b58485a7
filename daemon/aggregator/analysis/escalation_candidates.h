// Which elements to escalate (plan/escalation.h): the ones suspect after a tick, each with the
// node pairs whose flows cross it, so that the aggregator raises their probe rate and traces them.
#pragma once

#include <string>
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
// The fabric links a lead (ev.lead_loss) speaks for: its link and ties, and every fabric link its
// lost flow surely crossed (its traced or only path, both ways). Localization names the one with
// the fewest probes; the fault may be any of them, and the lead's escalation makes all of them
// dense, so each counts the lead's evaluation as weak (ElementTracker::Weak).
std::vector<LinkIndex> LeadLinks(const FabricMap& map, Tomography& tomography,
                                 const LinkBlame& lead);

// A lead found between ticks (Analyzer::BetweenTicks) as EscalationCandidates asks for one: the
// lost flow's NIC pair (src, dst, `flows` planned flows of its entry; `paths`, the flow's own,
// name its NICs by their access links), then the NIC pairs whose flows surely crossed `link` at
// the last tick. The lost flow's NIC pair raises that flow (`lost_flow`, a FlowBit; 0: a flow
// escalation cannot raise) and its flows that crossed the link at the last tick, both ways
// between its two NICs; the other NIC pairs raise theirs (flow ids are per NIC pair).
aggregator::EscalationRequest LeadRequest(const BlameContext& ctx, const std::string& element,
                                          LinkIndex link, NodeId src, NodeId dst, uint32_t flows,
                                          uint64_t lost_flow, const PathSet& paths);

std::vector<aggregator::EscalationRequest> EscalationCandidates(const BlameContext& ctx,
                                                                const Analyzer::Evaluation& ev,
                                                                const ElementTracker& tracker);

}  // namespace fw::analysis
