// Path classification on our copy of the hwloc tree.
#include "probes/topology/affinity.h"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace fw::topology {
namespace {

std::vector<int> Chain(const NodeTopology& topo, int i) {
  std::vector<int> out;
  for (int n = i; n >= 0; n = topo.nodes[n].parent) out.push_back(n);
  return out;  // self first, root last
}

bool IsIo(NodeKind k) {
  return k == NodeKind::kHostBridge || k == NodeKind::kPciBridge || k == NodeKind::kPciDevice;
}

// The NUMA nodes local to a PCI object: those of its nearest CPU-side ancestor.
const std::vector<int>& LocalNuma(const NodeTopology& topo, int i) {
  static const std::vector<int> kNone;
  for (int n = i; n >= 0; n = topo.nodes[n].parent) {
    if (!IsIo(topo.nodes[n].kind)) return topo.nodes[n].numa;
  }
  return kNone;
}

std::string NumaText(const std::vector<int>& numa) {
  if (numa.empty()) return "N/A";
  std::string s;
  for (size_t i = 0; i < numa.size(); ++i) s += (i ? "," : "") + std::to_string(numa[i]);
  return s;
}

}  // namespace

const char* PathClassName(PathClass c) {
  switch (c) {
    case PathClass::kPix:
      return "PIX";
    case PathClass::kPxb:
      return "PXB";
    case PathClass::kPhb:
      return "PHB";
    case PathClass::kNode:
      return "NODE";
    case PathClass::kSys:
      return "SYS";
  }
  return "SYS";
}

std::optional<PathClass> ParsePathClass(std::string_view name) {
  std::string up(name);
  for (char& ch : up) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  for (PathClass c :
       {PathClass::kPix, PathClass::kPxb, PathClass::kPhb, PathClass::kNode, PathClass::kSys}) {
    if (up == PathClassName(c)) return c;
  }
  return std::nullopt;
}

PathClass ClassifyPath(const NodeTopology& topo, int a, int b) {
  const int n = static_cast<int>(topo.nodes.size());
  if (a < 0 || b < 0 || a >= n || b >= n) return PathClass::kSys;
  const std::vector<int> ca = Chain(topo, a), cb = Chain(topo, b);
  // Lowest common ancestor: walk both chains from the root down while they agree.
  size_t ia = ca.size(), ib = cb.size();
  int lca = -1;
  while (ia > 0 && ib > 0 && ca[ia - 1] == cb[ib - 1]) {
    lca = ca[ia - 1];
    --ia;
    --ib;
  }
  if (lca < 0) return PathClass::kSys;
  const NodeKind k = topo.nodes[lca].kind;
  if (k == NodeKind::kPciBridge || k == NodeKind::kPciDevice) {
    // Bridges traversed: those strictly below the common ancestor on each side, plus the ancestor.
    int bridges = k == NodeKind::kPciBridge ? 1 : 0;
    for (size_t i = 1; i < ia; ++i) bridges += topo.nodes[ca[i]].kind == NodeKind::kPciBridge;
    for (size_t i = 1; i < ib; ++i) bridges += topo.nodes[cb[i]].kind == NodeKind::kPciBridge;
    return bridges <= 1 ? PathClass::kPix : PathClass::kPxb;
  }
  if (k == NodeKind::kHostBridge) return PathClass::kPhb;
  const std::vector<int>& na = LocalNuma(topo, a);
  const std::vector<int>& nb = LocalNuma(topo, b);
  if (na.size() == 1 && na == nb) return PathClass::kNode;
  return PathClass::kSys;
}

std::vector<AffinityEntry> Affinity::GpuNicEntries() const {
  std::vector<AffinityEntry> out;
  for (size_t g = 0; g < gpus.size(); ++g) {
    for (size_t c = 0; c < nics.size(); ++c) out.push_back({gpus[g], nics[c], gpu_nic[g][c]});
  }
  return out;
}

