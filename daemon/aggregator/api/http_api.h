// Every HTTP endpoint of the aggregator (see DESIGN.md: /metrics, /healthz, /readyz, /api/v1/...,
// the status page), installed on a server over read-only views of the other stages.
#pragma once

#include <atomic>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/state_file.h"
#include "daemon/aggregator/analysis/analyzer.h"
#include "daemon/aggregator/ingest/fleet_state.h"
#include "daemon/aggregator/ingest/pair_table.h"
#include "exporter/http_server.h"
#include "exporter/registry.h"
#include "exporter/self_metrics.h"

namespace fw::aggregator {

// What the handlers read. Everything must outlive the server; `quarantined` is not changed once
// the server runs.
struct ApiSources {
  metrics::Registry& registry;
  metrics::SelfMetrics& self;
  const std::atomic<bool>& ready;
  const std::vector<QuarantinedFile>& quarantined;
  const FleetState& fleet;
  const PairTable& pairs;
  const analysis::Analyzer& analyzer;
  const Clock& clock;
  std::string_view version;
};

void InstallApiHandlers(http::Server& server, const ApiSources& sources);

}  // namespace fw::aggregator
