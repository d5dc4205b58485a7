// The agents' wire messages turned into the aggregator's own types, for the other stages: port
// counter samples, check findings, and the live agents the planner plans for.
#pragma once

#include <string>
#include <vector>

#include "common/finding.h"
#include "daemon/aggregator/ingest/fleet_state.h"
#include "daemon/aggregator/model/port_sample.h"
#include "daemon/aggregator/plan/planner.h"
#include "fabricwatch.pb.h"

namespace fw::aggregator {

// One sample per port of the batch; a non-finite rate becomes 0, a port is up when ACTIVE.
std::vector<PortSample> PortSamplesFromWire(const std::string& node,
                                            const fabricwatch::v1::CounterBatch& batch);

// The report's findings, each located on `node` whatever the agent claimed (an agent may only
// report about its own node); non-finite evidence is dropped, confidence clamped to [0, 1].
std::vector<Finding> FindingsFromWire(const std::string& node,
                                      const fabricwatch::v1::CheckReport& report);

// The connected, up agents with their usable UDP endpoints, in `nodes` order.
std::vector<AgentInfo> LiveAgents(const std::vector<NodeView>& nodes);

}  // namespace fw::aggregator
