// Renders a Finding as JSON.
#include "common/finding_json.h"

namespace fw {

nlohmann::json FindingToJson(const Finding& finding) {
  nlohmann::json location = {{"type", finding.location.type},
                             {"id", finding.location.id},
                             {"node", finding.location.node}};
  if (!finding.location.device.empty()) location["device"] = finding.location.device;
  if (finding.location.port > 0) location["port"] = finding.location.port;
  nlohmann::json evidence = nlohmann::json::object();
  for (const auto& [key, value] : finding.evidence) evidence[key] = value;
  return {{"kind", finding.kind}, {"severity", SeverityName(finding.severity)},
          {"location", location}, {"summary", finding.summary},
          {"evidence", evidence}, {"confidence", finding.confidence}};
}

}  // namespace fw
