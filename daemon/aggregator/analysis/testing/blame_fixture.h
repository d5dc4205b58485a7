// Test support for the blame levels: a two-leaf fabric, the context a Blamer needs, and a tick's
// evaluation to fill by hand.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "daemon/aggregator/analysis/blamer.h"

namespace fw::analysis::testing {

// leaves l1 (hosts a, b) and l2 (host c; d with two NICs), spine s1.
inline std::shared_ptr<const FabricMap> TwoLeafMap() {
  auto m = FabricMap::Parse(R"(
switches: [{name: l1, tier: leaf}, {name: l2, tier: leaf}, {name: s1, tier: spine}]
links: [{a: l1, b: s1}, {a: l2, b: s1}]
hosts:
  - {node: a, nic: e0, address: 198.18.0.1, switch: l1}
  - {node: b, nic: e0, address: 198.18.0.2, switch: l1}
  - {node: c, nic: e0, address: 198.18.1.1, switch: l2}
  - {node: d, nic: e0, address: 198.18.1.2, switch: l2}
  - {node: d, nic: e1, address: 198.18.1.3, switch: l2}
)");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::make_shared<const FabricMap>(std::move(m).value());
}

// A loss blame on link `l`: `loss` over 1,000 probes, `recent_loss` over the last 40.
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
  blame::Blamer MakeBlamer(bool with_map = true) {
    ctx_ = std::make_unique<BlameContext>(
        BlameContext{with_map ? map_.get() : nullptr, flows_, tomography_, config, nullptr});
    return blame::Blamer(*ctx_, ev);
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
};

}  // namespace fw::analysis::testing
