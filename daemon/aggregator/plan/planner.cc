// Pingmesh-style planning: intra-leaf full mesh, inter-leaf representatives with enough flows to
// cover every equal-cost path, a sampled mesh without a map, then per-node budgets.
#include "daemon/aggregator/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

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

// The map as one planning pass sees it: the live NICs on each leaf and their rendezvous hashes.
struct Planner::MapView {
  explicit MapView(const FabricMap& m) : map(m) {}
  const FabricMap& map;
  std::vector<std::vector<HostNicIndex>> live_on;  // by switch index
  std::vector<uint64_t> nic_hash;                  // by host NIC index
  std::vector<SwitchIndex> leaves;                 // the switches with live NICs, in index order
  // FlowsForCoverage by path count (0: not yet): a fleet's leaf pairs have few distinct counts.
  mutable std::vector<uint32_t> coverage_flows;
};

PlanSet Planner::PlanFor(const std::vector<AgentInfo>& live) const {
  PlanSet set;
  PlanSummary summary = PlanEach(live, [&](const std::string& node, Plan&& plan) {
    set.plans.emplace(node, std::move(plan));
  });
  static_cast<PlanSummary&>(set) = std::move(summary);
  return set;
}

Planner::LeafPairShape Planner::ShapeOf(const MapView& view, SwitchIndex l1, SwitchIndex l2) const {
  const auto core = view.map.SwitchPathsBetween(l1, l2);
  if (!core || core->paths.empty()) return {};
  const size_t paths = core->paths.size();
  const size_t n1 = view.live_on[l1].size(), n2 = view.live_on[l2].size();
  const uint32_t max_flows = std::max<uint32_t>(1, config_.max_flows_per_pair);
  LeafPairShape shape;
  if (view.map.routing() == Routing::kEcmp) {
    constexpr size_t kMemoPaths = 4096;
    if (paths < kMemoPaths && paths >= view.coverage_flows.size()) {
      view.coverage_flows.resize(paths + 1, 0);
    }
    uint32_t k = paths < view.coverage_flows.size() ? view.coverage_flows[paths] : 0;
    if (k == 0) {
      k = FlowsForCoverage(paths, config_.coverage);
      if (paths < view.coverage_flows.size()) view.coverage_flows[paths] = k;
    }
    shape.reps = (k + max_flows - 1) / max_flows;
    shape.flows_each = (k + shape.reps - 1) / shape.reps;
  } else {
    // Deterministic routing: flow j of a pair takes equal-cost path j mod S, in the map's path
    // order (the fabric pins flows by source port; see docs/analysis.md). S flows per
    // representative therefore cover every path exactly; two representatives (where the leaves
    // have them) also separate the host access links from the leaf uplinks.
    shape.flows_each = static_cast<uint32_t>(std::min<size_t>(paths, max_flows));
    shape.reps = static_cast<uint32_t>(
        std::max<size_t>((paths + shape.flows_each - 1) / shape.flows_each, 2));
  }
  shape.reps = static_cast<uint32_t>(std::min<size_t>(shape.reps, n1 * n2));
  shape.flows_each = std::min<uint32_t>(shape.flows_each, 0xffff);
  return shape;
}

void Planner::SetOverlay(PlanOverlay overlay) {
  MutexLock lock(overlay_mu_);
  std::erase_if(overlays_, [&](const PlanOverlay& o) { return o.id == overlay.id; });
  overlays_.push_back(std::move(overlay));
}

void Planner::ClearOverlay(const std::string& id) {
  MutexLock lock(overlay_mu_);
  std::erase_if(overlays_, [&](const PlanOverlay& o) { return o.id == id; });
}

// What the first pass learns: the fleet's demand by path class and, with a map, the live view of
// it that the second pass plans from.
struct Planner::FleetDemand {
  double intra = 0;  // probes/s the intra-leaf pairs ask for
  double other = 0;  // probes/s everything else asks for (inter-leaf, the map-less mesh)
  std::optional<MapView> view;
  std::vector<LeafPairShape> shapes;                           // [i * leaves + j]: leaves[i] -> [j]
  std::vector<std::vector<std::string_view>> nodes_on;         // by position in view->leaves
  std::unordered_map<std::string_view, uint32_t> leaves_left;  // per mapped node
};

