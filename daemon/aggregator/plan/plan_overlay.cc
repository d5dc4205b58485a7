// Applying a temporary overlay (a qualification mesh) to one node's finished plan.
#include "daemon/aggregator/plan/plan_overlay.h"

#include <algorithm>
#include <bit>
#include <string_view>
#include <tuple>

#include "daemon/aggregator/plan/planner.h"

namespace fw::aggregator {
namespace {

// The planner's RDMA flow cap per target (PlannerConfig::rdma_max_flows).
constexpr uint32_t kMaxRdmaFlows = 4;

PlannedPeer RdmaPeer(const AgentInfo& dst, Transport t, RdmaRoute route) {
  PlannedPeer p;
  p.node = dst.node;
  if (!dst.endpoints.empty()) {  // informational: RDMA targets are addressed by `rdma`
    p.address = dst.endpoints.front().address;
    p.port = dst.endpoints.front().port;
  }
  p.transport = t;
  p.bandwidth = false;
  p.rdma = std::make_shared<const RdmaRoute>(std::move(route));
  return p;
}

// Raises (or adds) `self`'s RDMA UD peers toward `dst`, one per rail; returns the probes/s added.
double RaiseRdmaUd(const AgentInfo& self, const AgentInfo& dst, const PlanOverlay& o, Plan& plan) {
  const uint32_t flows = std::clamp<uint32_t>(o.flows, 1, kMaxRdmaFlows);
  double added = 0;
  for (RdmaRoute& r : RdmaRoutes(self, dst)) {
    auto it = std::find_if(plan.peers.begin(), plan.peers.end(), [&](const PlannedPeer& p) {
      return p.node == dst.node && p.transport == Transport::kRdmaUd && p.rdma &&
             p.rdma->src_device == r.src_device;
    });
    if (it == plan.peers.end()) {
      plan.peers.push_back(RdmaPeer(dst, Transport::kRdmaUd, std::move(r)));
      it = plan.peers.end() - 1;
      it->flows = 0;
    }
    const double before = static_cast<double>(it->flows) * it->rate_pps;
    it->flows = std::max(it->flows, flows);
    it->rate_pps = std::max(it->rate_pps, o.rdma_rate_pps);
    added += static_cast<double>(it->flows) * it->rate_pps - before;
  }
  return added;
}

// Marks `self`'s RC peer toward `dst` with `round`, adding one on the first rail when the plan
// has none.
void AddRcRound(const AgentInfo& self, const AgentInfo& dst, uint64_t round, Plan& plan) {
  auto it = std::find_if(plan.peers.begin(), plan.peers.end(), [&](const PlannedPeer& p) {
    return p.node == dst.node && p.transport == Transport::kRdmaRc;
  });
  if (it == plan.peers.end()) {
    auto routes = RdmaRoutes(self, dst);
    if (routes.empty()) return;
    plan.peers.push_back(RdmaPeer(dst, Transport::kRdmaRc, std::move(routes.front())));
    it = plan.peers.end() - 1;
    it->flows = 1;
  }
  it->rdma_rc_round = round;
}

// An entry's UDP probes per second: its raised flows at rate_pps, the others at
// unraised_rate_pps (priced at rate_pps when that is 0, the agent's default, which no plan below
// it sets).
double EntryPps(const PlannedPeer& p) {
  if (p.raised_flows.empty()) return static_cast<double>(p.flows) * p.rate_pps;
  const double raised = static_cast<double>(p.raised_flows.size());
  const double unraised = p.unraised_rate_pps > 0 ? p.unraised_rate_pps : p.rate_pps;
  return raised * p.rate_pps + (static_cast<double>(p.flows) - raised) * unraised;
}

// Raises `p`'s flows in `set` (FlowBit ids; kAllFlows every flow) to `rate`: a raise of some flows
// keeps the others at the entry's rate before (unraised_rate_pps). A set naming a flow the entry
// does not have raises every flow: the overlay's flows were another entry's. A raise of every flow
// on an entry that lists raised flows (a qualification mesh over an escalated pair, in whichever
// order they were set) brings the others up to `rate` and leaves the listed ones at theirs if
// higher, so that the result does not depend on the overlays' order.
void RaiseFlows(PlannedPeer& p, uint64_t set, double rate) {
  const uint64_t mine = p.flows >= 64 ? kAllFlows : (uint64_t{1} << p.flows) - 1;
  if (set == kAllFlows || (set & ~mine) != 0 || (set & mine) == mine) {
    if (!p.raised_flows.empty() && p.unraised_rate_pps > 0 && rate < p.rate_pps) {
      p.unraised_rate_pps = std::max(p.unraised_rate_pps, rate);
      return;
    }
    p.raised_flows.clear();
    p.unraised_rate_pps = 0;
    p.rate_pps = std::max(p.rate_pps, rate);
    return;
  }
  if (p.raised_flows.empty()) {
    if (rate <= p.rate_pps) return;  // every flow is at that rate already
    p.unraised_rate_pps = p.rate_pps;
  } else {
    for (uint32_t id : p.raised_flows) set |= FlowBit(id);
  }
  p.rate_pps = std::max(p.rate_pps, rate);
  p.raised_flows.clear();
  if (set == mine) {
    p.unraised_rate_pps = 0;
    return;
  }
  for (uint32_t id = 0; id < p.flows; ++id) {
    if (set & FlowBit(id)) p.raised_flows.push_back(id);
  }
}

// `agent`'s endpoint on `nic`; null for an empty name or when none is on it.
const ProbeEndpoint* EndpointOn(const AgentInfo& agent, std::string_view nic) {
  if (nic.empty()) return nullptr;
  for (const ProbeEndpoint& e : agent.endpoints) {
    if (e.nic == nic) return &e;
  }
  return nullptr;
}

}  // namespace

uint32_t RaisedFlowCount(uint64_t set, uint32_t flows) {
  return set == kAllFlows ? std::max<uint32_t>(1, flows)
                          : static_cast<uint32_t>(std::popcount(set));
}

void ApplyOverlay(const PlanOverlay& overlay, const std::string& node,
                  const std::function<const AgentInfo*(std::string_view)>& agent_of,
                  uint32_t probe_bytes, Plan& plan) {
  const AgentInfo* self = agent_of(node);
  for (const OverlayBurst& b : overlay.bursts) {
    if (b.src != node || b.dst == node) continue;
    const AgentInfo* a = agent_of(b.dst);
    if (b.rdma_rc) {
      if (a && self) AddRcRound(*self, *a, b.round, plan);
      continue;
    }
    if (!a || a->endpoints.empty()) continue;
    plan.bursts.push_back({b.dst, a->endpoints.front().address, a->endpoints.front().port, b.bytes,
                           b.round, b.timeout_s});
  }
  const auto self_at = std::find(overlay.nodes.begin(), overlay.nodes.end(), node);
  if (self_at == overlay.nodes.end()) return;
  // The member's NIC (PlanOverlay::nics), empty when the overlay names none.
  auto nic_of = [&](size_t member) -> std::string_view {
    return overlay.nics.size() == overlay.nodes.size() ? std::string_view(overlay.nics[member])
                                                       : std::string_view();
  };
  const size_t self_member = static_cast<size_t>(self_at - overlay.nodes.begin());
  const std::string_view self_nic = nic_of(self_member);
  // The flows of this member's entries the overlay raises (PlanOverlay::flow_sets).
  const uint64_t self_flows =
      overlay.flow_sets.size() == overlay.nodes.size() ? overlay.flow_sets[self_member] : kAllFlows;
  double added_pps = 0;
  auto raise = [&](PlannedPeer& p) {
    const double before = EntryPps(p);
    p.flows = std::max(p.flows, overlay.flows);
    RaiseFlows(p, self_flows, overlay.rate_pps);
    if (overlay.probe_timeout_ms != 0) {
      p.timeout_ms = p.timeout_ms == 0 ? overlay.probe_timeout_ms
                                       : std::min(p.timeout_ms, overlay.probe_timeout_ms);
    }
    added_pps += EntryPps(p) - before;
  };
  for (size_t m = 0; m < overlay.nodes.size(); ++m) {
    const std::string& peer = overlay.nodes[m];
    if (peer == node) continue;
    const AgentInfo* a = agent_of(peer);
    if (!a || a->endpoints.empty()) continue;
    // Once per peer and id: an escalation's overlays of one node pair, one per NIC pair, share
    // its trace id, and the request traces every flow toward the peer.
    if (overlay.trace_id != 0 &&
        std::none_of(plan.trace_requests.begin(), plan.trace_requests.end(),
                     [&](const TraceRequest& t) {
                       return t.peer == peer && t.src_port == 0 && t.id == overlay.trace_id;
                     })) {
      plan.trace_requests.push_back(
          TraceRequest{.peer = peer, .src_port = 0, .id = overlay.trace_id});
    }
    // None of this member's flows crossed what the overlay escalates: its traces may still tell.
    if (self_flows == 0) continue;
    // Between the two members' NICs: every such UDP entry (one per NIC pair in a per-NIC plan).
    const std::string_view peer_nic = nic_of(m);
    bool raised = false;
    if (!self_nic.empty() && !peer_nic.empty()) {
      for (PlannedPeer& p : plan.peers) {
        if (p.node == peer && p.transport == Transport::kUdp && p.src_nic == self_nic &&
            p.dst_nic == peer_nic) {
          raise(p);
          raised = true;
        }
      }
    }
    // None planned between them: one is added between those NICs, when both members list an
    // endpoint on them. The first entry toward the member is another rail's in a multi-rail
    // plan, whose flows do not cross what the overlay escalates.
    const ProbeEndpoint* peer_ep = raised ? nullptr : EndpointOn(*a, peer_nic);
    const ProbeEndpoint* self_ep = self && peer_ep ? EndpointOn(*self, self_nic) : nullptr;
    if (peer_ep && self_ep) {
      PlannedPeer p;
      p.node = peer;
      p.address = peer_ep->address;
      p.port = peer_ep->port;
      p.src_address = self_ep->address;
      p.src_nic = std::string(self_nic);
      p.dst_nic = std::string(peer_nic);
      p.flows = 0;
      p.transport = Transport::kUdp;
      p.bandwidth = false;
      plan.peers.push_back(std::move(p));
      raise(plan.peers.back());
      raised = true;
    }
    if (!raised) {
      auto it = std::find_if(plan.peers.begin(), plan.peers.end(), [&](const PlannedPeer& p) {
        return p.node == peer && p.transport == Transport::kUdp;
      });
      if (it == plan.peers.end()) {
        PlannedPeer p;
        p.node = peer;
        p.address = a->endpoints.front().address;
        p.port = a->endpoints.front().port;
        p.flows = 0;
        p.transport = Transport::kUdp;
        p.bandwidth = false;
        plan.peers.push_back(std::move(p));
        it = plan.peers.end() - 1;
      }
      raise(*it);
    }
    if (overlay.rdma_rate_pps > 0 && self) {
      added_pps += RaiseRdmaUd(*self, *a, overlay, plan);
    }
  }
  std::sort(plan.peers.begin(), plan.peers.end(), [](const PlannedPeer& a, const PlannedPeer& b) {
    return std::tie(a.node, a.address, a.src_address) < std::tie(b.node, b.address, b.src_address);
  });
  plan.budget.pps += added_pps;
  plan.budget.bytes_per_s += added_pps * probe_bytes;
  plan.planned.pps += added_pps;
  plan.planned.bytes_per_s += added_pps * probe_bytes;
}

}  // namespace fw::aggregator
