// The body of POST /api/v1/collectives/pause and /resume: {"nodes": ["gpu001", ...]}. The node
// list is expanded by the client (the CLI reads Slurm hostlists); the aggregator takes names only.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fw::aggregator::collective {

inline constexpr size_t kMaxPauseNodes = 65536;
inline constexpr size_t kMaxPauseBodyBytes = 4 << 20;

// Node names, in order, duplicates removed. kInvalidArgument (with the reason) for a body that is
// not JSON, has no "nodes" array, holds a name that is not a non-empty string of at most 253
// bytes, or holds more than kMaxPauseNodes names; never throws.
StatusOr<std::vector<std::string>> ParsePauseRequest(std::string_view body);

}  // namespace fw::aggregator::collective
