// The JSON report of a run: ingest figures, stream accounting, the findings score and the verdict.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tests/sim/agent_pool.h"
#include "tests/sim/aggregator_process.h"
#include "tests/sim/scorer.h"

namespace fw::sim {

struct ReportInputs {
  std::string mode, name;
  int agents = 0;
  double connect_s = 0;
  IngestSnapshot before;                       // before any stream opened
  std::optional<IngestSnapshot> window_start;  // the measured ingest window
  std::optional<IngestSnapshot> window_end;
  std::optional<IngestSnapshot> after;             // after every stream closed
  std::optional<ProcSample> self_start, self_end;  // the simulator's own CPU over the window
  PoolStats streaming;                             // at window_end
  PoolStats final_stats;                           // after every stream closed
};

// Adds "streams", "ingest", "accounting" and a "verdict" whose failures cover what exists now:
// every stream connected and stayed up, and the aggregator counted exactly the results written.
nlohmann::json BuildIngestReport(const ReportInputs& in);

// Adds "findings" and the accuracy checks to the verdict. While /api/v1/findings is missing, the
// accuracy checks are listed under verdict.pending instead of failing.
void AddFindingsReport(const nlohmann::json& poll, const Score& score,
                       const std::vector<ObservedFinding>& findings, bool healthy,
                       nlohmann::json& report);

// One line per figure, for people.
std::string FormatReport(const nlohmann::json& report);

}  // namespace fw::sim
