// Fat-tree naming, the generated fabric map (checked with the aggregator's own parser) and flows.
#include "tests/sim/topology.h"

#include <gtest/gtest.h>

#include <set>

#include "tests/sim/flows.h"
#ifdef FW_SIM_HAVE_FABRIC_MAP
#include "daemon/aggregator/plan/fabric_map.h"
#endif

namespace fw::sim {
namespace {

TopologySpec Small() { return TopologySpec{.spines = 2, .leaves = 4, .hosts_per_leaf = 8}; }

TEST(FatTreeTest, NamesAndIndicesRoundTrip) {
  auto t = FatTree::Build(Small());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->hosts(), 32);
  EXPECT_EQ(t->link_count(), 4 * 2 + 32);
  EXPECT_EQ(t->LinkId(t->FabricLink(0, 1, 0)), "leaf001~spine00");
  EXPECT_EQ(t->LinkId(t->AccessLink(9, 0)), "node00009:mlx5_0~leaf001");
  EXPECT_EQ(t->FindLink("leaf003~spine01"), t->FabricLink(0, 3, 1));
  EXPECT_FALSE(t->FindLink("spine01~leaf003").has_value());
  auto [a, b] = t->LinkSwitches(t->FabricLink(0, 3, 1));
  EXPECT_EQ(t->SwitchName(a), "leaf003");
  EXPECT_EQ(t->SwitchName(b), "spine01");
  EXPECT_EQ(t->LinkSwitches(t->AccessLink(9, 0)).second, -1);
  // A spine's links: one per leaf; a leaf's: one per spine plus its hosts.
  EXPECT_EQ(t->LinksOfSwitch(*t->FindSwitch("spine01")).size(), 4u);
  EXPECT_EQ(t->LinksOfSwitch(*t->FindSwitch("leaf002")).size(), 2u + 8u);
  std::set<std::string> addresses;
  for (int h = 0; h < t->hosts(); ++h) addresses.insert(t->Address(h, 0));
  EXPECT_EQ(addresses.size(), 32u);
  EXPECT_EQ(t->Address(0, 0), "198.18.0.1");
}

TEST(FatTreeTest, RailsGetTheirOwnPlanes) {
  TopologySpec s = Small();
  s.rails = 2;
  auto t = FatTree::Build(s);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->LinkId(t->FabricLink(1, 0, 1)), "rail1-leaf000~rail1-spine01");
  EXPECT_EQ(t->LinkId(t->AccessLink(3, 1)), "node00003:mlx5_1~rail1-leaf000");
  EXPECT_EQ(t->FindRail("mlx5_1"), 1);
}

TEST(FatTreeTest, RejectsImpossibleSpecs) {
  TopologySpec s = Small();
  s.leaves = 1000;
  s.hosts_per_leaf = 17;  // 17,000 hosts
  auto t = FatTree::Build(s);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("at most 16000"), std::string::npos);
  s = Small();
  s.rails = 9;
  EXPECT_FALSE(FatTree::Build(s).ok());
  s = Small();
  s.spines = 0;
  EXPECT_FALSE(FatTree::Build(s).ok());
}

TEST(FatTreeTest, LargestFleetFitsTheAddressBudget) {
  auto t = FatTree::Build({.spines = 16, .leaves = 500, .hosts_per_leaf = 32, .rails = 8});
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->hosts(), 16000);
  EXPECT_EQ(t->Address(15999, 7), "198.19.244.0");
}

#ifdef FW_SIM_HAVE_FABRIC_MAP
TEST(FatTreeTest, TheAggregatorAcceptsTheGeneratedMap) {
  TopologySpec s = Small();
  s.rails = 2;
  auto t = FatTree::Build(s);
  ASSERT_TRUE(t.ok());
  auto m = aggregator::FabricMap::Parse(t->FabricMapYaml(), "sim map");
  ASSERT_TRUE(m.ok()) << m.status().message();
  // Every link id the simulator uses as ground truth exists in the aggregator's map.
  for (int l = 0; l < t->link_count(); ++l) {
    EXPECT_TRUE(m->FindLink(t->LinkId(l)).has_value()) << t->LinkId(l);
  }
  // Inter-leaf pairs have one candidate path per spine; the simulator picks one of them.
  EXPECT_EQ(m->PathsBetweenNodes("node00000", "node00031").PathCount(), 2u);
  EXPECT_EQ(m->PathsBetweenNodes("node00000", "node00001").PathCount(), 1u);
}

