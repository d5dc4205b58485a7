// The Pingmesh-like probe plan of every simulated agent, with each flow's true ECMP path.
#pragma once

#include <cstdint>
#include <vector>

#include "tests/sim/topology.h"

namespace fw::sim {

inline constexpr uint32_t kProbePort = 9753;
inline constexpr int kMaxTraversals = 8;

// One probed flow. `links` lists every link the probe and its echo traverse, in order (forward path
// then reverse path); the reverse path hashes its own 5-tuple, so it may cross another spine. Only
// the simulator knows these paths; the aggregator sees the candidate set from the fabric map.
struct Flow {
  uint32_t src_host = 0;
  uint32_t dst_host = 0;
  uint16_t rail = 0;
  uint16_t src_port = 0;
  uint32_t flow_id = 0;      // the ProbeResult's flow_id: index within the pair's flows
  uint32_t base_rtt_ns = 0;  // propagation and switching, without queueing or host time
  uint8_t forward_count = 0;
  uint8_t traversal_count = 0;
  bool inter_leaf = false;
  int32_t links[kMaxTraversals] = {};
};

struct FlowPlanSpec {
  int inter_leaf_flows = 4;  // per host and rail, to representatives of other leaves
};

// ECMP: the spine a packet with this 5-tuple takes (a stable hash, as a switch would compute).
int EcmpSpine(uint32_t src_addr_key, uint32_t dst_addr_key, uint16_t src_port, uint16_t dst_port,
              int spines);

// The flows of every host (outer index = host): a full mesh inside the host's leaf on each rail,
// and `inter_leaf_flows` flows per rail to representatives of other leaves, spread so that the
// hosts of a leaf together reach many leaves and every spine.
std::vector<std::vector<Flow>> BuildFlowPlan(const FatTree& tree, const FlowPlanSpec& spec);

}  // namespace fw::sim
