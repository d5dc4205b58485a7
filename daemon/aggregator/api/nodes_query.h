// Query parameters of GET /api/v1/nodes.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace fw::aggregator {

struct NodesQuery {
  std::string name;       // non-empty: only the node of this name ([] when there is none)
  bool topology = false;  // `topology=true`: inventory.affinity and inventory.pcie on every node

  // The affinity matrix and PCIe rows are several KB per node, so the fleet-wide list leaves them
  // out unless asked; a query for one node always has them.
  bool WithTopology() const { return topology || !name.empty(); }
};

// Parses "name=node01&topology=true" (percent-encoding allowed; a leading '?' is skipped).
// Unknown parameters are ignored; a `topology` other than true/false/1/0/empty is an
// InvalidArgument naming the parameter.
StatusOr<NodesQuery> ParseNodesQuery(std::string_view query_string);

}  // namespace fw::aggregator
