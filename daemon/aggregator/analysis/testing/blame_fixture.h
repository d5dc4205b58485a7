// Test support for the blame levels: a two-leaf fabric, the context a Blamer needs, and a tick's
// evaluation to fill by hand.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/aggregator/analysis/blamer.h"
#include "daemon/aggregator/analysis/element_tracker.h"

namespace fw::analysis::testing {

// `yaml` parsed as a fabric map (a test failure when it does not parse).
inline std::shared_ptr<const FabricMap> ParsedMap(std::string_view yaml) {
  auto m = FabricMap::Parse(yaml);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::make_shared<const FabricMap>(std::move(m).value());
}

// leaves l1 (hosts a, b) and l2 (host c; d with two NICs), spine s1.
inline std::shared_ptr<const FabricMap> TwoLeafMap() {
  return ParsedMap(R"(
switches: [{name: l1, tier: leaf}, {name: l2, tier: leaf}, {name: s1, tier: spine}]
links: [{a: l1, b: s1}, {a: l2, b: s1}]
hosts:
  - {node: a, nic: e0, address: 198.18.0.1, switch: l1}
  - {node: b, nic: e0, address: 198.18.0.2, switch: l1}
  - {node: c, nic: e0, address: 198.18.1.1, switch: l2}
  - {node: d, nic: e0, address: 198.18.1.2, switch: l2}
  - {node: d, nic: e1, address: 198.18.1.3, switch: l2}
)");
}

// Leaves l1 (host a), l2 (host b), l3 (hosts c, d) under spine s1: a switch with three fabric
// links.
inline std::shared_ptr<const FabricMap> ThreeLeafMap() {
  return ParsedMap(R"(
switches: [{name: l1, tier: leaf}, {name: l2, tier: leaf}, {name: l3, tier: leaf},
           {name: s1, tier: spine}]
links: [{a: l1, b: s1}, {a: l2, b: s1}, {a: l3, b: s1}]
hosts:
  - {node: a, nic: e0, address: 198.18.0.1, switch: l1}
  - {node: b, nic: e0, address: 198.18.1.1, switch: l2}
  - {node: c, nic: e0, address: 198.18.2.1, switch: l3}
  - {node: d, nic: e0, address: 198.18.2.2, switch: l3}
)");
}

// A leaf-per-host fabric (every NIC of a host on the host's one leaf): leaves l1 (host a, NICs e0
// and e1) and l2 (host b, the same), spines s1 and s2, ECMP. Two NIC pairs of a and b cross the
// same leaf-spine links, each with flow ids of its own.
inline std::shared_ptr<const FabricMap> LeafPerHostMap() {
  return ParsedMap(R"(
routing: ecmp
switches: [{name: l1, tier: leaf}, {name: l2, tier: leaf}, {name: s1, tier: spine},
           {name: s2, tier: spine}]
links: [{a: l1, b: s1}, {a: l1, b: s2}, {a: l2, b: s1}, {a: l2, b: s2}]
hosts:
  - {node: a, nic: e0, address: 198.18.0.1, switch: l1}
  - {node: a, nic: e1, address: 198.18.0.2, switch: l1}
  - {node: b, nic: e0, address: 198.18.1.1, switch: l2}
  - {node: b, nic: e1, address: 198.18.1.2, switch: l2}
)");
}

// A loss blame on link `l`: `loss` over 1,000 probes, `recent_loss` over the last 40 (the last two
// complete seconds; the fresh ones, with the tick's own second, the same).
inline LinkBlame LossBlame(LinkIndex l, double loss, double recent_loss) {
  LinkBlame b;
  b.link = l;
  b.signal = Signal::kLoss;
  b.estimate = loss;
  b.expected = 1000;
  b.bad = static_cast<uint32_t>(loss * 1000);
  b.bad_flows = 6;
  b.significance = 40;
  b.recent_probes = 40;
  b.recent_loss = recent_loss;
  b.fresh_probes = b.recent_probes;
  b.fresh_loss = recent_loss;
  return b;
}

class BlameFixture {
 public:
  explicit BlameFixture(std::shared_ptr<const FabricMap> map)
      : map_(std::move(map)),
        names_(std::make_shared<aggregator::NameInterner>()),
        flows_(map_, {}, 10, names_),
        tomography_(map_) {
    tomography_.Reset();
    for (const char* n : {"a", "b", "c", "d"}) names_->Intern(n);
    ev.hosts.resize(names_->size());
    for (HostStats& h : ev.hosts) {
      h.out_flows = h.in_flows = 20;
      h.out_pairs = h.in_pairs = 3;
    }
  }

