// Node-finding level: the agents' own check findings (node hardware) and the findings other
// aggregator stages hold (collective probes) are passed on as observations.
#include "daemon/aggregator/analysis/blamer.h"

namespace fw::analysis::blame {

void Blamer::NodeFindingLevel() {
  for (const auto& [node, list] : ev_.node_findings) {
    for (const Finding& f : list) {
      Emit("check:" + node + "/" + f.kind + "/" + f.location.id, f, false);
    }
  }
  for (const auto& [source, list] : ev_.source_findings) {
    for (const Finding& f : list) Emit(source + ":" + f.kind + "/" + f.location.id, f, false);
  }
}

}  // namespace fw::analysis::blame
