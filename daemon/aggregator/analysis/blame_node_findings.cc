// Node-finding level: the agents' own check findings (node hardware) are passed on as observations.
#include "daemon/aggregator/analysis/blamer.h"

namespace fw::analysis::blame {

void Blamer::NodeFindingLevel() {
  for (const auto& [node, list] : ev_.node_findings) {
    for (const Finding& f : list) {
      Emit("check:" + node + "/" + f.kind + "/" + f.location.id, f, false);
    }
  }
}

}  // namespace fw::analysis::blame
