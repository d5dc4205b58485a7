// `fabricwatch-agent check`: the one-shot node check, bridged to the node-checks library.
#pragma once

#include <ostream>
#include <string>

#include "daemon/agent/agent.h"

namespace fw::agent {

// Runs every local check with the agent's discovery flags and prints the report in `format`
// (text|json). Returns the Nagios-style exit code: 0 ok, 1 warning, 2 critical, 3 unknown/error.
int RunCheckCommand(const AgentOptions& options, const std::string& format, std::ostream& out);

}  // namespace fw::agent
