// Parsing the pause/resume request body.
#include "daemon/aggregator/collective/pause_request.h"

#include <nlohmann/json.hpp>
#include <set>

namespace fw::aggregator::collective {

StatusOr<std::vector<std::string>> ParsePauseRequest(std::string_view body) {
  if (body.size() > kMaxPauseBodyBytes) {
    return Status::InvalidArgument("the request body is larger than 4 MiB");
  }
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("the request body is not JSON");
  if (!j.is_object() || !j.contains("nodes") || !j["nodes"].is_array()) {
    return Status::InvalidArgument("POST a JSON body {\"nodes\": [\"node\", ...]}");
  }
  const nlohmann::json& nodes = j["nodes"];
  if (nodes.size() > kMaxPauseNodes) {
    return Status::InvalidArgument("more than " + std::to_string(kMaxPauseNodes) + " nodes");
  }
  std::vector<std::string> out;
  std::set<std::string, std::less<>> seen;
  for (const nlohmann::json& n : nodes) {
    if (!n.is_string()) return Status::InvalidArgument("every node must be a string");
    const std::string& name = n.get_ref<const std::string&>();
    if (name.empty() || name.size() > 253) {
      return Status::InvalidArgument("a node name is empty or longer than 253 bytes");
    }
    if (seen.insert(name).second) out.push_back(name);
  }
  return out;
}

}  // namespace fw::aggregator::collective
