// The fleet's ingest bookkeeping (sessions, sequence numbers, dedup) kept across restarts in
// <state-dir>/ingest_state.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/state_file.h"
#include "daemon/aggregator/ingest/fleet_state.h"

namespace fw::aggregator {

// "" without a state dir.
std::string IngestStatePath(const std::string& state_dir);

// Restores `fleet` from `path` when it exists. A file that does not parse costs dedup history,
// not availability: it is moved aside (the result says where) and the fleet starts fresh.
std::optional<QuarantinedFile> LoadIngestState(FleetState& fleet, const std::string& path,
                                               int64_t wall_ns);

// Writes `fleet`'s ingest state to `path` through a temporary file and a rename; logs a failure.
void SaveIngestState(const FleetState& fleet, const std::string& path);

}  // namespace fw::aggregator
