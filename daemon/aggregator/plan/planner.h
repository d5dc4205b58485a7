// The probe planner: who probes whom, with how many flows, at what rate, within each node's budget.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/mutex.h"
#include "daemon/aggregator/model/reported_probe.h"
#include "daemon/aggregator/plan/fabric_map.h"
#include "daemon/aggregator/plan/plan_overlay.h"

namespace fw::aggregator {

// An address where an agent's responder answers probes (from its Hello).
struct ProbeEndpoint {
  std::string address;
  uint16_t port = 9753;
  std::string nic;  // optional: the NIC that owns the address
};

// An RDMA port's UD probe endpoint from Hello (fabricwatch.v1.RdmaEndpoint), passed on to the
// peers that probe it. Validated at ingest (wire_convert.cc); the planner only pairs ports.
struct RdmaPort {
  std::string device;      // mlx5_0: ports of the same name on two nodes are the same rail
  uint32_t port = 0;       // 1..255
  std::string link_layer;  // InfiniBand | Ethernet: only equal link layers are paired
  uint32_t lid = 0;
  std::string gid;  // 16 bytes
  uint32_t gid_index = 0;
  uint32_t qpn = 0;
  uint32_t qkey = 0;
  std::string timestamps;
};

struct AgentInfo {
  std::string node;
  std::vector<ProbeEndpoint> endpoints;
  std::vector<RdmaPort> rdma = {};  // empty: no RDMA UD probes to or from this node
};

// A planned RDMA UD target: the local port to probe from and the peer's port.
struct RdmaRoute {
  std::string src_device;
  RdmaPort dst;
};

// The RDMA routes from `src` to `dst`, one per local port that has a port of `dst` on its rail
// (the same device name, else the i-th port of the same link layer), in `src`'s port order.
std::vector<RdmaRoute> RdmaRoutes(const AgentInfo& src, const AgentInfo& dst);

struct PlannerConfig {
  uint64_t seed = 1;
  double coverage = 0.99;            // P(every equal-cost inter-leaf path carries a flow)
  uint32_t max_flows_per_pair = 32;  // above this, more representative pairs share the flows
  uint32_t intra_leaf_flows = 1;     // one path inside a leaf; more only re-test the same path
  double latency_pps_per_flow = 1.0;
  uint32_t latency_probe_bytes = 128;  // wire bytes a latency probe costs the sender, both ways
  double budget_pps = 1000;            // per node, latency probes sent
  double budget_bytes_per_s = 12.5e6;  // per node, all probe bytes sent (100 Mbit/s)
  uint64_t bw_burst_bytes = 4 << 20;
  uint32_t bw_interval_s = 300;  // at least this long between bursts to the same peer
  double bw_budget_share = 0.5;  // part of the byte budget that bandwidth bursts may use
  // All latency results the fleet may send the aggregator per second (its ingest capacity); 0 means
  // no limit. Over it, intra-leaf flows keep at least half, inter-leaf flows slow down first.
  double fleet_results_per_s = 400'000;
  size_t full_mesh_max_nodes = 64;  // without a fabric map: full mesh up to this many nodes
  size_t sampled_peers = 16;        // ... and beyond it, this many peers per node
  Transport latency_transport = Transport::kUdp;
  uint16_t default_port = 9753;
  // Agents trace each planned UDP flow again this often (ProbePlan.trace_refresh_s): under the
  // 15 minutes for which the analyzer trusts a trace, so a path that moved is learnt in time.
  double trace_refresh_s = 600;
  // ProbePlan.probe_timeout_floor_ms: non-zero, every UDP flow's timeout follows its round trip
  // down to this floor (a lost probe is known within it instead of the fixed 1 s, while a building
  // queue lifts the timeouts of the flows through it); 0: the fixed timeout.
  uint32_t probe_timeout_floor_ms = 200;
  // RDMA UD (docs/rdma.md): a node with RDMA ports probes the RDMA ports of the nodes its latency
  // plan names, rail by rail, with up to rdma_max_flows flow labels. Each target (one peer port)
  // gets at most this many probes/s over all its flows: pairs on one leaf are few and tell the
  // most, pairs across leaves (or of unknown path) are many and share the spine links. The fleet
  // cap and the node budget may lower them further, never raise them.
  bool rdma_ud = true;
  // RC write bandwidth (docs/rdma.md): each latency peer that gets bandwidth bursts also gets
  // RC write bursts over RDMA, on the first rail both nodes have (one RC peer per node pair,
  // paid from the same bandwidth share and interval as the TCP bursts). Needs rdma_ud.
  bool rdma_rc = true;
  double rdma_intra_leaf_pps = 10.0;
  double rdma_other_pps = 1.0;
  uint32_t rdma_max_flows = 4;
};

struct PlannedPeer {
  std::string node;
  std::string address;  // the peer's responder address
  uint16_t port = 0;
  std::string src_address;  // the local address to probe from; empty: any
  // The map's NICs at either end (with a map): the agent probes from src_nic's socket, and the
  // results name both, so the analyzer judges each NIC pair on its own rail.
  std::string src_nic, dst_nic;
  // Flow ids 0..flows-1 (at most 65,535). The agent gives each its own source port, which is what
  // spreads the flows over the ECMP paths; each result reports the source port it used.
  uint32_t flows = 1;
  Transport transport = Transport::kUdp;
  double rate_pps = 0;                         // per flow
  PathClass path_class = PathClass::kUnknown;  // what the map says about this NIC pair
  bool bandwidth = true;                       // also gets one bandwidth burst per bw_interval_s
  std::shared_ptr<const RdmaRoute> rdma;       // Transport::kRdmaUd and kRdmaRc only
  // Transport::kRdmaRc, non-zero: one burst now for this qualification round (once per value).
  uint64_t rdma_rc_round = 0;
  // Transport::kUdp, non-zero: each probe waits this long for its echo before it is lost
  // (PlannedPeer.timeout_ms; an escalation's short one, PlanOverlay::probe_timeout_ms); 0: the
  // agent's default.
  uint32_t timeout_ms = 0;
  // Transport::kUdp, per-flow rates (PlannedPeer.raised_flows): non-empty, only these flow ids
  // (sorted, each < flows) probe at rate_pps and the others at unraised_rate_pps (0: the agent's
  // default). Empty: every flow at rate_pps. An escalation raises the flows that crossed its
  // element.
  std::vector<uint32_t> raised_flows;
  double unraised_rate_pps = 0;
};

// A bandwidth burst the agent runs now (a qualification round; fabricwatch.v1.BurstRequest).
struct PlannedBurst {
  std::string node;     // the receiving peer
  std::string address;  // its responder
  uint16_t port = 0;
  uint64_t bytes = 0;
  uint64_t round = 0;  // the agent runs each (round, node) once
  double timeout_s = 0;
  bool operator==(const PlannedBurst&) const = default;
};

struct Budget {
  double pps = 0;
  double bytes_per_s = 0;
};

// A flow to trace ahead of the others (ProbePlan.trace_requests): escalation's suspects.
struct TraceRequest {
  std::string peer;
  uint16_t src_port = 0;  // 0: every flow toward the peer
  uint64_t id = 0;        // the agent traces each id once
};

struct Plan {
  std::vector<PlannedPeer> peers;  // sorted by (node, address)
  std::vector<TraceRequest> trace_requests;
  Budget budget;   // the agent's limits (its token buckets)
  Budget planned;  // what this plan actually uses
  uint32_t bw_interval_s = 0;
  uint64_t bw_burst_bytes = 0;
  std::vector<PlannedBurst> bursts;  // from overlays only
};

struct PlanSummary {
  std::vector<std::string> notes;     // degraded choices a person should know about
  size_t plans = 0;                   // one per live agent, possibly empty
  size_t leaf_pairs_covered = 0;      // ordered leaf pairs with at least one representative
  size_t leaf_pairs_unreachable = 0;  // ordered leaf pairs with live hosts but no switch path
  double base_pps = 0;                // the fleet's latency probes per second before overlays
};

struct PlanSet : PlanSummary {
  std::map<std::string, Plan> plans;  // by node; every live agent has one, possibly empty
};

// Receives each live agent's finished plan, once per agent, in no particular order.
using PlanSink = std::function<void(const std::string& node, Plan&& plan)>;

class Planner {
 public:
  // `map` may be null: then only the map-less mesh is planned.
  Planner(PlannerConfig config, std::shared_ptr<const FabricMap> map);

