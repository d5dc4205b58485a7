// `fabricwatch qualify`: ask the aggregator to qualify a set of nodes (POST /api/v1/qualify),
// print the per-node and per-pair verdicts, and exit 0 pass / 1 warn / 2 fail / 3 could not
// qualify (aggregator unreachable, an error, or the timeout came before every verdict).
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/cli/verbs.h"

namespace fw::cli {

struct QualifyArgs {
  std::vector<std::string> nodes;  // expanded (hostlist.h)
  std::string profile;             // empty: the aggregator's default
  double timeout_s = 30;           // the suite's time box, enforced by the aggregator
  std::string suite = "quick";     // quick | full
  // Non-empty: the exit code is this node's own (a Slurm prolog on each node of a job asks for
  // the whole job's set and fails only on its own node, so Slurm drains that node).
  std::string verdict_for;
  // The scheduler's job id: the aggregator answers every request of one job for the same set
  // with one run (each node's prolog asks for the whole set).
  std::string job;
};

// The node set from --nodes (a hostlist) and/or --nodes-file (read up to the hostlist's input
// limit), merged in order without duplicates, refused beyond `max_nodes`. Errors name the flag.
StatusOr<std::vector<std::string>> ResolveQualifyNodes(const std::string& nodes_flag,
                                                       const std::string& nodes_file,
                                                       size_t max_nodes);

// The request body of POST /api/v1/qualify.
nlohmann::json QualifyRequestJson(const QualifyArgs& a);

// The exit code of a report: 3 unless its state is "done" (a timeout, a refusal, a partial
// report); otherwise the worst node or pair verdict (pass 0, warn 1, fail 2, unknown 3), and never
// less than the report's own exit_code.
int QualifyReportVerdict(const nlohmann::json& report);

// The exit code for one node of a report: 3 unless the report is done or when `node` is not in
// it; else the node's verdict, raised to at most 1 by failed pairs that involve it (a bad pair is
// a path problem: neither end alone should be drained for it).
int QualifyNodeVerdict(const nlohmann::json& report, const std::string& node);

// Text rendering: a summary line, the node table with reasons, the pairs not explained by a failed
// node, and what each step of the suite did.
void PrintQualifyReport(const nlohmann::json& report, std::ostream& out);

// POSTs the request and waits for the report: the HTTP wait is the suite's timeout plus a margin,
// so a report that comes late because the aggregator hangs still ends in exit 3 with a reason.
int RunQualify(const Options& o, const QualifyArgs& a, std::ostream& out, std::ostream& err);

}  // namespace fw::cli