PlanSummary Planner::PlanEach(const std::vector<AgentInfo>& live, const PlanSink& sink,
                              const std::unordered_set<std::string>* only) const {
  PlanSummary out;
  const std::vector<PlanOverlay> overlays = [&] {
    MutexLock lock(overlay_mu_);
    return overlays_;
  }();
  // One agent per node; a duplicate (a reconnect racing its old session) keeps the first.
  std::vector<const AgentInfo*> agents;
  AgentIndex agent_of;
  for (const AgentInfo& a : live) {
    if (agent_of.emplace(a.node, &a).second) agents.push_back(&a);
  }
  std::sort(agents.begin(), agents.end(),
            [](const AgentInfo* a, const AgentInfo* b) { return a->node < b->node; });
  std::vector<const AgentInfo*> unmapped;
  for (const AgentInfo* a : agents) {
    if (!map_ || map_->NicsOfNode(a->node).empty()) unmapped.push_back(a);
  }
  if (map_ && !unmapped.empty()) {
    out.notes.push_back(std::to_string(unmapped.size()) +
                        " live node(s) are not in the fabric map (first: " + unmapped[0]->node +
                        "); they probe each other without path information");
  }
  // Nodes outside the map probe each other in a mesh; few in a mapped fleet, so planned whole.
  std::unordered_map<std::string, Plan> mesh;
  PlanWithoutMap(unmapped, mesh, out.notes);

  FleetDemand demand = MeasureDemand(agent_of, mesh, out);
  const FleetFactors cap = FleetCap(demand.intra, demand.other, out.notes);
  // Finishes a node's plan (cap, overlays) and hands it over.
  auto hand_over = [&](const std::string& node, Plan plan) {
    if (auto self = agent_of.find(node); self != agent_of.end()) {
      AddRdmaPeers(*self->second, agent_of, plan);
    }
    Finish(node, plan, cap, out.notes);
    out.base_pps += plan.planned.pps;
    for (const PlanOverlay& o : overlays) {
      ApplyOverlay(
          o, node,
          [&](std::string_view n) {
            auto it = agent_of.find(n);
            return it == agent_of.end() ? nullptr : it->second;
          },
          config_.latency_probe_bytes, plan);
    }
    sink(node, std::move(plan));
    ++out.plans;
  };
  PlanLeaves(demand, agent_of, hand_over, only);
  for (const AgentInfo* a : unmapped) {
    if (only && !only->contains(a->node)) continue;
    auto entry = mesh.extract(a->node);
    hand_over(a->node, entry ? std::move(entry.mapped()) : Plan{});
  }
  // A line per node over its budget helps at 16 nodes and floods the log at 16,000.
  constexpr size_t kMaxNotes = 32;
  if (out.notes.size() > kMaxNotes) {
    const size_t more = out.notes.size() - kMaxNotes;
    out.notes.resize(kMaxNotes);
    out.notes.push_back("... and " + std::to_string(more) + " more notes like these");
  }
  return out;
}

namespace {

// RDMA UD targets `src` gets toward `dst` (AddRdmaPeers): one per local port for which `dst` has a
// port of the same link layer.
size_t RdmaRails(const AgentInfo& src, const AgentInfo& dst) {
  size_t n = 0;
  for (const RdmaPort& s : src.rdma) {
    n += std::any_of(dst.rdma.begin(), dst.rdma.end(),
                     [&](const RdmaPort& d) { return d.link_layer == s.link_layer; });
  }
  return n;
}

}  // namespace

