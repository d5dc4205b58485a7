// Pingmesh-style planning: intra-leaf full mesh, inter-leaf representatives with enough flows to
// cover every equal-cost path, a sampled mesh without a map, then per-node budgets.
#include "daemon/aggregator/core/planner.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>

namespace fw::aggregator {
namespace {

// Stable 64-bit hashing (the same plan on every build and restart): FNV-1a, then a splitmix64
// finalizer to spread the bits.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t Hash(std::string_view s, uint64_t seed) {
  uint64_t h = 0xcbf29ce484222325ull ^ Mix(seed);
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return Mix(h);
}

std::vector<uint16_t> FlowIds(uint32_t n) {
  std::vector<uint16_t> ids(std::min<uint32_t>(n, 0xffff));
  std::iota(ids.begin(), ids.end(), uint16_t{0});
  return ids;
}

uint16_t PortFor(const AgentInfo& agent, const HostNic& nic, uint16_t fallback) {
  for (const ProbeEndpoint& e : agent.endpoints) {
    if (e.address == nic.address || (!e.nic.empty() && e.nic == nic.nic)) return e.port;
  }
  return agent.endpoints.empty() ? fallback : agent.endpoints.front().port;
}

}  // namespace

double Planner::QuantizeRate(double rate_pps) {
  if (!(rate_pps > 0) || !std::isfinite(rate_pps)) return 0;
  constexpr double kSteps = 8;  // per octave
  const double q = std::exp2(std::floor(std::log2(rate_pps) * kSteps + 1e-9) / kSteps);
  return std::min(q, rate_pps);
}

Planner::Planner(PlannerConfig config, std::shared_ptr<const FabricMap> map)
    : config_(config), map_(std::move(map)) {}

uint32_t Planner::FlowsForCoverage(size_t paths, double coverage) {
  if (paths <= 1) return 1;
  const double s = static_cast<double>(paths);
  const double miss = std::clamp(1.0 - coverage, 1e-12, 1.0);
  // S·(1-1/S)^k <= miss  <=>  k >= ln(miss/S) / ln(1-1/S); both logs are negative.
  const double k = std::log(miss / s) / std::log1p(-1.0 / s);
  auto flows = static_cast<uint32_t>(std::max(1.0, std::ceil(k - 1e-9)));
  // Guard the rounding: step to the exact smallest k.
  while (flows > 1 && s * std::pow(1.0 - 1.0 / s, flows - 1) <= miss) --flows;
  while (s * std::pow(1.0 - 1.0 / s, flows) > miss) ++flows;
  return flows;
}

PlanSet Planner::PlanFor(const std::vector<AgentInfo>& live) const {
  PlanSet out;
  // One agent per node; a duplicate (a reconnect racing its old session) keeps the first.
  std::vector<AgentInfo> agents;
  std::set<std::string> seen;
  for (const AgentInfo& a : live) {
    if (seen.insert(a.node).second) agents.push_back(a);
  }
  std::sort(agents.begin(), agents.end(),
            [](const AgentInfo& a, const AgentInfo& b) { return a.node < b.node; });
  for (const AgentInfo& a : agents) out.plans[a.node];

  std::vector<const AgentInfo*> unmapped;
  if (map_) {
    PlanWithMap(agents, out, unmapped);
  } else {
    for (const AgentInfo& a : agents) unmapped.push_back(&a);
  }
  if (map_ && !unmapped.empty()) {
    out.notes.push_back(std::to_string(unmapped.size()) +
                        " live node(s) are not in the fabric map (first: " + unmapped[0]->node +
                        "); they probe each other without path information");
  }
  PlanWithoutMap(unmapped, out);
  for (auto& [node, plan] : out.plans) {
    std::sort(plan.peers.begin(), plan.peers.end(), [](const PlannedPeer& a, const PlannedPeer& b) {
      return std::tie(a.node, a.address, a.src_address) <
             std::tie(b.node, b.address, b.src_address);
    });
  }
  ApplyFleetCap(out);
  ApplyBudgets(out);
  return out;
}

