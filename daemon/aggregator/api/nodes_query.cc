// Query parsing for GET /api/v1/nodes.
#include "daemon/aggregator/api/nodes_query.h"

#include "daemon/aggregator/api/query_string.h"

namespace fw::aggregator {

StatusOr<NodesQuery> ParseNodesQuery(std::string_view qs) {
  NodesQuery q;
  for (const auto& [key, value] : ParseQueryString(qs)) {
    if (key == "name") {
      q.name = value;
    } else if (key == "topology") {
      if (value == "true" || value == "1" || value.empty()) {
        q.topology = true;
      } else if (value == "false" || value == "0") {
        q.topology = false;
      } else {
        return Status::InvalidArgument("query parameter 'topology': expected true or false, got '" +
                                       value.substr(0, 64) + "'");
      }
    }
  }
  return q;
}

}  // namespace fw::aggregator