Planner::FleetDemand Planner::MeasureDemand(const AgentIndex& agent_of,
                                            const std::unordered_map<std::string, Plan>& mesh,
                                            PlanSummary& out) const {
  FleetDemand d;
  const double rate = config_.latency_pps_per_flow;
  const uint32_t intra_flows = std::min<uint32_t>(config_.intra_leaf_flows, 0xffff);
  // RDMA UD targets count too (AddRdmaPeers adds them after the cap): each asks its per-target
  // cap over all its flows.
  const bool rdma = config_.rdma_ud;
  const double rdma_intra = rdma ? std::max(0.0, config_.rdma_intra_leaf_pps) : 0;
  const double rdma_other = rdma ? std::max(0.0, config_.rdma_other_pps) : 0;
  for (const auto& [node, plan] : mesh) {
    std::unordered_set<std::string_view> rdma_done;
    const auto self = agent_of.find(node);
    for (const PlannedPeer& p : plan.peers) {
      d.other += static_cast<double>(p.flows) * p.rate_pps;
      if (rdma_other == 0 || self == agent_of.end() || self->second->rdma.empty()) continue;
      const auto dst = agent_of.find(p.node);
      if (dst == agent_of.end() || !rdma_done.insert(dst->first).second) continue;
      d.other += static_cast<double>(RdmaRails(*self->second, *dst->second)) * rdma_other;
    }
  }
  if (!map_) return d;
  std::optional<MapView>& view = d.view;
  view.emplace(*map_);
  const auto& nics = map_->host_nics();
  view->live_on.resize(map_->switches().size());
  view->nic_hash.resize(nics.size());
  for (HostNicIndex i = 0; i < nics.size(); ++i) {
    if (!agent_of.contains(nics[i].node)) continue;
    view->live_on[nics[i].leaf].push_back(i);
    view->nic_hash[i] = Hash(nics[i].node + ":" + nics[i].nic, config_.seed);
  }
  for (SwitchIndex l = 0; l < view->live_on.size(); ++l) {
    if (!view->live_on[l].empty()) view->leaves.push_back(l);
  }
  const size_t nl = view->leaves.size();
  d.nodes_on.resize(nl);
  d.shapes.resize(nl * nl);
  for (size_t i = 0; i < nl; ++i) {
    // Intra-leaf pairs are ordered NIC pairs of different nodes: n² minus each node's c².
    std::unordered_map<std::string_view, size_t> per_node;
    for (HostNicIndex s : view->live_on[view->leaves[i]]) ++per_node[nics[s].node];
    const auto n = static_cast<double>(view->live_on[view->leaves[i]].size());
    double pairs = n * n;
    for (const auto& [node, c] : per_node) {
      pairs -= static_cast<double>(c) * static_cast<double>(c);
      d.nodes_on[i].push_back(node);
      ++d.leaves_left[node];
    }
    // Hand-over order within a leaf by name, so logs and notes read the same on every run.
    std::sort(d.nodes_on[i].begin(), d.nodes_on[i].end());
    d.intra += pairs * intra_flows * rate;
    // RDMA: each ordered pair of nodes on the leaf, rail by rail; and the most ports a node here
    // has, for the inter-leaf representatives below (an upper bound: AddRdmaPeers gives a node
    // one target set per peer node however many of its NICs pair with that node).
    size_t rdma_ports_here = 0;
    if (rdma_intra > 0 || rdma_other > 0) {
      for (std::string_view a : d.nodes_on[i]) {
        const AgentInfo& src = *agent_of.at(a);
        rdma_ports_here = std::max(rdma_ports_here, src.rdma.size());
        if (src.rdma.empty() || rdma_intra == 0) continue;
        for (std::string_view b : d.nodes_on[i]) {
          if (a != b) d.intra += static_cast<double>(RdmaRails(src, *agent_of.at(b))) * rdma_intra;
        }
      }
    }
    for (size_t j = 0; j < nl; ++j) {
      if (i == j) continue;
      const LeafPairShape shape = ShapeOf(*view, view->leaves[i], view->leaves[j]);
      d.shapes[i * nl + j] = shape;
      if (shape.reps == 0) {
        ++out.leaf_pairs_unreachable;
        continue;
      }
      ++out.leaf_pairs_covered;
      d.other += static_cast<double>(shape.reps) * shape.flows_each * rate;
      d.other += static_cast<double>(shape.reps * rdma_ports_here) * rdma_other;
    }
  }
  return d;
}

