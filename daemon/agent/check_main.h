// `fabricwatch-agent check`: the one-shot node check, bridged to the node-checks library, and its
// Slurm HealthCheckProgram mode (NHC style: drain this node on a critical result, when asked).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "daemon/agent/agent.h"

namespace CLI {
class App;
}

namespace fw::agent {

// What the health-check mode adds to `check`. Without `drain` the check never changes anything.
struct HealthCheckOptions {
  // On a critical result, run `scontrol update NodeName=<slurm_node> State=DRAIN Reason=...`.
  // This is the only place fabricwatch calls scontrol, and only with --drain-on-critical.
  bool drain = false;
  std::string slurm_node;             // empty: --node-name, else the short hostname
  std::string scontrol = "scontrol";  // the program run (a path, or looked up in PATH)
  // The aggregator's HTTP API (HOST:PORT): its active critical findings located on this node count
  // as critical too (host_network, nic_down, ...). Empty: the local checks only. An aggregator that
  // cannot be reached adds nothing and says so; it never drains a node by itself.
  std::string api;
  int api_timeout_ms = 3000;
};

// Registers --drain-on-critical, --slurm-node, --scontrol and --api on the `check` subcommand.
void AddHealthCheckFlags(CLI::App* check, HealthCheckOptions* hc);

// Runs every local check with the agent's discovery flags and prints the report in `format`
// (text|json). Returns the Nagios-style exit code: 0 ok, 1 warning, 2 critical, 3 unknown/error.
int RunCheckCommand(const AgentOptions& options, const std::string& format, std::ostream& out);
// The same, plus the health-check mode above; `err` gets one line per action taken or refused.
int RunCheckCommand(const AgentOptions& options, const std::string& format,
                    const HealthCheckOptions& hc, std::ostream& out, std::ostream& err);

// The drain reason Slurm shows (`sinfo -R`): "fabricwatch: <first critical summary> (+N more)",
// without characters scontrol's parser treats specially, at most `max_len` bytes.
std::string DrainReason(const std::vector<std::string>& critical_summaries, size_t max_len = 200);

}  // namespace fw::agent