// Path tracing: each switch answers from one address of its own, outside the host NICs', and the
// aggregator maps that address back to the switch.
TEST(FatTreeTest, SwitchAddressesMapBackToTheirSwitches) {
  TopologySpec s = Small();
  s.rails = 2;
  auto t = FatTree::Build(s);
  ASSERT_TRUE(t.ok());
  auto m = aggregator::FabricMap::Parse(t->FabricMapYaml(true), "sim map");
  ASSERT_TRUE(m.ok()) << m.status().message();
  std::set<std::string> hosts;
  for (int h = 0; h < t->hosts(); ++h) {
    for (int r = 0; r < t->rails(); ++r) hosts.insert(t->Address(h, r));
  }
  for (int sw = 0; sw < t->switch_count(); ++sw) {
    const std::string a = t->SwitchAddress(sw);
    EXPECT_FALSE(hosts.contains(a)) << a;
    auto at = m->SwitchAtAddress(a);
    ASSERT_TRUE(at.has_value()) << a;
    EXPECT_EQ(m->switches()[*at].name, t->SwitchName(sw));
  }
}

TEST(FatTreeTest, DeterministicFlowsTakeTheAggregatorsPath) {
  TopologySpec s{.spines = 4, .leaves = 4, .hosts_per_leaf = 4, .deterministic = true};
  auto t = FatTree::Build(s);
  ASSERT_TRUE(t.ok());
  auto m = aggregator::FabricMap::Parse(t->FabricMapYaml(), "sim map");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->routing(), aggregator::Routing::kDeterministic);
  auto plan = BuildFlowPlan(*t, {.inter_leaf_flows = 4});
  std::set<int> spines;
  for (const auto& flows : plan) {
    for (const Flow& f : flows) {
      if (!f.inter_leaf) continue;
      // The aggregator's convention: flow i of a pair takes path i mod n in the map's order.
      auto src = m->FindHostNic(t->NodeName(static_cast<int>(f.src_host)), "mlx5_0");
      auto dst = m->FindHostNic(t->NodeName(static_cast<int>(f.dst_host)), "mlx5_0");
      ASSERT_TRUE(src && dst);
      auto set = m->Paths(*src, *dst);
      ASSERT_EQ(set.PathCount(), 4u);
      const auto& path = set.core->paths[f.flow_id % set.PathCount()];
      ASSERT_EQ(path.size(), 2u);
      EXPECT_EQ(m->links()[path[0]].id, t->LinkId(f.links[1]));
      EXPECT_EQ(m->links()[path[1]].id, t->LinkId(f.links[2]));
      EXPECT_EQ(f.links[5], f.links[2]);  // the echo comes back the same way
      spines.insert(t->LinkSwitches(f.links[1]).second);
    }
  }
  EXPECT_EQ(spines.size(), 4u);
}
#endif

TEST(FlowPlanTest, FullMeshInLeafPlusInterLeafFlows) {
  auto t = FatTree::Build(Small());
  ASSERT_TRUE(t.ok());
  auto plan = BuildFlowPlan(*t, {.inter_leaf_flows = 4});
  ASSERT_EQ(plan.size(), 32u);
  std::set<int> spines_used;
  for (int h = 0; h < t->hosts(); ++h) {
    const auto& flows = plan[static_cast<size_t>(h)];
    ASSERT_EQ(flows.size(), 7u + 4u);
    int intra = 0;
    for (const Flow& f : flows) {
      EXPECT_NE(f.src_host, f.dst_host);
      EXPECT_EQ(f.links[0], t->AccessLink(h, 0));
      EXPECT_EQ(f.links[f.traversal_count - 1], t->AccessLink(h, 0));
      if (!f.inter_leaf) {
        ++intra;
        EXPECT_EQ(t->LeafGroup(static_cast<int>(f.dst_host)), t->LeafGroup(h));
        EXPECT_EQ(f.traversal_count, 4);
        continue;
      }
      ASSERT_EQ(f.traversal_count, 8);
      ASSERT_EQ(f.forward_count, 4);
      // Forward: up and down through the same spine.
      auto up = t->LinkSwitches(f.links[1]), down = t->LinkSwitches(f.links[2]);
      EXPECT_EQ(up.second, down.second);
      EXPECT_EQ(up.first, t->LeafSwitch(0, t->LeafGroup(h)));
      spines_used.insert(up.second);
    }
    EXPECT_EQ(intra, 7);
  }
  EXPECT_EQ(spines_used.size(), 2u);  // ECMP hashing reaches every spine
}

TEST(FlowPlanTest, EcmpIsStableAndSpreads) {
  std::vector<int> count(8, 0);
  for (uint16_t port = 40000; port < 41000; ++port) {
    int s = EcmpSpine(1, 2, port, kProbePort, 8);
    EXPECT_EQ(s, EcmpSpine(1, 2, port, kProbePort, 8));
    ++count[static_cast<size_t>(s)];
  }
  for (int c : count) EXPECT_GT(c, 80);  // 125 expected per spine
}

}  // namespace
}  // namespace fw::sim
