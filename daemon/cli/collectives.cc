// The collectives verb.
#include "daemon/cli/collectives.h"

#include <nlohmann/json.hpp>

#include "daemon/cli/api_client.h"

namespace fw::cli {

using nlohmann::json;

namespace {
std::string Join(const json& names) {
  std::string s;
  if (!names.is_array()) return s;
  for (const json& n : names) {
    if (!n.is_string()) continue;
    if (!s.empty()) s += ",";
    s += n.get<std::string>();
  }
  return s.empty() ? "-" : s;
}
}  // namespace

int RunCollectivesPause(const Options& o, bool pause, const std::vector<std::string>& nodes,
                        std::ostream& out, std::ostream& err) {
  const char* verb = pause ? "pause" : "resume";
  const std::string target = std::string("/api/v1/collectives/") + verb;
  // Through the API client so --user/--password-file and https:// apply: both endpoints require
  // authentication when the aggregator's web config has users.
  auto r = ApiFetch(o, "POST", target, json{{"nodes", nodes}}.dump(), o.timeout_ms);
  if (!r.ok()) {
    err << "fabricwatch: could not " << verb << " collective probes: " << r.status().message()
        << "\n";
    return 3;
  }
  const json body = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (r->status != 200 || !body.is_object()) {
    std::string why = body.is_object() && body.contains("error") && body["error"].is_string()
                          ? body["error"].get<std::string>()
                          : r->body.substr(0, 300);
    why += r->status == 404 ? " (an aggregator without collective probes?)"
                            : HttpStatusHint(o, r->status);
    err << "fabricwatch: could not " << verb << " collective probes: POST " << target
        << " answered HTTP " << r->status << ": " << why << "\n";
    return 3;
  }
  if (o.format == "json") {
    out << body.dump(1) << "\n";
    return 0;
  }
  const json changed = body.value("changed", json::array());
  out << (pause ? "paused" : "resumed") << " collective probes on " << nodes.size() << " node"
      << (nodes.size() == 1 ? "" : "s") << " (" << (changed.is_array() ? changed.size() : 0)
      << " changed: " << Join(changed) << "); paused now: " << Join(body.value("paused", json()))
      << "\n";
  return 0;
}

}  // namespace fw::cli
