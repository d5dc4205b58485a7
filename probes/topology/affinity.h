// GPU↔NIC and GPU↔GPU path classes (PIX/PXB/PHB/NODE/SYS, as nvidia-smi topo -m), best NIC per GPU.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "probes/topology/topology.h"

namespace fw::topology {

// Ordered from closest to farthest, so a larger value is a worse path.
enum class PathClass {
  kPix,   // at most one PCIe bridge between the two
  kPxb,   // several PCIe bridges, without crossing a host bridge
  kPhb,   // through a PCIe host bridge
  kNode,  // between host bridges inside one NUMA node
  kSys,   // across NUMA nodes (SMP interconnect), or locality unknown
};

const char* PathClassName(PathClass c);                          // "PIX", ...
std::optional<PathClass> ParsePathClass(std::string_view name);  // case-insensitive

// The class of the path between two tree nodes (indexes into topo.nodes). Both must be PCI objects.
PathClass ClassifyPath(const NodeTopology& topo, int a, int b);

struct AffinityEntry {
  std::string gpu;   // GPU name
  std::string peer;  // NIC name or GPU name
  PathClass path = PathClass::kSys;
};

struct Affinity {
  std::vector<std::string> gpus;                // row order
  std::vector<std::string> nics;                // RDMA NICs in the tree, column order
  std::vector<std::vector<PathClass>> gpu_nic;  // [gpu][nic]
  std::vector<std::vector<PathClass>> gpu_gpu;  // [gpu][gpu]; the diagonal is meaningless
  // For each GPU, the NICs at its best class (ties kept), and that class. Empty when no NIC.
  std::vector<std::vector<std::string>> best_nics;
  std::vector<std::optional<PathClass>> best_class;

  // All GPU×NIC pairs, for metrics and JSON.
  std::vector<AffinityEntry> GpuNicEntries() const;
};

// Builds the matrices over the GPUs and the RDMA NICs of `topo` that sit in the tree. When
// `fabric_nics` is non-empty only those NIC names become columns.
Affinity ComputeAffinity(const NodeTopology& topo,
                         const std::vector<std::string>& fabric_nics = {});

// The matrix as `nvidia-smi topo -m` prints it: GPU and NIC rows and columns, NUMA affinity,
// legend.
std::string FormatTopoMatrix(const NodeTopology& topo, const Affinity& affinity);

}  // namespace fw::topology
