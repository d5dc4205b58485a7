// Converts the node-checks library's results into the wire messages the agent sends.
#pragma once

#include "daemon/agent/node/node_metrics.h"
#include "fabricwatch.pb.h"

namespace fw::agent {

fabricwatch::v1::Inventory InventoryToProto(const NodeInventory& inventory);
fabricwatch::v1::Finding FindingToProto(const Finding& finding);
// Per-port rates; unknown rates (first pass, reset, saturation) are sent as NaN, never as 0.
fabricwatch::v1::CounterBatch CounterBatchToProto(const NodeSnapshot& snapshot);
// The full check document plus its findings and verdict.
fabricwatch::v1::CheckReport CheckReportToProto(const NodeSnapshot& snapshot);

}  // namespace fw::agent
