// How the simulated agents follow their probe plans: each simulated flow probes at the per-flow
// rate its agent's latest plan gives the peer it targets, so a fleet sends what the aggregator
// planned (the fleet cap's scaled rates included), and an escalation adds only what it raises.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "fabricwatch.pb.h"
#include "tests/sim/delivery.h"
#include "tests/sim/flows.h"
#include "tests/sim/link_model.h"
#include "tests/sim/topology.h"

namespace fw::sim {

// One agent's rates from its latest plan. Before any plan: every flow at 1 probe/s.
struct FollowedRates {
  // The planned per-flow UDP rate toward a host on one rail (key host * kMaxRails + rail): a
  // per-NIC plan holds one entry per rail toward a peer, each at the peer NIC's address, and an
  // escalation raises only the rail it suspects (PlanOverlay::nics).
  std::unordered_map<int, double> rail_rate;
  // ...and toward a host whatever the rail, for entries whose address is none of the host's NICs'
  // (the highest of them).
  std::unordered_map<int, double> rate;
  // The baseline of each path class (the peers in the agent's leaf, intra, and outside it, inter):
  // the plan's lowest per-flow UDP rate over the class's peers that no trace request names. The
  // planner gives every peer of a class one rate (the fleet cap scales the two classes by
  // different factors; the node budget and the rate grid scale all alike), and an escalation only
  // raises the peers it names in trace requests. A class whose every peer is named (an escalated
  // host, a small leaf) takes the other class's baseline. (A median over all peers, as before,
  // read the fleet cap's scaled inter-leaf rate as every in-leaf peer escalated.)
  double base_intra = 1.0;
  double base_inter = 1.0;
  // How long a probe waits for its echo before the agent reports it lost, seconds, keyed as the
  // rates: an entry's own PlannedPeer.timeout_ms (an escalated pair's short one), else the plan's
  // probe_timeout_ms, else the agent's default; the shortest of the entries that match a flow.
  std::unordered_map<int, double> rail_timeout_s;
  std::unordered_map<int, double> timeout_s;
  double default_timeout_s = kProbeTimeoutS;  // a flow no entry with a rate names
  // ProbePlan.probe_timeout_floor_ms: non-zero, each flow's timeout follows its round trip
  // (net::ProbeTimeout) between this floor and the timeout above, as the agent's prober does.
  double timeout_floor_s = 0;

  // Flows an entry raises by id (PlannedPeer.raised_flows) toward a host on a rail, keyed by
  // FlowKey (rail -1: the entries whose address is none of the host's NICs'): their rate. The
  // entry's other flows are at its unraised rate, in `rail_rate` or `rate`.
  std::unordered_map<uint64_t, double> flow_rate;
  static uint64_t FlowKey(uint32_t host, int rail, uint32_t flow_id) {
    return (uint64_t{host} << 40) | (static_cast<uint64_t>(rail + 1) << 32) | flow_id;
  }

  // The rate at which `f` (a flow of this agent) probes, and the baseline of its class.
  double RateOf(const Flow& f) const {
    double raised = 0;
    if (!flow_rate.empty()) {
      for (int rail : {static_cast<int>(f.rail), -1}) {
        auto x = flow_rate.find(FlowKey(f.dst_host, rail, f.flow_id));
        if (x != flow_rate.end()) raised = std::max(raised, x->second);
      }
    }
    auto r = rail_rate.find(static_cast<int>(f.dst_host) * kMaxRails + f.rail);
    auto it = rate.find(static_cast<int>(f.dst_host));
    if (r != rail_rate.end()) {
      return std::max(raised, it != rate.end() ? std::max(r->second, it->second) : r->second);
    }
    return std::max(raised, it != rate.end() ? it->second : BaseOf(f));
  }
  double BaseOf(const Flow& f) const { return f.inter_leaf ? base_inter : base_intra; }
  // `f`'s probe timeout, seconds.
  double TimeoutOf(const Flow& f) const {
    auto r = rail_timeout_s.find(static_cast<int>(f.dst_host) * kMaxRails + f.rail);
    auto it = timeout_s.find(static_cast<int>(f.dst_host));
    if (r != rail_timeout_s.end()) {
      return it != timeout_s.end() ? std::min(r->second, it->second) : r->second;
    }
    return it != timeout_s.end() ? it->second : default_timeout_s;
  }
  // Whether the plan raises `f` above its class's baseline (an escalation; 1% for rounding).
  bool Raised(const Flow& f) const { return RateOf(f) > BaseOf(f) * 1.01; }
};

// The rates `plan` asks of agent `agent`'s flows (hosts the tree does not know are skipped).
FollowedRates RatesFromPlan(const FatTree& tree, int agent, const fabricwatch::v1::ProbePlan& plan);

// What one agent sends for one simulated second: each flow of `flows` `floor(r)` times, and once
// more with probability frac(r) (r its rate; no draw when r is whole, so plans at whole rates draw
// nothing; a raised flow draws once, whole or not). `out` gets the copies in flow order; `base` and
// `extra` (both added to) split them into the class baselines' expected share and what the raised
// rates add.
void ExpandFlows(const std::vector<Flow>& flows, const FollowedRates& rates, Rng& rng,
                 std::vector<Flow>& out, double* base, double* extra);

// The latest plan of every simulated agent, and the peers its trace requests ask to trace again.
// Plans arrive on gRPC threads; the generator reads per agent between its batches.
class PlanFollower {
 public:
  PlanFollower(const FatTree& tree, int agents)
      : tree_(tree), agents_(static_cast<size_t>(agents)) {}

  void OnPlan(int agent, const fabricwatch::v1::ProbePlan& plan);

  // The agent's rates (shared, immutable: taking them copies no map), the peers to trace again
  // (taken) and the report interval its last plan set (0: none yet).
  void Take(int agent, std::shared_ptr<const FollowedRates>* rates, std::set<int>* retrace,
            uint32_t* report_ms);

 private:
  struct Agent {
    Mutex mu;
    std::shared_ptr<const FollowedRates> rates FW_GUARDED_BY(mu) =
        std::make_shared<const FollowedRates>();
    std::set<int> retrace FW_GUARDED_BY(mu);
    std::set<uint64_t> trace_ids FW_GUARDED_BY(mu);
    uint64_t plans FW_GUARDED_BY(mu) = 0;
    uint32_t report_ms FW_GUARDED_BY(mu) = 0;
  };
  const FatTree& tree_;
  std::vector<Agent> agents_;
};

}  // namespace fw::sim