  NodeId Id(const std::string& node) const { return *names_->Find(node); }
  // The link between two switches, or the access link of a host NIC ("d/e1").
  LinkIndex LinkOf(const std::string& x, const std::string& y = "") const {
    for (LinkIndex l = 0; l < map_->links().size(); ++l) {
      const aggregator::Link& link = map_->links()[l];
      if (link.IsAccess()) {
        const auto& nic = map_->host_nics()[link.host_nic];
        if (y.empty() && nic.node + "/" + nic.nic == x) return l;
      } else if (!y.empty() && map_->switches()[link.a].name == x &&
                 map_->switches()[link.b].name == y) {
        return l;
      }
    }
    ADD_FAILURE() << "no link " << x << " " << y;
    return 0;
  }
  // `tracker`: the elements' health as the levels see it (a switch already suspect), or none.
  blame::Blamer MakeBlamer(bool with_map = true, const ElementTracker* tracker = nullptr) {
    return blame::Blamer(Context(with_map, tracker), ev);
  }
  const BlameContext& Context(bool with_map = true, const ElementTracker* tracker = nullptr) {
    ctx_ = std::make_unique<BlameContext>(
        BlameContext{with_map ? map_.get() : nullptr, flows_, tomography_, config, tracker});
    return *ctx_;
  }
  // A flow between two hosts over the map's paths (traced), as the analyzer adds it, with `lost`
  // of `probes` lost: it gives the links it crosses data (Tomography::totals).
  void AddFlow(const std::string& src, const std::string& dst, uint32_t probes, uint32_t lost) {
    const aggregator::PathSet paths = map_->PathsBetweenNodes(src, dst);
    FlowObs o;
    o.src = Id(src);
    o.dst = Id(dst);
    o.src_access = paths.src_access;
    o.dst_access = paths.dst_access;
    o.core = paths.core.get();
    o.path = o.core && !o.core->paths.empty() ? 0 : -1;
    o.path_source = PathSource::kTraced;
    o.probes = probes;
    o.lost = lost;
    tomography_.Add(o);
    paths_.push_back(paths);  // o.core points into it
  }
  // The host NIC "node/nic".
  aggregator::HostNicIndex NicOf(const std::string& name) const {
    for (aggregator::HostNicIndex i = 0; i < map_->host_nics().size(); ++i) {
      const auto& n = map_->host_nics()[i];
      if (n.node + "/" + n.nic == name) return i;
    }
    ADD_FAILURE() << "no NIC " << name;
    return 0;
  }
  // UDP flow `flow_id` of the NIC pair src_nic -> dst_nic ("a/e0"), one of `nic_flows` of its
  // plan entry, traced over the path through `via` (a switch), with `lost` of `probes` lost, as
  // the analyzer adds it.
  void AddNicFlow(const std::string& src_nic, const std::string& dst_nic, uint32_t flow_id,
                  uint32_t nic_flows, const std::string& via, uint32_t probes, uint32_t lost) {
    const aggregator::HostNicIndex s = NicOf(src_nic), d = NicOf(dst_nic);
    const aggregator::PathSet paths = map_->Paths(s, d);
    FlowObs o;
    o.src = Id(map_->host_nics()[s].node);
    o.dst = Id(map_->host_nics()[d].node);
    o.src_access = paths.src_access;
    o.dst_access = paths.dst_access;
    o.core = paths.core.get();
    for (size_t i = 0; o.core && i < o.core->paths.size(); ++i) {
      for (LinkIndex l : o.core->paths[i]) {
        const aggregator::Link& link = map_->links()[l];
        if (map_->switches()[link.a].name == via ||
            (link.b != aggregator::kNoIndex && map_->switches()[link.b].name == via)) {
          o.path = static_cast<int32_t>(i);
        }
      }
    }
    EXPECT_GE(o.path, 0) << src_nic << " -> " << dst_nic << " via " << via;
    o.path_source = PathSource::kTraced;
    o.probes = probes;
    o.lost = lost;
    o.pair_flows = nic_flows;
    o.flow_bit = aggregator::FlowBit(flow_id);
    tomography_.Add(o);
    paths_.push_back(paths);  // o.core points into it
  }
  // A pair of `ev.pairs` between two hosts with the map's paths, `bad_flows` of its `flows` lossy.
  void AddPair(const std::string& x, const std::string& y, uint32_t flows, uint32_t bad_flows) {
    PairAgg p;
    p.a = std::min(Id(x), Id(y));
    p.b = std::max(Id(x), Id(y));
    p.mapped = true;
    const bool swap = Id(y) < Id(x);  // the paths of the a→b direction
    p.paths = map_->PathsBetweenNodes(swap ? y : x, swap ? x : y);
    p.flows = flows;
    p.bad_flows = p.loss_flows = bad_flows;
    ev.pairs[(static_cast<uint64_t>(p.a) << 32) | p.b] = std::move(p);
  }
  // The observation with this element key, or null.
  const Observation* Find(const std::string& key) const {
    for (const auto& [k, o] : ev.observations) {
      if (k == key) return &o;
    }
    return nullptr;
  }

  // Bad flows added here are what blames' `explained` indices point at.
  Tomography& tomography() { return tomography_; }

  AnalysisConfig config;
  Analyzer::Evaluation ev;

 private:
  std::shared_ptr<const FabricMap> map_;
  std::shared_ptr<aggregator::NameInterner> names_;
  FlowTable flows_;
  Tomography tomography_;
  std::unique_ptr<BlameContext> ctx_;
  std::vector<aggregator::PathSet> paths_;
};

}  // namespace fw::analysis::testing