void Planner::PlanLeaves(FleetDemand& d, const AgentIndex& agent_of,
                         const std::function<void(const std::string&, Plan)>& hand_over,
                         const std::unordered_set<std::string>* only) const {
  if (!d.view) return;
  const MapView& view = *d.view;
  const double rate = config_.latency_pps_per_flow;
  const uint32_t intra_flows = std::min<uint32_t>(config_.intra_leaf_flows, 0xffff);
  const auto& nics = map_->host_nics();
  std::unordered_map<std::string_view, Plan> pending;
  auto add_peer = [&](HostNicIndex s, HostNicIndex dst_nic, uint32_t flows) {
    const HostNic& dst = nics[dst_nic];
    PlannedPeer p;
    p.path_class = nics[s].leaf == dst.leaf ? PathClass::kIntraLeaf : PathClass::kInterLeaf;
    p.node = dst.node;
    p.address = dst.address;
    p.port = PortFor(*agent_of.at(dst.node), dst, config_.default_port);
    p.src_address = nics[s].address;
    p.src_nic = nics[s].nic;
    p.dst_nic = dst.nic;
    p.flows = flows;
    p.transport = config_.latency_transport;
    p.rate_pps = rate;
    pending[nics[s].node].peers.push_back(std::move(p));
  };
  // Representatives per ordered leaf pair, chosen by rendezvous hashing so that a join or leave
  // moves only the representatives it touches.
  auto ranked = [&](SwitchIndex on, uint64_t salt, size_t want) {
    std::vector<HostNicIndex> v = view.live_on[on];
    auto key = [&](HostNicIndex i) { return Mix(view.nic_hash[i] ^ salt); };
    want = std::min(want, v.size());
    std::partial_sort(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(want), v.end(),
                      [&](HostNicIndex a, HostNicIndex b) { return key(a) < key(b); });
    return v;
  };
  // Whether one of `these` (NICs on `leaf`) can be among the `want` first of ranked(leaf, salt):
  // false when at least `want` NICs there rank strictly before each of them, whatever order the
  // sort gives equal keys. Rules a leaf pair out without the sort.
  auto any_ranked_within = [&](SwitchIndex leaf, const std::vector<HostNicIndex>& these,
                               uint64_t salt, size_t want) {
    for (HostNicIndex s : these) {
      const uint64_t mine = Mix(view.nic_hash[s] ^ salt);
      size_t before = 0;
      for (HostNicIndex o : view.live_on[leaf]) before += Mix(view.nic_hash[o] ^ salt) < mine;
      if (before < want) return true;
    }
    return false;
  };
  const size_t nl = view.leaves.size();
  // A node's plan is the union of what each of its NICs' leaves gives that NIC, and a leaf's part
  // for a NIC depends only on the leaf, the fleet's shapes and the hashes: with `only`, the leaves
  // of its nodes are planned, and only the peers of its nodes' NICs are built.
  std::vector<bool> wanted_leaf(nl, only == nullptr);
  std::vector<bool> wanted_nic(only ? nics.size() : 0);
  auto wanted = [&](HostNicIndex s) { return !only || wanted_nic[s]; };
  if (only) {
    std::vector<size_t> leaf_pos(map_->switches().size(), nl);
    for (size_t i = 0; i < nl; ++i) leaf_pos[view.leaves[i]] = i;
    for (const std::string& node : *only) {
      if (!agent_of.contains(node)) continue;  // not live: no NIC of it is in the view
      for (HostNicIndex s : map_->NicsOfNode(node)) {
        wanted_nic[s] = true;
        if (leaf_pos[nics[s].leaf] < nl) wanted_leaf[leaf_pos[nics[s].leaf]] = true;
      }
    }
  }
  for (size_t i = 0; i < nl; ++i) {
    if (!wanted_leaf[i]) continue;
    const SwitchIndex l1 = view.leaves[i];
    const auto& on = view.live_on[l1];
    std::vector<HostNicIndex> wanted_on;  // with `only`: the NICs of its nodes on this leaf
    if (only) std::copy_if(on.begin(), on.end(), std::back_inserter(wanted_on), wanted);
    // Room for the leaf's peers and a few representatives up front: growing 16,000 vectors by
    // doubling costs slack and copies.
    constexpr size_t kInterLeafRoom = 16;
    for (HostNicIndex s : on) {
      if (!wanted(s)) continue;
      auto& peers = pending[nics[s].node].peers;
      peers.reserve(peers.size() + on.size() - 1 + kInterLeafRoom);
      for (HostNicIndex dn : on) {
        if (nics[s].node != nics[dn].node) add_peer(s, dn, intra_flows);
      }
    }
    for (size_t j = 0; j < nl; ++j) {
      const LeafPairShape shape = i == j ? LeafPairShape{} : d.shapes[i * nl + j];
      if (shape.reps == 0) continue;
      const SwitchIndex l2 = view.leaves[j];
      const size_t n1 = on.size(), n2 = view.live_on[l2].size();
      const uint64_t salt =
          Hash(map_->switches()[l1].name + ">" + map_->switches()[l2].name, config_.seed);
      const size_t used = std::min<size_t>(shape.reps, n1);  // the sources r walks
      if (only && !any_ranked_within(l1, wanted_on, salt, used)) continue;
      const auto srcs = ranked(l1, salt, shape.reps);
      const auto dsts = ranked(l2, Mix(salt), shape.reps);
      for (uint32_t r = 0; r < shape.reps; ++r) {
        // Distinct NIC pairs: r walks the sources, and each lap over them shifts the
        // destinations.
        const size_t a = r % n1, b = r / n1;
        if (wanted(srcs[a])) add_peer(srcs[a], dsts[(a + b) % n2], shape.flows_each);
      }
    }
    // A node is finished when its last leaf has been planned.
    for (std::string_view node : d.nodes_on[i]) {
      if (--d.leaves_left[node] != 0) continue;
      auto entry = pending.extract(node);
      const std::string& name = agent_of.at(node)->node;
      if (only && !only->contains(name)) continue;
      hand_over(name, entry ? std::move(entry.mapped()) : Plan{});
    }
  }
}

