// JSON rendering of findings and links.
#include "daemon/aggregator/api/analysis_json.h"

#include "common/clock.h"
#include "common/finding_json.h"

namespace fw::analysis {

nlohmann::json TrackedFindingToJson(const TrackedFinding& f) {
  nlohmann::json j = FindingToJson(f.finding);
  j["id"] = f.id;
  j["active"] = f.active;
  j["first_seen"] = FormatRfc3339(f.first_seen_ns);
  j["last_seen"] = FormatRfc3339(f.last_seen_ns);
  return j;
}

StatusOr<FindingsQuery> ParseFindingsQuery(std::string_view qs) {
  FindingsQuery q;
  while (!qs.empty()) {
    const size_t amp = qs.find('&');
    const std::string_view part = qs.substr(0, amp);
    qs = amp == std::string_view::npos ? std::string_view() : qs.substr(amp + 1);
    const size_t eq = part.find('=');
    const std::string_view key = part.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? "" : part.substr(eq + 1);
    if (key != "active") continue;
    if (value == "true" || value == "1" || value.empty()) {
      q.active_only = true;
    } else if (value == "false" || value == "0") {
      q.active_only = false;
    } else {
      return Status::InvalidArgument("query parameter 'active': expected true or false, got '" +
                                     std::string(value.substr(0, 64)) + "'");
    }
  }
  return q;
}

nlohmann::json RenderFindings(const Analyzer& analyzer, const FindingsQuery& q) {
  nlohmann::json out = nlohmann::json::array();
  for (const TrackedFinding& f : analyzer.Findings(q.active_only)) {
    out.push_back(TrackedFindingToJson(f));
  }
  return out;
}

nlohmann::json RenderLinks(const std::vector<LinkView>& links) {
  nlohmann::json out = nlohmann::json::array();
  for (const LinkView& l : links) {
    nlohmann::json row = {{"id", l.id},
                          {"a", l.a},
                          {"b", l.b},
                          {"a_tier", l.a_tier},
                          {"b_tier", l.b_tier},
                          {"state", l.state},
                          {"loss_ratio", l.loss_ratio},
                          {"latency_inflation", nullptr},
                          {"bandwidth_ratio", nullptr},
                          {"probes", l.probes},
                          {"confidence", l.confidence}};
    if (l.latency_inflation > 0) row["latency_inflation"] = l.latency_inflation;
    if (l.bandwidth_ratio > 0) row["bandwidth_ratio"] = l.bandwidth_ratio;
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace fw::analysis