  // A pure function of the live agents (order does not matter), the map and the seed. Call it
  // again whenever an agent joins or leaves; pairs between agents that stay are mostly kept
  // (rendezvous hashing), so windows survive a re-plan.
  PlanSet PlanFor(const std::vector<AgentInfo>& live) const;

  // The same plans, handed to `sink` as each one is finished instead of all at the end. Only the
  // plans of one leaf (and of nodes whose NICs span leaves not yet reached) exist at a time: at
  // 16,000 agents on 16 spines the whole set is 1.5 million peers, ~300 MB, and a re-plan with
  // full pair windows must not add that to the aggregator's peak.
  //
  // With `only`, the same plans for those nodes alone (live ones; the others are not handed over):
  // only the leaves they are on are planned, so this costs a few leaves instead of the fleet. The
  // summary's base_pps then counts only their plans.
  PlanSummary PlanEach(const std::vector<AgentInfo>& live, const PlanSink& sink,
                       const std::unordered_set<std::string>* only = nullptr) const;

  // Temporary overlays (plan_overlay.h: a qualification's mesh), applied to every plan PlanEach()
  // hands out from the next call on. SetOverlay replaces one with the same id. Thread-safe.
  void SetOverlay(PlanOverlay overlay);
  void ClearOverlay(const std::string& id);