void Planner::PlanWithoutMap(const std::vector<const AgentInfo*>& agents,
                             std::unordered_map<std::string, Plan>& plans,
                             std::vector<std::string>& notes) const {
  const size_t n = agents.size();
  if (n < 2) return;
  const uint32_t flows = std::max<uint32_t>(1, std::min(config_.max_flows_per_pair, 4u));
  auto add_peer = [&](const AgentInfo& src, const AgentInfo& dst) {
    if (dst.endpoints.empty()) return;  // callers skip these; nobody can probe them
    const ProbeEndpoint& ep = dst.endpoints.front();
    PlannedPeer p;
    p.node = dst.node;
    p.address = ep.address;
    p.port = ep.port;
    p.flows = flows;
    p.transport = config_.latency_transport;
    p.rate_pps = config_.latency_pps_per_flow;
    plans[src.node].peers.push_back(std::move(p));
  };
  size_t unreachable = 0;
  for (const AgentInfo* a : agents) unreachable += a->endpoints.empty();
  if (unreachable > 0) {
    notes.push_back(std::to_string(unreachable) +
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

namespace {

// The port of `dst` on the same rail as `src` (local port number `i` of the source): the one with
// the same device name, else the i-th of those with the same link layer (IB and RoCE ports cannot
// reach each other). Null when `dst` has none.
const RdmaPort* RailPeer(const RdmaPort& src, size_t i, const std::vector<RdmaPort>& dst) {
  std::vector<const RdmaPort*> same_layer;
  for (const RdmaPort& d : dst) {
    if (d.link_layer != src.link_layer) continue;
    if (d.device == src.device) return &d;
    same_layer.push_back(&d);
  }
  return same_layer.empty() ? nullptr : same_layer[i % same_layer.size()];
}

}  // namespace

std::vector<RdmaRoute> RdmaRoutes(const AgentInfo& src, const AgentInfo& dst) {
  std::vector<RdmaRoute> out;
  for (size_t i = 0; i < src.rdma.size(); ++i) {
    if (const RdmaPort* to = RailPeer(src.rdma[i], i, dst.rdma)) {
      out.push_back({src.rdma[i].device, *to});
    }
  }
  return out;
}

void Planner::AddRdmaPeers(const AgentInfo& src, const AgentIndex& agent_of, Plan& plan) const {
  if (!config_.rdma_ud || src.rdma.empty()) return;
  // The RDMA peers follow the latency plan: the same nodes, so the representatives and the
  // intra-leaf mesh the planner chose for the fabric are probed over the NIC's RDMA path too.
  std::unordered_set<std::string_view> done;
  const size_t latency_peers = plan.peers.size();
  for (size_t k = 0; k < latency_peers; ++k) {
    if (plan.peers[k].transport == Transport::kRdmaUd ||
        plan.peers[k].transport == Transport::kRdmaRc) {
      continue;
    }
    auto it = agent_of.find(plan.peers[k].node);
    if (it == agent_of.end() || it->second->rdma.empty() || !done.insert(it->first).second) {
      continue;
    }
    const AgentInfo& dst = *it->second;
    const bool rc = config_.rdma_rc && plan.peers[k].bandwidth;
    for (size_t i = 0; i < src.rdma.size(); ++i) {
      const RdmaPort* to = RailPeer(src.rdma[i], i, dst.rdma);
      if (to == nullptr) continue;
      PlannedPeer p;
      p.node = dst.node;
      p.address = plan.peers[k].address;  // informational: RDMA targets are addressed by `rdma`
      p.port = plan.peers[k].port;
      p.flows = std::clamp<uint32_t>(plan.peers[k].flows, 1, std::max(1u, config_.rdma_max_flows));
      p.transport = Transport::kRdmaUd;
      p.path_class = plan.peers[k].path_class;
      const double cap = p.path_class == PathClass::kIntraLeaf ? config_.rdma_intra_leaf_pps
                                                               : config_.rdma_other_pps;
      if (!(cap > 0) || !std::isfinite(cap)) continue;
      p.rate_pps = cap / p.flows;
      p.bandwidth = false;
      p.rdma = std::make_shared<const RdmaRoute>(RdmaRoute{src.rdma[i].device, *to});
      if (rc) {
        // RC write bursts on every rail (one RC QP per same-rail NIC pair): no probe rate;
        // Finish counts each as a bandwidth peer, so the bandwidth interval stretches to fit.
        PlannedPeer w = p;
        w.transport = Transport::kRdmaRc;
        w.flows = 1;
        w.rate_pps = 0;
        w.bandwidth = true;
        plan.peers.push_back(std::move(w));
      }
      plan.peers.push_back(std::move(p));
    }
  }
}

Planner::FleetFactors Planner::FleetCap(double intra, double other,
                                        std::vector<std::string>& notes) const {
  const double cap = config_.fleet_results_per_s;
  if (cap <= 0 || intra + other <= cap) return {};
  // Inter-leaf (and unknown-path) flows get what intra-leaf flows leave, but at least half the cap
  // when they need it: many inter-leaf flows share each spine link, so each can run slower.
  const double other_share = std::min(other, std::max(cap / 2, cap - intra));
  const double intra_share = std::min(intra, cap - other_share);
  FleetFactors f;
  f.intra = intra > 0 ? intra_share / intra : 1.0;
  f.other = other > 0 ? other_share / other : 1.0;
  notes.push_back("the mesh asks for " + std::to_string(static_cast<int64_t>(intra + other)) +
                  " results/s, over the fleet cap of " + std::to_string(static_cast<int64_t>(cap)) +
                  "; flow rates scaled by " + std::to_string(f.intra) + " (intra-leaf) and " +
                  std::to_string(f.other) + " (inter-leaf)");
  return f;
}

void Planner::Finish(const std::string& node, Plan& plan, const FleetFactors& cap,
                     std::vector<std::string>& notes) const {
  // The RDMA peers of a node share its address: their transport and local device order them.
  static const std::string kNoDevice;
  auto device = [](const PlannedPeer& p) -> const std::string& {
    return p.rdma ? p.rdma->src_device : kNoDevice;
  };
  std::sort(plan.peers.begin(), plan.peers.end(), [&](const PlannedPeer& a, const PlannedPeer& b) {
    return std::tie(a.node, a.address, a.src_address, a.transport, device(a)) <
           std::tie(b.node, b.address, b.src_address, b.transport, device(b));
  });
  for (PlannedPeer& p : plan.peers) {
    p.rate_pps *= p.path_class == PathClass::kIntraLeaf ? cap.intra : cap.other;
  }
  const double burst = static_cast<double>(config_.bw_burst_bytes);
  plan.budget = Budget{config_.budget_pps, config_.budget_bytes_per_s};
  plan.bw_burst_bytes = config_.bw_burst_bytes;
  size_t flows = 0;
  double pps = 0;  // at the rates the fleet cap left, which may differ per peer
  for (const PlannedPeer& p : plan.peers) {
    flows += p.flows;
    pps += static_cast<double>(p.flows) * p.rate_pps;
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
    notes.push_back(node + ": " + std::to_string(flows) + " peer flows at " + std::to_string(pps) +
                    " probes/s exceed the budget of " + std::to_string(static_cast<int>(pps_cap)) +
                    " probes/s; rates scaled by " + std::to_string(factor));
  }
  // Rates go down to the next step of a grid of 2^(1/8) (9%): a join or leave moves the fleet
  // cap's factor a little, and without the grid every node's plan would change and be resent.
  pps = 0;
  for (PlannedPeer& p : plan.peers) {
    p.rate_pps = QuantizeRate(p.rate_pps);
    pps += static_cast<double>(p.flows) * p.rate_pps;
  }
  const double latency_bytes = pps * config_.latency_probe_bytes;
  // Bandwidth bursts: every peer once per interval, stretched until they fit their share.
  const double bw_allow = std::min(config_.budget_bytes_per_s * config_.bw_budget_share,
                                   config_.budget_bytes_per_s - latency_bytes);
  const double bw_peers = static_cast<double>(std::count_if(
      plan.peers.begin(), plan.peers.end(), [](const PlannedPeer& p) { return p.bandwidth; }));
  double bw_rate = 0;
  if (bw_peers > 0 && (bw_allow <= 0 || burst <= 0)) {
    for (PlannedPeer& p : plan.peers) p.bandwidth = false;
    notes.push_back(node + ": no byte budget left for bandwidth probes");
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

}  // namespace fw::aggregator
