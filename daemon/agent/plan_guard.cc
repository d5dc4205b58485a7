// Plan entry checks and local ceilings.
#include "daemon/agent/plan_guard.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <tuple>

#include "probes/net/udp_prober.h"

namespace fw::agent {

namespace v1 = fabricwatch::v1;

namespace {

bool IsUdp(const v1::PlannedPeer& p) {
  return p.transport() == v1::TRANSPORT_UDP || p.transport() == v1::TRANSPORT_UNSPECIFIED;
}

}  // namespace

std::string_view PlanTrimName(PlanTrim t) {
  switch (t) {
    case PlanTrim::kTargets:
      return "targets";
    case PlanTrim::kPps:
      return "pps";
    case PlanTrim::kBytesPerS:
      return "bytes_per_s";
    case PlanTrim::kCount:
      break;
  }
  return "unknown";
}

GuardedPlan GuardPlan(const v1::ProbePlan& plan, const PlanCeilings& c) {
  GuardedPlan g;
  auto skip = [&](net::PlanSkip why, const v1::PlannedPeer& p) {
    const size_t i = static_cast<size_t>(why);
    if (g.skipped[i]++ == 0) {
      g.example[i] = "node '" + p.node().substr(0, 80) + "' address '" + p.address().substr(0, 80) +
                     "' port " + std::to_string(p.port()) + " transport " +
                     std::to_string(p.transport());
    }
  };
  using Key = std::tuple<std::string_view, std::string_view, uint32_t, int, std::string_view,
                         std::string_view>;
  std::set<Key> seen;
  size_t usable = 0;
  double rate = 0;
  for (const v1::PlannedPeer& p : plan.peers()) {
    // RDMA peers are the RDMA runner's (rdma_wire.cc UdTargetsFromPlan checks them there).
    if (p.transport() == v1::TRANSPORT_RDMA_UD || p.transport() == v1::TRANSPORT_RDMA_RC) continue;
    if (std::optional<net::PlanSkip> why = net::CheckPeer(p.node(), p.address(), p.port())) {
      skip(*why, p);
      continue;
    }
    if (!v1::Transport_IsValid(p.transport())) {
      skip(net::PlanSkip::kTransport, p);
      continue;
    }
    if (static_cast<uint32_t>(p.src_ports_size()) > net::kUdpMaxFlowsPerPeer) {
      skip(net::PlanSkip::kFlows, p);
      continue;
    }
    if (!std::isfinite(p.rate_pps()) || p.rate_pps() < 0) {
      skip(net::PlanSkip::kRate, p);
      continue;
    }
    const size_t flows = IsUdp(p) ? static_cast<size_t>(std::max(1, p.src_ports_size())) : 0;
    if (g.udp_flows + flows > net::kUdpMaxTotalFlows) {
      skip(net::PlanSkip::kFlows, p);
      continue;
    }
    if (!seen.emplace(p.node(), p.address(), p.port(), p.transport(), p.src_nic(), p.dst_nic())
             .second) {
      skip(net::PlanSkip::kDuplicate, p);
      continue;
    }
    ++usable;
    if (g.peers.size() >= c.max_targets) continue;
    g.peers.push_back(&p);
    g.udp_flows += flows;
    if (flows > 0) rate = std::max(rate, p.rate_pps());
  }
  std::string& detail = g.trim_detail;
  if (usable > g.peers.size()) {
    g.trimmed[static_cast<size_t>(PlanTrim::kTargets)] = true;
    detail += "targets " + std::to_string(usable) + "->" + std::to_string(g.peers.size()) + " ";
  }

  g.udp_rate_hz = rate > 0 ? rate : 1.0;
  const double pps_cap = std::max(0.001, c.max_pps);
  if (g.udp_flows > 0 && (g.udp_rate_hz * static_cast<double>(g.udp_flows) > pps_cap ||
                          g.udp_rate_hz > net::kUdpMaxRateHz)) {
    const double asked = g.udp_rate_hz;
    g.udp_rate_hz = std::min(net::kUdpMaxRateHz, pps_cap / static_cast<double>(g.udp_flows));
    g.trimmed[static_cast<size_t>(PlanTrim::kPps)] = true;
    detail += "udp_rate_hz " + std::to_string(asked) + "->" + std::to_string(g.udp_rate_hz) + " ";
  }
  if (plan.has_budget() && plan.budget().packets_per_s() > 0 && plan.budget().bytes_per_s() > 0) {
    g.budget_pps = plan.budget().packets_per_s();
    g.budget_bytes_per_s = plan.budget().bytes_per_s();
    if (!(g.budget_pps <= pps_cap)) {  // NaN and infinity trim too
      detail += "budget_pps " + std::to_string(g.budget_pps) + "->" + std::to_string(pps_cap) + " ";
      g.budget_pps = pps_cap;
      g.trimmed[static_cast<size_t>(PlanTrim::kPps)] = true;
    }
    if (!(g.budget_bytes_per_s <= c.max_bytes_per_s)) {
      detail += "budget_bytes_per_s " + std::to_string(g.budget_bytes_per_s) + "->" +
                std::to_string(c.max_bytes_per_s) + " ";
      g.budget_bytes_per_s = c.max_bytes_per_s;
      g.trimmed[static_cast<size_t>(PlanTrim::kBytesPerS)] = true;
    }
  }

  g.bandwidth_interval_s =
      plan.bandwidth_interval_s() > 0 && std::isfinite(plan.bandwidth_interval_s())
          ? plan.bandwidth_interval_s()
          : 300;
  size_t bw_peers = 0;
  for (const v1::PlannedPeer* p : g.peers) bw_peers += p->bandwidth();
  const double burst_bytes =
      static_cast<double>(plan.bandwidth_bytes() > 0 ? plan.bandwidth_bytes() : 4u << 20);
  const double bw_bytes_per_s =
      static_cast<double>(bw_peers) * burst_bytes / g.bandwidth_interval_s;
  if (bw_peers > 0 && c.max_bytes_per_s > 0 && bw_bytes_per_s > c.max_bytes_per_s) {
    const double asked = g.bandwidth_interval_s;
    g.bandwidth_interval_s = static_cast<double>(bw_peers) * burst_bytes / c.max_bytes_per_s;
    g.trimmed[static_cast<size_t>(PlanTrim::kBytesPerS)] = true;
    detail += "bandwidth_interval_s " + std::to_string(asked) + "->" +
              std::to_string(g.bandwidth_interval_s) + " ";
  }
  if (!detail.empty()) detail.pop_back();
  return g;
}

}  // namespace fw::agent
