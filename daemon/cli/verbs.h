// The verbs of `fabricwatch`: each fetches what it needs from the aggregator's HTTP API, prints
// text or JSON, and returns its verdict as the exit code (verdict.h). Text and JSON output of one
// verb always share one verdict.
#pragma once

#include <ostream>
#include <string>

#include "daemon/cli/api_client.h"

namespace fw::cli {

// Errors (unreachable API, HTTP error, bad JSON, unknown node) go to `err` with the reason, and
// the verb returns 3.
int RunStatus(const Options& o, std::ostream& out, std::ostream& err);
int RunNodes(const Options& o, std::ostream& out, std::ostream& err);
int RunFindings(const Options& o, bool include_resolved, std::ostream& out, std::ostream& err);
int RunLinks(const Options& o, std::ostream& out, std::ostream& err);
int RunPairs(const Options& o, const std::string& src, const std::string& dst, std::ostream& out,
             std::ostream& err);
int RunTopo(const Options& o, const std::string& node, std::ostream& out, std::ostream& err);

}  // namespace fw::cli
