// The node's hardware tree as fabricwatch sees it: a plain copy of the hwloc tree, plus GPUs and
// NICs.
//
// Discovery (hwloc_discovery.h) fills it; affinity, PCIe and profile checks read it. Keeping our
// own copy makes those checks testable without hwloc and independent of hwloc's object lifetimes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fw::topology {

enum class NodeKind {
  kMachine,     // the root
  kPackage,     // a CPU socket
  kGroup,       // any other CPU-side container (hwloc Group, Die, cache levels are skipped)
  kHostBridge,  // a PCI host bridge (root complex)
  kPciBridge,   // a PCI-to-PCI bridge: root port, switch upstream or downstream port
  kPciDevice,   // a PCI function that is not a bridge
};

// One object of the tree. Parent links are indices into NodeTopology::nodes (-1 for the root).
struct TopoNode {
  NodeKind kind = NodeKind::kGroup;
  int parent = -1;
  std::string bdf;        // "0000:44:00.0" for PCI bridges and devices, else empty
  uint16_t class_id = 0;  // PCI class and subclass, e.g. 0x0302
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
  double link_gbytes = 0;  // hwloc's link speed of this PCI object in GB/s (0 = unknown)
  std::vector<int> numa;   // os indexes of the NUMA nodes local to this object's CPU-side ancestor
};

struct Gpu {
  std::string name;  // GPU0, GPU1, ... in PCI bus order, as nvidia-smi numbers them
  std::string bdf;
  std::string model;      // from hwloc OS-device info (GPUModel) when present
  std::string os_device;  // e.g. "nvml0", "cuda0", "card1"; empty when hwloc has none
  uint16_t vendor_id = 0, device_id = 0;
  int node_index = -1;  // index into NodeTopology::nodes
};

enum class NicKind {
  kRdma,      // has an OpenFabrics device (mlx5_N, efa_N, irdma...): a fabric candidate
  kEthernet,  // a network PCI function with no RDMA device: management or plain Ethernet
};

struct Nic {
  std::string name;  // RDMA device name (mlx5_0), else first netdev, else bdf
  NicKind kind = NicKind::kRdma;
  std::string bdf;                   // empty for a NIC seen only in sysfs
  std::vector<std::string> netdevs;  // e.g. {"ib0"}
  uint16_t class_id = 0, vendor_id = 0, device_id = 0;
  int node_index = -1;  // -1 when the NIC is not in the tree
};

struct NodeTopology {
  std::string source;  // "live" or the XML path
  std::vector<TopoNode> nodes;
  std::vector<Gpu> gpus;
  std::vector<Nic> nics;
  std::vector<std::string> nvswitches;  // bdfs
  int packages = 0;
  std::vector<int> numa_nodes;  // os indexes

  // Bdfs of the PCI bridges above node `index`, nearest first.
  std::vector<std::string> BridgesAbove(int index) const;
};

// "0000:44:00.0" from its parts.
std::string FormatBdf(unsigned domain, unsigned bus, unsigned dev, unsigned func);

// Whether a PCI function is a GPU: class 0300/0302 (also 0380 for AMD) from NVIDIA or AMD. The
// ASPEED BMC VGA function (1a03:2000, class 0300) on most servers is not one.
bool IsGpuPciFunction(uint16_t class_id, uint16_t vendor_id);

}  // namespace fw::topology