void Planner::PlanWithMap(const std::vector<AgentInfo>& agents, PlanSet& out,
                          std::vector<const AgentInfo*>& unmapped) const {
  const FabricMap& map = *map_;
  std::unordered_map<std::string_view, const AgentInfo*> agent_of;
  for (const AgentInfo& a : agents) {
    agent_of.emplace(a.node, &a);
    if (map.NicsOfNode(a.node).empty()) unmapped.push_back(&a);
  }
  const auto& nics = map.host_nics();
  // Live NICs per leaf, and a stable per-NIC hash for rendezvous ranking.
  std::vector<std::vector<HostNicIndex>> live_on(map.switches().size());
  std::vector<uint64_t> nic_hash(nics.size());
  for (HostNicIndex i = 0; i < nics.size(); ++i) {
    if (!agent_of.contains(nics[i].node)) continue;
    live_on[nics[i].leaf].push_back(i);
    nic_hash[i] = Hash(nics[i].node + ":" + nics[i].nic, config_.seed);
  }
  auto add_peer = [&](HostNicIndex s, HostNicIndex d, uint32_t flows) {
    const HostNic& dst = nics[d];
    PlannedPeer p;
    p.path_class = nics[s].leaf == dst.leaf ? PathClass::kIntraLeaf : PathClass::kInterLeaf;
    p.node = dst.node;
    p.address = dst.address;
    p.port = PortFor(*agent_of.at(dst.node), dst, config_.default_port);
    p.src_address = nics[s].address;
    p.flows = FlowIds(flows);
    p.transport = config_.latency_transport;
    p.rate_pps = config_.latency_pps_per_flow;
    out.plans[nics[s].node].peers.push_back(std::move(p));
  };

  std::vector<SwitchIndex> leaves;
  for (SwitchIndex l = 0; l < live_on.size(); ++l) {
    if (!live_on[l].empty()) leaves.push_back(l);
  }
  // Full mesh inside each leaf (between different nodes). Room for the leaf's peers and a few
  // representatives up front: growing 16,000 vectors by doubling cost ~60 MB of slack and copies
  // at the peak of a re-plan.
  constexpr size_t kInterLeafRoom = 16;
  for (SwitchIndex l : leaves) {
    for (HostNicIndex s : live_on[l]) {
      out.plans[nics[s].node].peers.reserve(live_on[l].size() - 1 + kInterLeafRoom);
      for (HostNicIndex d : live_on[l]) {
        if (nics[s].node != nics[d].node) add_peer(s, d, config_.intra_leaf_flows);
      }
    }
  }
  // Representatives per ordered leaf pair, chosen by rendezvous hashing so that a join or leave
  // moves only the representatives it touches.
  const uint32_t max_flows = std::max<uint32_t>(1, config_.max_flows_per_pair);
  auto ranked = [&](SwitchIndex on, uint64_t salt, size_t want) {
    std::vector<HostNicIndex> v = live_on[on];
    auto key = [&](HostNicIndex i) { return Mix(nic_hash[i] ^ salt); };
    want = std::min(want, v.size());
    std::partial_sort(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(want), v.end(),
                      [&](HostNicIndex a, HostNicIndex b) { return key(a) < key(b); });
    return v;
  };
  for (SwitchIndex l1 : leaves) {
    for (SwitchIndex l2 : leaves) {
      if (l1 == l2) continue;
      const auto core = map.SwitchPathsBetween(l1, l2);
      if (!core) {
        ++out.leaf_pairs_unreachable;
        continue;
      }
      const size_t paths = core->paths.size();
      const size_t n1 = live_on[l1].size(), n2 = live_on[l2].size();
      uint32_t reps, flows_each;
      if (map.routing() == Routing::kEcmp) {
        const uint32_t k = FlowsForCoverage(paths, config_.coverage);
        reps = (k + max_flows - 1) / max_flows;
        flows_each = (k + reps - 1) / reps;
      } else {
        // Deterministic routing: flow j of a pair takes equal-cost path j mod S, in the map's path
        // order (the fabric pins flows by source port; see docs/analysis.md). S flows per
        // representative therefore cover every path exactly; two representatives (where the
        // leaves have them) also separate the host access links from the leaf uplinks.
        flows_each = static_cast<uint32_t>(std::min<size_t>(paths, max_flows));
        reps = static_cast<uint32_t>(std::max<size_t>((paths + flows_each - 1) / flows_each, 2));
      }
      reps = static_cast<uint32_t>(std::min<size_t>(reps, n1 * n2));
      const uint64_t salt =
          Hash(map.switches()[l1].name + ">" + map.switches()[l2].name, config_.seed);
      const auto srcs = ranked(l1, salt, reps);
      const auto dsts = ranked(l2, Mix(salt), reps);
      for (uint32_t i = 0; i < reps; ++i) {
        // Distinct NIC pairs: i walks the sources, and each lap over them shifts the destinations.
        const size_t a = i % n1, b = i / n1;
        add_peer(srcs[a], dsts[(a + b) % n2], flows_each);
      }
      if (reps > 0) ++out.leaf_pairs_covered;
    }
  }
}

