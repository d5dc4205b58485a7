// Temporary additions to the probe plans: a qualification's dense all-pairs mesh among a set of
// nodes at a raised rate, or an escalation's raised rate and trace requests on a suspect pair,
// applied by the planner until the overlay is cleared.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace fw::aggregator {

// Flow ids as a set (which of an entry's UDP flows an overlay raises): bit i is flow id i, as
// results report it. kAllFlows is every flow: a flow id of 64 or more is not expressible, so a set
// that would hold one holds every flow instead.
inline constexpr uint64_t kAllFlows = ~uint64_t{0};
constexpr uint64_t FlowBit(uint32_t flow_id) {
  return flow_id < 64 ? uint64_t{1} << flow_id : kAllFlows;
}
// How many of `flows` flows the set raises.
uint32_t RaisedFlowCount(uint64_t set, uint32_t flows);

struct AgentInfo;  // planner.h
struct Plan;       // planner.h

// One burst of a qualification round: `src` sends `bytes` to `dst` once for `round`.
struct OverlayBurst {
  std::string src, dst;
  uint64_t bytes = 0;  // 0: the plan's burst size
  uint64_t round = 0;  // non-zero, unique per round
  double timeout_s = 0;
  // An RDMA RC write burst on the first rail both nodes have (RcPeers; the agent's
  // rdma_rc_bytes), instead of a TCP burst to the peer's responder.
  bool rdma_rc = false;
};

struct PlanOverlay {
  std::string id;                  // who asked (a qualification run, an escalation)
  std::vector<std::string> nodes;  // every ordered pair among them is probed
  double rate_pps = 0;             // per flow
  uint32_t flows = 1;
  // Non-zero: the UDP entries the overlay raises or adds time out their probes after this many
  // ms (the shorter of it and an entry's own), so that a dense pair's losses reach the analyzer
  // one short timeout after they were sent instead of the agent's default 1 s. 0: as planned.
  uint32_t probe_timeout_ms = 0;
  // Non-zero: each member also asks its agent to trace every flow toward the other members, ahead
  // of its other flows, once per id (TraceRequest).
  uint64_t trace_id = 0;
  std::vector<OverlayBurst> bursts;  // bandwidth bursts to run now
  // Non-zero: every rail between two members that both have RDMA ports is probed over RDMA UD at
  // this rate per flow (with `flows` flows, at most 4, as the planner's RDMA peers).
  double rdma_rate_pps = 0;
  // Empty, or one NIC per member of `nodes` (same order): a member's UDP entries raised toward
  // another member are those from its NIC to the other's (a multi-rail plan has one per NIC
  // pair). With no such entry, one is added between the two NICs when both members have an
  // endpoint on theirs. An empty name, or a NIC without an endpoint, raises the first UDP entry
  // toward that member.
  std::vector<std::string> nics{};
  // Empty, or one flow set per member of `nodes` (same order): the ids of the member's UDP flows
  // toward the other members that the overlay raises (PlannedPeer::raised_flows); the entry's
  // other flows keep their rate. kAllFlows: every flow; 0: the member's entries are not raised.
  // Empty: every flow of every member. Flow ids are an entry's own (0..flows-1 per PlannedPeer),
  // so a set means the entries `nics` names: an escalation raises the flows that crossed its
  // element with one overlay per NIC pair (EscalationBudget::Overlays), each naming its NICs.
  std::vector<uint64_t> flow_sets{};

  // Equal overlays make equal plans (EscalationStage sets an overlay again only when it changed).
};

// Adds to `node`'s plan an entry for every other overlay member that `agent_of` knows (between
// the NICs `nics` names, else at the member's first endpoint), or raises an existing entry to the
// overlay's flows and rate; raises the plan's budget by what it adds (`probe_bytes` per probe), so
// the agent's token bucket does not drop the mesh. With `nics`, the entries raised are those
// between the two members' NICs (see PlanOverlay::nics). Adds the overlay's bursts that `node`
// sends to a peer `agent_of` knows (its first endpoint). With rdma_rate_pps, does the same for the
// RDMA UD peers toward members with RDMA (each rail of RdmaRoutes; probe_timeout_ms is UDP's only).
// An rdma_rc burst marks (or
// adds) the sender's RC peer toward the receiver with the round. A node outside the overlay's nodes
// and bursts is left as it was. Peers stay sorted by (node, address). With a trace_id, adds a trace
// request per peer to the plan, unless the plan has that peer's request under that id already.
void ApplyOverlay(const PlanOverlay& overlay, const std::string& node,
                  const std::function<const AgentInfo*(std::string_view)>& agent_of,
                  uint32_t probe_bytes, Plan& plan);

}  // namespace fw::aggregator
