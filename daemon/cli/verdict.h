// Verdicts of the `fabricwatch` verbs: pure functions over the aggregator's JSON documents, so
// that text and JSON output share one exit code (Nagios/NHC: 0 ok, 1 warning, 2 critical,
// 3 unknown or error).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace fw::cli {

enum Verdict : int { kOk = 0, kWarning = 1, kCritical = 2, kUnknown = 3 };

// "OK", "WARNING", "CRITICAL", "UNKNOWN".
const char* VerdictWord(int verdict);
// "ok", "warning", "critical", "unknown" (the finding and node-health vocabulary).
const char* VerdictName(int verdict);

// An active finding's verdict by severity (critical → 2, anything else → 1); inactive → 0.
int FindingVerdict(const nlohmann::json& finding);

// `nodes`: the worst of every node's health (warning → 1, critical → 2, unknown → 1: its agent
// could not check the node) and 1 for a node whose agent is disconnected. A node that has sent
// no check report yet (empty health) counts as ok.
int NodesVerdict(const nlohmann::json& nodes);

// `findings`: the worst active finding.
int FindingsVerdict(const nlohmann::json& findings);

// `links`: down → 2; degraded, flapping, congested → 1; ok and unknown → 0.
int LinksVerdict(const nlohmann::json& links);

// Whether a finding located on a node pair ("a~b") concerns the pairs `pairs` lists with these
// filters (empty: any). Directions are ignored: a pair finding names both directions.
bool PairFindingMatches(const nlohmann::json& finding, const std::string& src,
                        const std::string& dst);
// `pairs`: the worst active pair finding that PairFindingMatches. The verdict comes from the
// aggregator's analysis (which needs several flows and windows), not from one window's numbers.
int PairsVerdict(const nlohmann::json& findings, const std::string& src, const std::string& dst);

// `topo NODE`: the worst active finding located on the node (any kind: pcie_downtrained,
// gpu_nic_locality, port errors, host_network, ...), and at least 1 when its agent is
// disconnected (what is shown is then its last report).
int TopoVerdict(const nlohmann::json& node, const nlohmann::json& findings);

// `status`: critical findings → 2; warning findings or a disconnected agent → 1.
int StatusVerdict(const nlohmann::json& nodes, const nlohmann::json& active_findings);

}  // namespace fw::cli
