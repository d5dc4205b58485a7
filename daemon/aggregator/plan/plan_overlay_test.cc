// A qualification overlay through the planner: dense pairs at the raised rate, budget raised,
// nodes outside untouched, and gone once cleared.
#include "daemon/aggregator/plan/plan_overlay.h"

#include <gtest/gtest.h>

#include "daemon/aggregator/plan/planner.h"

namespace fw::aggregator {
namespace {

std::vector<AgentInfo> Agents(int n) {
  std::vector<AgentInfo> out;
  for (int i = 1; i <= n; ++i) {
    out.push_back(
        AgentInfo{"n" + std::to_string(i), {{"198.18.0." + std::to_string(i), 9753, ""}}});
  }
  return out;
}

const PlannedPeer* Find(const Plan& p, const std::string& peer) {
  for (const PlannedPeer& x : p.peers) {
    if (x.node == peer) return &x;
  }
  return nullptr;
}

TEST(PlanOverlayTest, MeshAmongTheSetAtTheRaisedRateUntilCleared) {
  PlannerConfig config;
  config.full_mesh_max_nodes = 2;  // beyond it the map-less planner samples: not every pair
  config.sampled_peers = 1;
  Planner planner(config, nullptr);
  const auto live = Agents(6);
  const PlanSet before = planner.PlanFor(live);
  planner.SetOverlay({"q1", {"n1", "n2", "n3", "n4"}, 50, 2});
  const PlanSet during = planner.PlanFor(live);
  for (const std::string a : {"n1", "n2", "n3", "n4"}) {
    const Plan& p = during.plans.at(a);
    for (const std::string b : {"n1", "n2", "n3", "n4"}) {
      if (a == b) continue;
      const PlannedPeer* peer = Find(p, b);
      ASSERT_NE(peer, nullptr) << a << "->" << b;
      EXPECT_GE(peer->flows, 2u);
      EXPECT_GE(peer->rate_pps, 50.0);
      EXPECT_EQ(peer->transport, Transport::kUdp);
    }
    // The mesh (3 peers x 2 flows x 50/s) comes on top of the plan's budget, less what the
    // plan already spent on those peers.
    EXPECT_GE(p.budget.pps, before.plans.at(a).budget.pps + 300 - before.plans.at(a).planned.pps);
    EXPECT_TRUE(std::is_sorted(p.peers.begin(), p.peers.end(),
                               [](const PlannedPeer& x, const PlannedPeer& y) {
                                 return std::tie(x.node, x.address) < std::tie(y.node, y.address);
                               }));
  }
  // Outside the set nothing changes.
  EXPECT_EQ(during.plans.at("n5").peers.size(), before.plans.at("n5").peers.size());
  planner.ClearOverlay("q1");
  const PlanSet after = planner.PlanFor(live);
  for (const auto& [node, plan] : after.plans) {
    EXPECT_EQ(plan.peers.size(), before.plans.at(node).peers.size()) << node;
    EXPECT_EQ(plan.budget.pps, before.plans.at(node).budget.pps) << node;
  }
}

}  // namespace
}  // namespace fw::aggregator
