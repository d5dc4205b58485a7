// Query parsing for GET /api/v1/nodes.
#include "daemon/aggregator/nodes_query.h"

#include "daemon/aggregator/core/pairs_json.h"

namespace fw::aggregator {

StatusOr<NodesQuery> ParseNodesQuery(std::string_view qs) {
  NodesQuery q;
  if (!qs.empty() && qs.front() == '?') qs.remove_prefix(1);
  while (!qs.empty()) {
    const size_t amp = qs.find('&');
    const std::string_view part = qs.substr(0, amp);
    qs = amp == std::string_view::npos ? std::string_view() : qs.substr(amp + 1);
    const size_t eq = part.find('=');
    const std::string key = DecodeQueryComponent(part.substr(0, eq));
    const std::string value =
        eq == std::string_view::npos ? "" : DecodeQueryComponent(part.substr(eq + 1));
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
