// Pingmesh peer selection and ECMP path resolution.
#include "tests/sim/flows.h"

namespace fw::sim {

namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// Per-traversal propagation and switching latency.
constexpr uint32_t kAccessHopNs = 1500;
constexpr uint32_t kFabricHopNs = 1000;
constexpr uint32_t kHostStackNs = 10000;  // both ends' kernel and responder time, unloaded

void AddFlow(const FatTree& t, int src, int dst, int rail, uint16_t src_port, uint32_t flow_id,
             std::vector<Flow>& out) {
  Flow f;
  f.src_host = static_cast<uint32_t>(src);
  f.dst_host = static_cast<uint32_t>(dst);
  f.rail = static_cast<uint16_t>(rail);
  f.src_port = src_port;
  f.flow_id = flow_id;
  int sl = t.LeafGroup(src), dl = t.LeafGroup(dst);
  f.inter_leaf = sl != dl;
  int n = 0;
  uint32_t hops = 0;
  auto add = [&](int link) {
    f.links[n++] = link;
    hops += t.IsAccessLink(link) ? kAccessHopNs : kFabricHopNs;
  };
  uint32_t sa = static_cast<uint32_t>(src * t.rails() + rail);
  uint32_t da = static_cast<uint32_t>(dst * t.rails() + rail);
  add(t.AccessLink(src, rail));
  int fwd = 0;
  if (f.inter_leaf) {
    // Deterministic routing pins both directions of flow i to path i mod n; with leaf-spine paths
    // in map order, path k is the one through spine k.
    fwd = t.spec().deterministic ? static_cast<int>(flow_id % t.spines())
                                 : EcmpSpine(sa, da, src_port, kProbePort, t.spines());
    add(t.FabricLink(rail, sl, fwd));
    add(t.FabricLink(rail, dl, fwd));
  }
  add(t.AccessLink(dst, rail));
  f.forward_count = static_cast<uint8_t>(n);
  add(t.AccessLink(dst, rail));
  if (f.inter_leaf) {
    int rev = t.spec().deterministic ? fwd : EcmpSpine(da, sa, kProbePort, src_port, t.spines());
    add(t.FabricLink(rail, dl, rev));
    add(t.FabricLink(rail, sl, rev));
  }
  add(t.AccessLink(src, rail));
  f.traversal_count = static_cast<uint8_t>(n);
  // Cable lengths differ per pair: a stable offset of up to 2 µs.
  uint32_t cable = static_cast<uint32_t>(Mix((uint64_t{sa} << 32) | da) % 2000);
  f.base_rtt_ns = hops + kHostStackNs + cable;
  out.push_back(f);
}

}  // namespace

int EcmpSpine(uint32_t src_addr_key, uint32_t dst_addr_key, uint16_t src_port, uint16_t dst_port,
              int spines) {
  uint64_t k = (uint64_t{src_addr_key} << 32) | dst_addr_key;
  uint64_t p = (uint64_t{src_port} << 16) | dst_port;
  return static_cast<int>(Mix(k ^ Mix(p + 0x9e3779b97f4a7c15ULL)) % static_cast<uint64_t>(spines));
}

std::vector<std::vector<Flow>> BuildFlowPlan(const FatTree& t, const FlowPlanSpec& spec) {
  const int hpl = t.spec().hosts_per_leaf;
  const int leaves = t.leaves();
  std::vector<std::vector<Flow>> plan(static_cast<size_t>(t.hosts()));
  for (int h = 0; h < t.hosts(); ++h) {
    std::vector<Flow>& flows = plan[static_cast<size_t>(h)];
    int leaf = t.LeafGroup(h), idx = h % hpl;
    flows.reserve(static_cast<size_t>(t.rails()) * (hpl - 1 + spec.inter_leaf_flows));
    for (int r = 0; r < t.rails(); ++r) {
      for (int j = 0; j < hpl; ++j) {
        if (j == idx) continue;
        AddFlow(t, h, leaf * hpl + j, r, static_cast<uint16_t>(33000 + j), 0, flows);
      }
      if (leaves < 2) continue;
      for (int k = 0; k < spec.inter_leaf_flows; ++k) {
        // Host idx of every leaf covers other leaves idx*k.. so the leaf as a whole reaches
        // min(L-1, hpl*k) leaves; each flow gets its own source port, hence its own ECMP path.
        int offset = 1 + (idx * spec.inter_leaf_flows + k) % (leaves - 1);
        int dst_leaf = (leaf + offset) % leaves;
        int dst = dst_leaf * hpl + (idx + k) % hpl;
        // One flow per pair; its id spreads the pairs of a leaf over every spine when routing is
        // deterministic (ECMP spreads them by source port instead).
        AddFlow(t, h, dst, r, static_cast<uint16_t>(40000 + k * 97 + idx),
                static_cast<uint32_t>(idx + k + leaf), flows);
      }
    }
  }
  return plan;
}

}  // namespace fw::sim