  // The smallest k with S·(1-1/S)^k <= 1 - coverage: k flows hashed uniformly over S equal-cost
  // paths then miss some path with probability at most 1 - coverage. 1 for S <= 1.
  static uint32_t FlowsForCoverage(size_t paths, double coverage);

  // The largest 2^(k/8) (k an integer) that is <= rate_pps; 0 for rates <= 0. Planned rates sit on
  // this grid, so small changes in the live set leave most plans byte-for-byte the same.
  static double QuantizeRate(double rate_pps);

 private:
  struct MapView;
  struct FleetFactors {
    double intra = 1.0;
    double other = 1.0;
  };
  // Representatives and flows for one ordered leaf pair; reps == 0 when there is no switch path.
  struct LeafPairShape {
    uint32_t reps = 0;
    uint32_t flows_each = 0;
  };

  struct FleetDemand;
  using AgentIndex = std::unordered_map<std::string_view, const AgentInfo*>;

  // PlanEach's first pass: what the whole fleet asks for, by path class, without building a
  // single peer. The fleet cap's factors depend on these totals, and every plan needs the factors.
  FleetDemand MeasureDemand(const AgentIndex& agent_of,
                            const std::unordered_map<std::string, Plan>& mesh,
                            PlanSummary& out) const;
  // PlanEach's second pass, one source leaf at a time: a leaf's NICs probe the rest of their leaf
  // and the representatives chosen for them. A node's plan goes to `hand_over` when its last leaf
  // has been planned.
  // With `only`, plans just the leaves its nodes are on and hands over just its nodes.
  void PlanLeaves(FleetDemand& demand, const AgentIndex& agent_of,
                  const std::function<void(const std::string& node, Plan plan)>& hand_over,
                  const std::unordered_set<std::string>* only) const;
  LeafPairShape ShapeOf(const MapView& view, SwitchIndex l1, SwitchIndex l2) const;
  void PlanWithoutMap(const std::vector<const AgentInfo*>& agents,
                      std::unordered_map<std::string, Plan>& plans,
                      std::vector<std::string>& notes) const;
  FleetFactors FleetCap(double intra, double other, std::vector<std::string>& notes) const;
  void Finish(const std::string& node, Plan& plan, const FleetFactors& cap,
              std::vector<std::string>& notes) const;
  // Adds an RDMA UD peer per rail for every node `src`'s latency peers name, where both have RDMA.
  void AddRdmaPeers(const AgentInfo& src, const AgentIndex& agent_of, Plan& plan) const;

  PlannerConfig config_;
  std::shared_ptr<const FabricMap> map_;
  mutable Mutex overlay_mu_;
  std::vector<PlanOverlay> overlays_ FW_GUARDED_BY(overlay_mu_);
};

}  // namespace fw::aggregator
