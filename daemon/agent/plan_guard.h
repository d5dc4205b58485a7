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
  double max_pps = 10'000;         // probes/s: UDP flows x rate, and the plan's packet budget
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
  std::string trim_detail;   // what was asked and what is kept, for the log
  double udp_rate_hz = 1.0;  // per UDP flow, after the ceiling
  size_t udp_flows = 0;
  // The plan's budget after the ceilings; 0 when the plan carries none (keep the current one).
  double budget_pps = 0, budget_bytes_per_s = 0;
  double bandwidth_interval_s = 300;  // stretched so that bursts fit max_bytes_per_s
};

// Checks and trims `plan`; never fails. Entries are skipped for the causes of net::PlanSkip
// (name, address, port, flows, rate, transport, duplicate). Past the ceilings:
// - targets: the first max_targets usable entries in the plan's order are kept (the planner
//   sends them sorted, so the cut is the same for the same plan);
// - pps: the per-flow UDP rate is lowered until flows x rate fits, and the plan's packet budget
//   is capped;
// - bytes/s: the plan's byte budget is capped, and the bandwidth interval stretched until every
//   bandwidth peer's burst fits in it.
GuardedPlan GuardPlan(const fabricwatch::v1::ProbePlan& plan, const PlanCeilings& ceilings);

}  // namespace fw::agent
