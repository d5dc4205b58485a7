// Plan entry checks and local ceilings.
#include "daemon/agent/plan_guard.h"

#include <algorithm>
#include <bit>
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

// The UDP prober's flows for an entry: one per source port, at least one.
size_t UdpFlows(const v1::PlannedPeer& p) {
  return IsUdp(p) ? static_cast<size_t>(std::max(1, p.src_ports_size())) : 0;
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
    if (!std::isfinite(p.rate_pps()) || p.rate_pps() < 0 ||
        (IsUdp(p) && p.rate_pps() > 0 && p.rate_pps() < net::kUdpMinRateHz)) {
      skip(net::PlanSkip::kRate, p);
      continue;
    }
    // The unraised rate is checked where it is used: a UDP entry with raised flows.
    const bool per_flow = IsUdp(p) && p.raised_flows_size() > 0;
    const double unraised = p.unraised_rate_pps();
    if (per_flow && (!std::isfinite(unraised) || unraised < 0 ||
                     (unraised > 0 && unraised < net::kUdpMinRateHz))) {
      skip(net::PlanSkip::kRate, p);
      continue;
    }
    // The entry's own timeout, else the plan's (0 in both: the prober's default).
    const uint32_t timeout_ms = p.timeout_ms() != 0 ? p.timeout_ms() : plan.probe_timeout_ms();
    const int64_t timeout_ns = static_cast<int64_t>(timeout_ms) * 1'000'000;
    if (IsUdp(p) && timeout_ns > net::kUdpMaxTimeoutNs) {
      skip(net::PlanSkip::kTimeout, p);
      continue;
    }
    const size_t flows = UdpFlows(p);
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
    double rate = flows == 0 ? 0 : p.rate_pps() > 0 ? p.rate_pps() : kDefaultUdpRateHz;
    double unraised_rate = 0;
    uint64_t raised = 0;
    if (per_flow) {
      for (uint32_t id : p.raised_flows()) {
        const uint64_t bit = uint64_t{1} << (id % 64);
        if (id >= flows || (raised & bit) != 0) {
          ++g.raised_ids_ignored;
          continue;
        }
        raised |= bit;
      }
      const uint64_t all = flows >= 64 ? ~uint64_t{0} : (uint64_t{1} << flows) - 1;
      unraised_rate = unraised > 0 ? unraised : kDefaultUdpRateHz;
      if (raised == 0) {
        rate = unraised_rate;  // no id in range: every flow unraised
        unraised_rate = 0;
      } else if (raised == all) {
        unraised_rate = 0;  // every flow raised
        raised = 0;
      } else {
        const size_t n = static_cast<size_t>(std::popcount(raised));
        g.udp_raised_flows_total += n;
        g.udp_unraised_flows_total += flows - n;
      }
    }
    g.udp_rates_hz.push_back(rate);
    g.udp_unraised_rates_hz.push_back(unraised_rate);
    g.udp_raised_flows.push_back(raised);
    g.udp_timeouts_ns.push_back(flows == 0 ? 0 : timeout_ns);
  }
  g.udp_timeout_floor_ns =
      std::min(static_cast<int64_t>(plan.probe_timeout_floor_ms()) * 1'000'000, net::kUdpMaxTimeoutNs);
  std::string& detail = g.trim_detail;
  if (usable > g.peers.size()) {
    g.trimmed[static_cast<size_t>(PlanTrim::kTargets)] = true;
    detail += "targets " + std::to_string(usable) + "->" + std::to_string(g.peers.size()) + " ";
  }

  const double pps_cap = std::max(0.001, c.max_pps);
  // Each flow at its own rate (its entry's, or its entry's raised or unraised one): none past the
  // prober's per-flow ceiling, then all of them scaled alike until their sum fits the cap.
  auto udp_pps = [&] {
    double pps = 0;
    for (size_t k = 0; k < g.peers.size(); ++k) {
      const size_t flows = UdpFlows(*g.peers[k]);
      const size_t raised = g.udp_unraised_rates_hz[k] > 0
                                ? static_cast<size_t>(std::popcount(g.udp_raised_flows[k]))
                                : flows;
      pps += g.udp_rates_hz[k] * static_cast<double>(raised) +
             g.udp_unraised_rates_hz[k] * static_cast<double>(flows - raised);
    }
    return pps;
  };
  // Raised and unraised rates alike: each is some flows' rate.
  auto each_rate = [&](auto&& f) {
    for (double& r : g.udp_rates_hz) f(r);
    for (double& r : g.udp_unraised_rates_hz) f(r);
  };
  size_t over_max = 0;  // entries with a rate past it, raised or unraised
  for (size_t k = 0; k < g.peers.size(); ++k) {
    bool over = false;
    for (double* r : {&g.udp_rates_hz[k], &g.udp_unraised_rates_hz[k]}) {
      if (*r > net::kUdpMaxRateHz) {
        *r = net::kUdpMaxRateHz;
        over = true;
      }
    }
    over_max += over;
  }
  if (over_max > 0) {
    g.trimmed[static_cast<size_t>(PlanTrim::kPps)] = true;
    detail += "udp_entries_over_max_rate " + std::to_string(over_max) + "->" +
              std::to_string(net::kUdpMaxRateHz) + " ";
  }
  g.udp_pps = udp_pps();
  if (g.udp_pps > pps_cap) {
    const double asked = g.udp_pps;
    const double factor = pps_cap / g.udp_pps;
    each_rate([&](double& r) {
      if (r > 0) r = std::max(net::kUdpMinRateHz, r * factor);
    });
    g.udp_pps = udp_pps();
    g.trimmed[static_cast<size_t>(PlanTrim::kPps)] = true;
    detail += "udp_pps " + std::to_string(asked) + "->" + std::to_string(g.udp_pps) + " (rates x" +
              std::to_string(factor) + ") ";
  }
  each_rate([&](double& r) { g.udp_max_rate_hz = std::max(g.udp_max_rate_hz, r); });
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
