// PCIe link health from sysfs: current vs maximum link speed and width of GPUs, NICs and bridges.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/finding.h"
#include "common/status.h"
#include "probes/topology/topology.h"

namespace fw::topology {

// Parses a sysfs link speed: "16.0 GT/s PCIe", "8.0 GT/s", "2.5 GT/s" → GT/s. "Unknown", "0",
// empty text or garbage → kNotFound (no link) or kInvalidArgument (unparsable).
StatusOr<double> ParsePcieSpeed(std::string_view text);
// Parses a sysfs link width: "16" → 16. "0" → kNotFound (no link); garbage → kInvalidArgument.
StatusOr<int> ParsePcieWidth(std::string_view text);
// PCIe generation for a per-lane rate: 2.5→1, 5→2, 8→3, 16→4, 32→5, 64→6; 0 when unknown.
int PcieGeneration(double gts);

// One device whose link we check.
struct PcieTarget {
  std::string bdf;
  std::string role;             // "gpu", "nic" or "bridge"
  std::string owner;            // the GPU or NIC this link leads to, e.g. "GPU2" or "mlx5_0"
  bool speed_may_idle = false;  // GPU links drop speed when idle; only the width counts there
};

struct PcieLink {
  PcieTarget target;
  std::optional<double> current_speed_gts, max_speed_gts;
  std::optional<int> current_width, max_width;
  std::vector<std::string> problems;  // unreadable or unparsable files, one line each
  bool present = false;               // the device directory exists in sysfs
};

// The devices to check: every GPU and NIC in the tree and the PCI bridges above each. GPU links and
// the bridge port right above a GPU get speed_may_idle. NICs that are only in sysfs are resolved
// through <sysfs_root>/class/infiniband/<dev>/device.
std::vector<PcieTarget> PcieTargets(const NodeTopology& topo, const std::string& sysfs_root);

// Reads <sysfs_root>/bus/pci/devices/<bdf>/{current,max}_link_{speed,width} for each target.
std::vector<PcieLink> ReadPcieLinks(const std::string& sysfs_root,
                                    const std::vector<PcieTarget>& targets);

// pcie_downtrained findings: width below its maximum (critical when at half or less), or speed
// below its maximum where the speed is not allowed to idle (warning).
std::vector<Finding> CheckPcieLinks(const std::vector<PcieLink>& links, const std::string& node);

}  // namespace fw::topology
