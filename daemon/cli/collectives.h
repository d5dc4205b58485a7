// The collectives verb: pause and resume collective probes on nodes (a scheduler's prolog and
// epilog call it around a job, so probes never compete with the job for its NICs and GPUs).
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "daemon/cli/verbs.h"

namespace fw::cli {

// The most nodes one request names (the aggregator's bound).
inline constexpr size_t kMaxCollectiveNodes = 65536;

// POSTs {"nodes": [...]} to /api/v1/collectives/pause (or /resume). Prints the nodes whose state
// changed and the nodes paused now (text), or the aggregator's answer (json). 0 on success;
// 3 when the aggregator is unreachable or refuses (the reason on `err`).
int RunCollectivesPause(const Options& o, bool pause, const std::vector<std::string>& nodes,
                        std::ostream& out, std::ostream& err);

}  // namespace fw::cli