Affinity ComputeAffinity(const NodeTopology& topo, const std::vector<std::string>& fabric_nics) {
  Affinity out;
  std::vector<int> nic_nodes;
  for (const Nic& nic : topo.nics) {
    if (nic.kind != NicKind::kRdma || nic.node_index < 0) continue;
    if (!fabric_nics.empty() &&
        std::find(fabric_nics.begin(), fabric_nics.end(), nic.name) == fabric_nics.end()) {
      continue;
    }
    out.nics.push_back(nic.name);
    nic_nodes.push_back(nic.node_index);
  }
  for (const Gpu& g : topo.gpus) out.gpus.push_back(g.name);
  const size_t ng = topo.gpus.size();
  out.gpu_nic.assign(ng, std::vector<PathClass>(nic_nodes.size(), PathClass::kSys));
  out.gpu_gpu.assign(ng, std::vector<PathClass>(ng, PathClass::kPix));
  out.best_nics.resize(ng);
  out.best_class.resize(ng);
  for (size_t g = 0; g < ng; ++g) {
    for (size_t h = 0; h < ng; ++h) {
      if (g != h)
        out.gpu_gpu[g][h] = ClassifyPath(topo, topo.gpus[g].node_index, topo.gpus[h].node_index);
    }
    for (size_t c = 0; c < nic_nodes.size(); ++c) {
      const PathClass p = ClassifyPath(topo, topo.gpus[g].node_index, nic_nodes[c]);
      out.gpu_nic[g][c] = p;
      if (!out.best_class[g] || p < *out.best_class[g]) {
        out.best_class[g] = p;
        out.best_nics[g].clear();
      }
      if (p == *out.best_class[g]) out.best_nics[g].push_back(out.nics[c]);
    }
  }
  return out;
}

std::string FormatTopoMatrix(const NodeTopology& topo, const Affinity& a) {
  std::vector<std::string> labels;
  for (const std::string& g : a.gpus) labels.push_back(g);
  for (size_t i = 0; i < a.nics.size(); ++i) labels.push_back("NIC" + std::to_string(i));
  const size_t ng = a.gpus.size();
  auto cell = [&](size_t r, size_t c) -> std::string {
    if (r == c) return "X";
    if (r < ng && c < ng) return PathClassName(a.gpu_gpu[r][c]);
    if (r < ng) return PathClassName(a.gpu_nic[r][c - ng]);
    if (c < ng) return PathClassName(a.gpu_nic[c][r - ng]);
    // NIC↔NIC: classify directly.
    auto node_of = [&](const std::string& name) {
      for (const Nic& n : topo.nics) {
        if (n.name == name) return n.node_index;
      }
      return -1;
    };
    return PathClassName(ClassifyPath(topo, node_of(a.nics[r - ng]), node_of(a.nics[c - ng])));
  };
  auto numa_of = [&](size_t r) {
    int node = -1;
    if (r < ng) {
      node = topo.gpus[r].node_index;
    } else {
      for (const Nic& n : topo.nics) {
        if (n.name == a.nics[r - ng]) node = n.node_index;
      }
    }
    return node < 0 ? std::string("N/A") : NumaText(LocalNuma(topo, node));
  };
  std::ostringstream os;
  constexpr int kWidth = 7;
  auto pad = [&](const std::string& s) {
    os << s << std::string(s.size() < kWidth ? kWidth - s.size() : 1, ' ');
  };
  pad("");
  for (const std::string& l : labels) pad(l);
  os << "NUMA Affinity\n";
  for (size_t r = 0; r < labels.size(); ++r) {
    pad(labels[r]);
    for (size_t c = 0; c < labels.size(); ++c) pad(cell(r, c));
    os << numa_of(r) << "\n";
  }
  os << "\nLegend:\n"
        "  X    = the device itself\n"
        "  PIX  = joined by at most one PCIe bridge\n"
        "  PXB  = joined by several PCIe bridges, without crossing the host bridge\n"
        "  PHB  = joined through a PCIe host bridge\n"
        "  NODE = joined by the interconnect between host bridges inside one NUMA node\n"
        "  SYS  = joined across NUMA nodes (SMP interconnect)\n";
  if (!a.nics.empty()) {
    os << "\nNIC Legend:\n\n";
    for (size_t i = 0; i < a.nics.size(); ++i) os << "  NIC" << i << ": " << a.nics[i] << "\n";
  }
  return os.str();
}

}  // namespace fw::topology