void Planner::PlanWithoutMap(const std::vector<const AgentInfo*>& agents, PlanSet& out) const {
  const size_t n = agents.size();
  if (n < 2) return;
  const uint32_t flows = std::max<uint32_t>(1, std::min(config_.max_flows_per_pair, 4u));
  auto add_peer = [&](const AgentInfo& src, const AgentInfo& dst) {
    PlannedPeer p;
    p.node = dst.node;
    p.address = dst.endpoints.front().address;
    p.port = dst.endpoints.front().port;
    p.flows = FlowIds(flows);
    p.transport = config_.latency_transport;
    p.rate_pps = config_.latency_pps_per_flow;
    out.plans[src.node].peers.push_back(std::move(p));
  };
  size_t unreachable = 0;
  for (const AgentInfo* a : agents) unreachable += a->endpoints.empty();
  if (unreachable > 0) {
    out.notes.push_back(std::to_string(unreachable) +
                        " live node(s) advertised no probe endpoint; nobody probes them");
  }
  if (n <= config_.full_mesh_max_nodes) {
    for (const AgentInfo* s : agents) {
      for (const AgentInfo* d : agents) {
        if (s != d && !d->endpoints.empty()) add_peer(*s, *d);
      }
    }
    return;
  }
  // Sampled mesh on a hash ring: node u's j-th peer is the first node clockwise from
  // hash(u) + hash(u, j). Joins and leaves only move the peers whose point lands in the changed
  // arc.
  std::vector<std::pair<uint64_t, const AgentInfo*>> ring;
  for (const AgentInfo* a : agents) ring.emplace_back(Hash(a->node, config_.seed), a);
  std::sort(ring.begin(), ring.end());
  const size_t d = std::min(config_.sampled_peers, n - 1);
  std::unordered_map<const AgentInfo*, size_t> in_degree;
  std::unordered_map<const AgentInfo*, std::set<const AgentInfo*>> chosen;
  for (const auto& [pos, u] : ring) {
    auto& mine = chosen[u];
    for (size_t j = 0; mine.size() < d && j < 4 * d; ++j) {
      const uint64_t point = pos + Hash(u->node + "#" + std::to_string(j), config_.seed);
      auto it = std::lower_bound(ring.begin(), ring.end(),
                                 std::pair<uint64_t, const AgentInfo*>(point, nullptr));
      size_t idx = static_cast<size_t>(it - ring.begin()) % n;
      // Walk clockwise past ourselves, duplicates and nodes nobody can probe.
      for (size_t step = 0; step < n; ++step, idx = (idx + 1) % n) {
        const AgentInfo* v = ring[idx].second;
        if (v != u && !v->endpoints.empty() && !mine.contains(v)) {
          mine.insert(v);
          ++in_degree[v];
          add_peer(*u, *v);
          break;
        }
      }
    }
  }
  // Every probeable node must be probed by someone: give an uncovered node to its ring predecessor.
  for (size_t i = 0; i < n; ++i) {
    const AgentInfo* v = ring[i].second;
    if (v->endpoints.empty() || in_degree[v] > 0) continue;
    const AgentInfo* pred = ring[(i + n - 1) % n].second;
    chosen[pred].insert(v);
    ++in_degree[v];
    add_peer(*pred, *v);
  }
}

