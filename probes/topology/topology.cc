// Helpers for the topology model.
#include "probes/topology/topology.h"

#include <cstdio>

namespace fw::topology {

std::vector<std::string> NodeTopology::BridgesAbove(int index) const {
  std::vector<std::string> out;
  if (index < 0 || index >= static_cast<int>(nodes.size())) return out;
  for (int p = nodes[index].parent; p >= 0; p = nodes[p].parent) {
    if (nodes[p].kind == NodeKind::kPciBridge && !nodes[p].bdf.empty()) out.push_back(nodes[p].bdf);
  }
  return out;
}

std::string FormatBdf(unsigned domain, unsigned bus, unsigned dev, unsigned func) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", domain & 0xffffu, bus & 0xffu, dev & 0x1fu,
                func & 0x7u);
  return buf;
}

bool IsGpuPciFunction(uint16_t class_id, uint16_t vendor_id) {
  constexpr uint16_t kNvidia = 0x10de, kAmd = 0x1002;
  if (vendor_id == kNvidia) return class_id == 0x0300 || class_id == 0x0302;
  if (vendor_id == kAmd) return class_id == 0x0300 || class_id == 0x0302 || class_id == 0x0380;
  return false;
}

}  // namespace fw::topology
