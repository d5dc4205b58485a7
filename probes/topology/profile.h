// Expected node profiles (YAML): GPU and fabric NIC counts, rates, link layer, MTU, locality, PCIe.
//
// Only fabric NICs are counted. A profile names them (device globs) or selects them by link layer
// and minimum rate, and may exclude names (bonds, management ports), so that a bond or a
// management Ethernet port is never reported as a missing or extra fabric port.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/finding.h"
#include "common/status.h"
#include "probes/topology/affinity.h"
#include "probes/topology/pcie_link.h"
#include "probes/topology/topology.h"

namespace fw::topology {

struct PcieExpectation {
  std::optional<int> gen;    // minimum PCIe generation of the device's own link capability
  std::optional<int> width;  // minimum maximum-width
};

struct NicSelector {
  std::vector<std::string> devices;       // globs ("mlx5_*"); when non-empty, only matching devices
  std::optional<std::string> link_layer;  // "InfiniBand" or "Ethernet"
  std::optional<double> min_rate_gbps;
  std::vector<std::string> exclude;  // globs never counted as fabric ("*bond*")
};

struct NodeProfile {
  std::string name;
  std::string description;
  std::optional<int> gpu_count;
  std::optional<PathClass> max_gpu_nic_class;  // worst class allowed from a GPU to its best NIC
  PcieExpectation gpu_pcie;
  std::optional<int> fabric_nic_count;
  NicSelector fabric;
  std::optional<double> rate_gbps;
  std::optional<std::string> link_layer;
  std::optional<int> mtu;  // netdev MTU of each fabric port, when the netdev is known
  PcieExpectation nic_pcie;
};

// Parses profile YAML; `origin` names the source in error messages. Unknown keys are errors, so a
// typo cannot silently disable a check.
StatusOr<NodeProfile> ParseProfile(std::string_view yaml, std::string_view origin);

// The names of the profiles shipped in probes/topology/profiles/ and built into the binary.
std::vector<std::string> BuiltinProfileNames();
// The YAML text of a built-in profile, or nullopt.
std::optional<std::string_view> BuiltinProfileYaml(std::string_view name);

// `name_or_path`: a built-in name ("dgx-h100"), else a YAML file path. Empty means "generic".
StatusOr<NodeProfile> LoadProfile(const std::string& name_or_path);

// What the checks know about one NIC port (from sysfs) or one RDMA NIC seen only by hwloc.
struct PortFacts {
  std::string device;
  int port = 0;            // 0 when only hwloc saw the device
  std::string link_layer;  // empty when unknown
  std::optional<double> rate_gbps;
  int state_id = -1;  // 4 = ACTIVE; -1 unknown
  std::string state;
  std::optional<int> mtu;
  std::string netdev;
};

// True when this device/port counts as a fabric NIC under `selector` (glob matching on names).
bool IsFabricPort(const NicSelector& selector, const PortFacts& port);
// Shell-style glob with * and ?.
bool GlobMatch(std::string_view pattern, std::string_view text);

struct ProfileInputs {
  std::string node;
  const NodeTopology* topology = nullptr;
  const Affinity* affinity = nullptr;  // computed over the fabric NICs
  const std::vector<PcieLink>* pcie = nullptr;
  std::vector<PortFacts> ports;
};

// topology_mismatch and gpu_nic_locality findings for deviations from `profile`.
std::vector<Finding> CheckProfile(const NodeProfile& profile, const ProfileInputs& in);

}  // namespace fw::topology
