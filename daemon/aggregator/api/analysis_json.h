// JSON views of the analyzer for GET /api/v1/findings and GET /api/v1/links.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/aggregator/analysis/analyzer.h"

namespace fw::analysis {

// The DESIGN.md finding schema: {id, kind, severity, active, location{type,id,node,device,port},
// summary, evidence{}, confidence, first_seen, last_seen} with RFC3339 times.
nlohmann::json TrackedFindingToJson(const TrackedFinding& f);

struct FindingsQuery {
  bool active_only = false;
};
// Parses the query string of /api/v1/findings ("active=true"). Unknown parameters are ignored;
// a bad value of `active` is an InvalidArgument naming it.
StatusOr<FindingsQuery> ParseFindingsQuery(std::string_view query_string);

// [finding]: active ones first (critical first), then resolved ones, newest first.
nlohmann::json RenderFindings(const Analyzer& analyzer, const FindingsQuery& q);

// [{id, a, b, a_tier, b_tier, state, loss_ratio, latency_inflation, bandwidth_ratio, probes,
// confidence}]; a_tier and b_tier are the map's switch tiers ("host" for the NIC end of an access
// link); latency_inflation and bandwidth_ratio are null when nothing measured them.
nlohmann::json RenderLinks(const std::vector<LinkView>& links);

}  // namespace fw::analysis
