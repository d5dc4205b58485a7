// Applying a temporary overlay (a qualification mesh) to one node's finished plan.
#include "daemon/aggregator/plan/plan_overlay.h"

#include <algorithm>
#include <tuple>

#include "daemon/aggregator/plan/planner.h"

namespace fw::aggregator {

void ApplyOverlay(const PlanOverlay& overlay, const std::string& node,
                  const std::function<const AgentInfo*(std::string_view)>& agent_of,
                  uint32_t probe_bytes, Plan& plan) {
  for (const OverlayBurst& b : overlay.bursts) {
    if (b.src != node || b.dst == node) continue;
    const AgentInfo* a = agent_of(b.dst);
    if (!a || a->endpoints.empty()) continue;
    plan.bursts.push_back({b.dst, a->endpoints.front().address, a->endpoints.front().port, b.bytes,
                           b.round, b.timeout_s});
  }
  if (std::find(overlay.nodes.begin(), overlay.nodes.end(), node) == overlay.nodes.end()) return;
  double added_pps = 0;
  for (const std::string& peer : overlay.nodes) {
    if (peer == node) continue;
    const AgentInfo* a = agent_of(peer);
    if (!a || a->endpoints.empty()) continue;
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
    const double before = static_cast<double>(it->flows) * it->rate_pps;
    it->flows = std::max(it->flows, overlay.flows);
    it->rate_pps = std::max(it->rate_pps, overlay.rate_pps);
    added_pps += static_cast<double>(it->flows) * it->rate_pps - before;
    if (overlay.trace_id != 0) {
      plan.trace_requests.push_back(
          TraceRequest{.peer = peer, .src_port = 0, .id = overlay.trace_id});
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
