// The agent's defence against the plans it is sent: every entry is checked on its own (an unusable
// one is skipped, the rest applies) and the plan as a whole is held to local ceilings.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fabricwatch.pb.h"
#include "probes/net/plan_entry.h"

namespace fw::agent {

// What any plan may ask of this node, whatever the aggregator says (--plan-max-*). The defaults
// sit well above what the planner sends (docs/probes.md, "Plan ceilings").
struct PlanCeilings {
  size_t max_targets = 4096;       // usable plan entries kept
  double max_pps = 10'000;         // probes/s: sum of UDP flows x rate, and the packet budget
  double max_bytes_per_s = 125e6;  // the plan's byte budget and its bandwidth bursts
};

// The ceiling a plan was trimmed to; the names are the `limit` label of
// fabricwatch_probe_plan_trimmed_total.
enum class PlanTrim : uint8_t { kTargets, kPps, kBytesPerS, kCount };
inline constexpr size_t kPlanTrimCount = static_cast<size_t>(PlanTrim::kCount);
std::string_view PlanTrimName(PlanTrim t);

struct GuardedPlan {
  // The entries to apply, in the plan's order: usable ones only, at most max_targets of them.
  std::vector<const fabricwatch::v1::PlannedPeer*> peers;
  std::array<uint32_t, net::kPlanSkipCount> skipped{};   // entries left out, by cause
  std::array<std::string, net::kPlanSkipCount> example;  // the first of each cause, for the log
  std::array<bool, kPlanTrimCount> trimmed{};
  std::string trim_detail;  // what was asked and what is kept, for the log
  // Per entry of `peers`: the probe rate of each of its UDP flows after the ceilings (0 for an
  // entry of another transport), of its raised flows only where udp_unraised_rates_hz is non-zero.
  // An entry that leaves its rate at 0 gets kDefaultUdpRateHz.
  std::vector<double> udp_rates_hz;
  // Per entry of `peers`, its per-flow rates (PlannedPeer.raised_flows, unraised_rate_pps): 0 when
  // every flow runs at udp_rates_hz (no raised_flows, not UDP, or the raised ids in range name
  // every flow or none, the entry then at the one rate they all share); else the rate of the flows
  // whose bit is clear in udp_raised_flows, after the ceilings (unraised_rate_pps 0:
  // kDefaultUdpRateHz). As net::PeerTarget::unraised_rate_hz and raised_flows take them.
  std::vector<double> udp_unraised_rates_hz;
  std::vector<uint64_t> udp_raised_flows;  // bit j: flow j is raised (ids in range, once each)
  // Per entry of `peers`: its UDP probes' timeout (PlannedPeer.timeout_ms, else the plan's
  // probe_timeout_ms), ns; 0: the prober's default (net::UdpProbePlan::timeout_ns, 1 s).
  std::vector<int64_t> udp_timeouts_ns;
  // ProbePlan.probe_timeout_floor_ms, ns, at most net::kUdpMaxTimeoutNs: non-zero, each UDP flow's
  // timeout follows its round trip down to it (net::UdpProbePlan::timeout_floor_ns).
  int64_t udp_timeout_floor_ns = 0;
  size_t udp_flows = 0;
  // Of udp_flows, those of entries with per-flow rates: raised ones, and unraised ones.
  size_t udp_raised_flows_total = 0, udp_unraised_flows_total = 0;
  // raised_flows ids ignored: out of range (>= the entry's flows) or listed twice.
  size_t raised_ids_ignored = 0;
  double udp_pps = 0;          // sum over the UDP flows of each one's rate, after the ceilings
  double udp_max_rate_hz = 0;  // the highest flow rate, after the ceilings (0: no UDP entry)
  // The plan's budget after the ceilings; 0 when the plan carries none (keep the current one).
  double budget_pps = 0, budget_bytes_per_s = 0;
  double bandwidth_interval_s = 300;  // stretched so that bursts fit max_bytes_per_s
};

// The rate of a UDP entry whose rate_pps is 0 (unset): the planner's base rate.
inline constexpr double kDefaultUdpRateHz = 1.0;

// Checks and trims `plan`; never fails. Entries are skipped for the causes of net::PlanSkip
// (name, address, port, flows, rate, transport, duplicate, timeout; a UDP entry's rate must be 0
// or at least net::kUdpMinRateHz, and so must its unraised_rate_pps when it lists raised_flows;
// its timeout at most net::kUdpMaxTimeoutNs). raised_flows ids out of range or listed twice are
// ignored (counted in raised_ids_ignored). Past the ceilings:
// - targets: the first max_targets usable entries in the plan's order are kept (the planner
//   sends them sorted, so the cut is the same for the same plan);
// - pps: every UDP flow keeps its own rate (its entry's rate_pps, or per flow: raised_flows at
//   rate_pps, the others at unraised_rate_pps); no rate past net::kUdpMaxRateHz, and when the sum
//   of the flows' rates is past max_pps, every rate (raised and unraised alike) is scaled by the
//   same factor until it fits (an escalated flow keeps its multiple of the others'; the agent
//   cannot tell an escalation from a base rate, and the planner scales its budget the same way),
//   never below net::kUdpMinRateHz; the plan's packet budget is capped;
// - bytes/s: the plan's byte budget is capped, and the bandwidth interval stretched until every
//   bandwidth peer's burst fits in it.
GuardedPlan GuardPlan(const fabricwatch::v1::ProbePlan& plan, const PlanCeilings& ceilings);

}  // namespace fw::agent