void Planner::ApplyFleetCap(PlanSet& out) const {
  const double cap = config_.fleet_results_per_s;
  if (cap <= 0) return;
  double intra = 0, other = 0;
  for (const auto& [node, plan] : out.plans) {
    for (const PlannedPeer& p : plan.peers) {
      (p.path_class == PathClass::kIntraLeaf ? intra : other) +=
          static_cast<double>(p.flows.size()) * p.rate_pps;
    }
  }
  if (intra + other <= cap) return;
  // Inter-leaf (and unknown-path) flows get what intra-leaf flows leave, but at least half the cap
  // when they need it: many inter-leaf flows share each spine link, so each can run slower.
  const double other_share = std::min(other, std::max(cap / 2, cap - intra));
  const double intra_share = std::min(intra, cap - other_share);
  const double f_intra = intra > 0 ? intra_share / intra : 1.0;
  const double f_other = other > 0 ? other_share / other : 1.0;
  for (auto& [node, plan] : out.plans) {
    for (PlannedPeer& p : plan.peers) {
      p.rate_pps *= p.path_class == PathClass::kIntraLeaf ? f_intra : f_other;
    }
  }
  out.notes.push_back("the mesh asks for " + std::to_string(static_cast<int64_t>(intra + other)) +
                      " results/s, over the fleet cap of " +
                      std::to_string(static_cast<int64_t>(cap)) + "; flow rates scaled by " +
                      std::to_string(f_intra) + " (intra-leaf) and " + std::to_string(f_other) +
                      " (inter-leaf)");
}

void Planner::ApplyBudgets(PlanSet& out) const {
  const double burst = static_cast<double>(config_.bw_burst_bytes);
  for (auto& [node, plan] : out.plans) {
    plan.budget = Budget{config_.budget_pps, config_.budget_bytes_per_s};
    plan.bw_burst_bytes = config_.bw_burst_bytes;
    size_t flows = 0;
    double pps = 0;  // at the rates the fleet cap left, which may differ per peer
    for (const PlannedPeer& p : plan.peers) {
      flows += p.flows.size();
      pps += static_cast<double>(p.flows.size()) * p.rate_pps;
    }
    // Latency probes may use the packet budget and the byte budget left to them.
    const double byte_cap_pps = config_.budget_bytes_per_s * (1.0 - config_.bw_budget_share) /
                                std::max<uint32_t>(1, config_.latency_probe_bytes);
    const double pps_cap = std::min(config_.budget_pps, byte_cap_pps);
    if (pps > pps_cap && flows > 0) {
      // Scale every flow by the same factor: the intra/inter-leaf ratio the fleet cap chose
      // survives, and no flow is ever raised above the rate it had.
      const double factor = pps_cap / pps;
      for (PlannedPeer& p : plan.peers) p.rate_pps *= factor;
      out.notes.push_back(node + ": " + std::to_string(flows) + " peer flows at " +
                          std::to_string(pps) + " probes/s exceed the budget of " +
                          std::to_string(static_cast<int>(pps_cap)) +
                          " probes/s; rates scaled by " + std::to_string(factor));
    }
    // Rates go down to the next step of a grid of 2^(1/8) (9%): a join or leave moves the fleet
    // cap's factor a little, and without the grid every node's plan would change and be resent.
    pps = 0;
    for (PlannedPeer& p : plan.peers) {
      p.rate_pps = QuantizeRate(p.rate_pps);
      pps += static_cast<double>(p.flows.size()) * p.rate_pps;
    }
    const double latency_bytes = pps * config_.latency_probe_bytes;
    // Bandwidth bursts: every peer once per interval, stretched until they fit their share.
    const double bw_allow = std::min(config_.budget_bytes_per_s * config_.bw_budget_share,
                                     config_.budget_bytes_per_s - latency_bytes);
    const double bw_peers = static_cast<double>(plan.peers.size());
    double bw_rate = 0;
    if (bw_peers > 0 && (bw_allow <= 0 || burst <= 0)) {
      for (PlannedPeer& p : plan.peers) p.bandwidth = false;
      out.notes.push_back(node + ": no byte budget left for bandwidth probes");
      plan.bw_interval_s = 0;
    } else if (bw_peers > 0) {
      const double needed = std::ceil(bw_peers * burst / bw_allow);
      plan.bw_interval_s = static_cast<uint32_t>(
          std::min<double>(std::max<double>(config_.bw_interval_s, needed), 86400.0 * 7));
      bw_rate = bw_peers * burst / plan.bw_interval_s;
    } else {
      plan.bw_interval_s = config_.bw_interval_s;
    }
    plan.planned = Budget{pps, latency_bytes + bw_rate};
  }
}

}  // namespace fw::aggregator
