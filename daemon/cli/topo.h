// `fabricwatch topo NODE`: a node's GPU↔NIC affinity matrix and PCIe link state, from the
// aggregator's inventory (/api/v1/nodes) and the node's active findings.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace fw::cli {

// Builds the report both formats print:
//   {node, connected, health, last_seen, source,
//    gpus: [{name, bdf, numa_node, best_nic, affinity_class}],
//    nics: [{device, netdev, bdf, numa_node, fabric}],
//    affinity: {nics: [names], rows: [{gpu, classes: [class per NIC]}]} or null (no check report),
//    pcie: [{bdf, role, for, present, current_speed_gts, max_speed_gts, current_width, max_width,
//            state, severity}] or null,
//    findings: [the node's active findings], verdict, exit_code}
// `state` is "ok", "downtrained" (an active pcie_downtrained finding names the link; `severity`
// is that finding's), "idle_speed" (speed below maximum on a link allowed to slow when idle, with
// no finding) or "no_data". `node` is one element of /api/v1/nodes; `active_findings` is
// /api/v1/findings?active=true. The verdict is TopoVerdict (verdict.h).
nlohmann::json TopoReport(const nlohmann::json& node, const nlohmann::json& active_findings);

// The report for people: the matrix as `nvidia-smi topo -m` prints its GPU rows (NIC columns,
// NUMA affinity, legend), then the PCIe links with current/max speed and width, a mark on
// downtrained links, the node's findings and the verdict line.
std::string TopoText(const nlohmann::json& report);

}  // namespace fw::cli
