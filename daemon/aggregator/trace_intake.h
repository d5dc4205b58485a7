// Path traces from the agents into the analyzer: each report checked (ingest/path_trace_wire.h),
// its traces recorded in the analyzer's TracedPaths, outcomes and refusals counted.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "common/clock.h"
#include "daemon/aggregator/analysis/traced_paths.h"
#include "daemon/aggregator/ingest/path_trace_wire.h"
#include "daemon/aggregator/plan/fabric_map.h"
#include "exporter/registry.h"
#include "fabricwatch.pb.h"

namespace fw::aggregator {

// Thread-safe: called on gRPC threads.
class TraceIntake {
 public:
  // `traced` is the analyzer's table; null without a fabric map, when every trace is refused as
  // "no_map" (a path means nothing without one).
  // `map` names the prober of an echo trace that came without its name, by the prober's address
  // (the map's host NICs); without it such traces are refused as "peer".
  TraceIntake(analysis::TracedPaths* traced, const Clock& clock, metrics::Registry& registry,
              const FabricMap* map = nullptr);

  // The traces `node` reported, for its own flows: `node` is the source of each.
  void OnReport(const std::string& node, const fabricwatch::v1::PathTraceReport& report);

 private:
  // One refusal reason more than TraceRefusal: no map.
  static constexpr size_t kNoMap = kTraceRefusalCount;
  void Refuse(size_t reason, uint64_t n, const std::string& node);

  analysis::TracedPaths* traced_;
  const Clock& clock_;
  std::unordered_map<uint32_t, std::string> node_at_v4_;  // host NIC address (host order) -> node
  std::array<metrics::Counter*, 4> outcomes_{};  // by TraceOutcome::Kind
  std::array<metrics::Counter*, kTraceRefusalCount + 1> refused_{};
};

}  // namespace fw::aggregator
