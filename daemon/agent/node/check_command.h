// `fabricwatch-agent check`: one-shot local node checks (topology, PCIe, ports, counters, profile).
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/finding.h"
#include "common/status.h"
#include "probes/counters/port_checks.h"
#include "probes/counters/sampler.h"
#include "probes/topology/affinity.h"
#include "probes/topology/pcie_link.h"
#include "probes/topology/profile.h"
#include "probes/topology/topology.h"

namespace fw::agent {

struct CheckOptions {
  std::string sysfs_root = "/sys";
  std::string hwloc_xml;        // empty: live hwloc discovery
  std::string profile;          // built-in name or YAML file; empty: "generic"
  std::string format = "text";  // text | json
  std::string node_name;        // empty: the hostname
  // Two counter passes this far apart give rates (climbing errors, congestion); 0 takes a single
  // snapshot, which still reports port state and saturated counters.
  std::chrono::milliseconds counter_interval{1000};
  double xmit_wait_tick_bytes = 8.0;
  // Read PFC/pause counters of each port's netdev through ethtool (kept as group "ethtool").
  bool read_pause_counters = true;
  counters::PortCheckOptions port_checks;
};

// Everything the node knows about itself after one check.
struct NodeInventory {
  std::string node;
  std::string profile;  // the profile's name
  topology::NodeTopology topology;
  topology::Affinity affinity;           // over the fabric NICs hwloc sees
  std::vector<std::string> fabric_nics;  // devices the profile counts as fabric
  std::vector<topology::PcieLink> pcie;
  std::vector<topology::PortFacts> port_facts;
};

struct NodeCheckResult {
  NodeInventory inventory;
  std::vector<counters::PortSample> ports;  // the last counter pass
  std::vector<Finding> findings;            // sorted, critical first
};

// `name` or, when empty, the hostname.
std::string NodeNameOrHostname(const std::string& name);
// Assembles the inventory: port facts, the fabric NICs the profile selects, the affinity over
// them, and the PCIe links read from sysfs.
NodeInventory BuildInventory(std::string node, topology::NodeTopology topology,
                             const topology::NodeProfile& profile,
                             const std::vector<counters::PortSample>& ports,
                             const std::string& sysfs_root);
// Profile and PCIe findings for an inventory and the current ports.
std::vector<Finding> CheckInventory(const NodeInventory& inventory,
                                    const topology::NodeProfile& profile);
// Port facts (state, rate, link layer, netdev MTU) from samples, plus hwloc-only RDMA NICs.
std::vector<topology::PortFacts> PortFactsFrom(const std::vector<counters::PortSample>& ports,
                                               const topology::NodeTopology& topology,
                                               const std::string& sysfs_root);

// Runs the whole check once, sleeping `counter_interval` between the two counter passes.
StatusOr<NodeCheckResult> CheckNode(const CheckOptions& options, const Clock& clock);

// {node, gpus[], nics[], affinity[], pcie[], ports[], findings[]}.
nlohmann::json CheckResultToJson(const NodeCheckResult& result);
// For people: summary, `nvidia-smi topo -m`-style matrix, ports, findings, verdict.
std::string CheckResultToText(const NodeCheckResult& result);

// Runs the check and prints it in options.format. Returns 0 ok, 1 warning, 2 critical, 3 unknown
// or error (Nagios/NHC); on error prints the reason (as {"error": ...} in JSON).
int RunCheck(const CheckOptions& options, std::ostream& out);

}  // namespace fw::agent
