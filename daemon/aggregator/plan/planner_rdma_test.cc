// Planner, RDMA UD (docs/rdma.md): nodes with RDMA ports probe the RDMA ports of the nodes their
// latency plan names, rail by rail; nodes without RDMA are neither probers nor targets.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "daemon/aggregator/plan/planner.h"

namespace fw::aggregator {
namespace {

RdmaPort Ib(const std::string& device, uint32_t lid, uint32_t qpn) {
  RdmaPort p;
  p.device = device;
  p.port = 1;
  p.link_layer = "InfiniBand";
  p.lid = lid;
  p.gid = std::string(16, '\x01');
  p.qpn = qpn;
  p.qkey = 0x46570001;
  p.timestamps = "nic_wallclock";
  return p;
}

RdmaPort Roce(const std::string& device, uint32_t qpn) {
  RdmaPort p = Ib(device, 0, qpn);
  p.link_layer = "Ethernet";
  p.gid_index = 3;
  return p;
}

AgentInfo Agent(const std::string& node, int i, std::vector<RdmaPort> rdma) {
  return AgentInfo{node, {{"198.18.0." + std::to_string(i), 9753, ""}}, std::move(rdma)};
}

// r1..r3 with two IB rails each (mlx5_0, mlx5_1), and "plain" without RDMA.
std::vector<AgentInfo> TwoRailFleet() {
  std::vector<AgentInfo> agents;
  for (int i = 1; i <= 3; ++i) {
    agents.push_back(Agent("r" + std::to_string(i), i,
                           {Ib("mlx5_0", 10 * i, 100 + i), Ib("mlx5_1", 10 * i + 1, 200 + i)}));
  }
  agents.push_back(Agent("plain", 9, {}));
  return agents;
}

std::vector<const PlannedPeer*> RcPeers(const Plan& plan) {
  std::vector<const PlannedPeer*> out;
  for (const PlannedPeer& p : plan.peers) {
    if (p.transport == Transport::kRdmaRc) out.push_back(&p);
  }
  return out;
}

std::vector<const PlannedPeer*> RdmaPeers(const Plan& plan) {
  std::vector<const PlannedPeer*> out;
  for (const PlannedPeer& p : plan.peers) {
    if (p.transport == Transport::kRdmaUd) out.push_back(&p);
  }
  return out;
}

TEST(PlannerRdmaTest, EachRailProbesTheSameRailOfEveryRdmaPeer) {
  const std::vector<AgentInfo> agents = TwoRailFleet();
  const PlanSet set = Planner(PlannerConfig{}, nullptr).PlanFor(agents);

  for (int i = 1; i <= 3; ++i) {
    const std::string me = "r" + std::to_string(i);
    const Plan& plan = set.plans.at(me);
    const auto rdma = RdmaPeers(plan);
    ASSERT_EQ(rdma.size(), 4u) << me;  // 2 RDMA peers x 2 rails
    std::set<std::string> peers;
    for (const PlannedPeer* p : rdma) {
      ASSERT_NE(p->rdma, nullptr);
      EXPECT_EQ(p->rdma->src_device, p->rdma->dst.device) << "rails pair by device name";
      EXPECT_NE(p->node, me);
      EXPECT_NE(p->node, "plain");
      EXPECT_EQ(p->flows, 4u);
      // Without a map the path is unknown: the cross-leaf cap of 1/s, over the 4 flows.
      EXPECT_DOUBLE_EQ(p->rate_pps, 0.25);
      EXPECT_FALSE(p->bandwidth);
      // The endpoint is the peer's port on that rail, unchanged.
      const int j = p->node.back() - '0';
      EXPECT_EQ(p->rdma->dst.qpn,
                static_cast<uint32_t>(p->rdma->dst.device == "mlx5_0" ? 100 + j : 200 + j));
      peers.insert(p->node);
    }
    EXPECT_EQ(peers.size(), 2u);
    // The UDP mesh is unchanged: every other node, "plain" included.
    EXPECT_EQ(plan.peers.size() - rdma.size() - RcPeers(plan).size(), 3u);
  }
  EXPECT_TRUE(RdmaPeers(set.plans.at("plain")).empty());
  // The bandwidth interval counts the bandwidth peers only (the 3 UDP peers), as without RDMA,
  // when RC bursts are off.
  PlannerConfig no_rc;
  no_rc.rdma_rc = false;
  const PlanSet without_rc = Planner(no_rc, nullptr).PlanFor(agents);
  EXPECT_TRUE(RcPeers(without_rc.plans.at("r1")).empty());
  const PlanSet udp_only = Planner(PlannerConfig{}, nullptr)
                               .PlanFor({Agent("r1", 1, {}), Agent("r2", 2, {}), Agent("r3", 3, {}),
                                         Agent("plain", 9, {})});
  EXPECT_EQ(without_rc.plans.at("r1").bw_interval_s, udp_only.plans.at("r1").bw_interval_s);
}

TEST(PlannerRdmaTest, BandwidthPeersGetAnRcPeerOnEveryRailPaidAsBandwidth) {
  const std::vector<AgentInfo> agents = TwoRailFleet();
  const PlanSet set = Planner(PlannerConfig{}, nullptr).PlanFor(agents);
  const Plan& plan = set.plans.at("r1");
  const auto rc = RcPeers(plan);
  ASSERT_EQ(rc.size(), 4u);  // r2 and r3, both rails each
  std::set<std::pair<std::string, std::string>> pairs;
  for (const PlannedPeer* p : rc) {
    ASSERT_NE(p->rdma, nullptr);
    EXPECT_EQ(p->rdma->src_device, p->rdma->dst.device) << "same rail";
    EXPECT_TRUE(p->bandwidth);
    EXPECT_EQ(p->rate_pps, 0);
    EXPECT_EQ(p->flows, 1u);
    pairs.insert({p->node, p->rdma->src_device});
  }
  EXPECT_EQ(pairs, (std::set<std::pair<std::string, std::string>>{
                       {"r2", "mlx5_0"}, {"r2", "mlx5_1"}, {"r3", "mlx5_0"}, {"r3", "mlx5_1"}}));
  // The RC bursts share the bandwidth budget: the interval stretches, never shrinks.
  PlannerConfig no_rc;
  no_rc.rdma_rc = false;
  const PlanSet without = Planner(no_rc, nullptr).PlanFor(agents);
  EXPECT_GE(plan.bw_interval_s, without.plans.at("r1").bw_interval_s);
  EXPECT_GE(plan.planned.bytes_per_s, without.plans.at("r1").planned.bytes_per_s);
}

TEST(PlannerRdmaTest, OnlyEqualLinkLayersArePairedAndOtherDeviceNamesByPosition) {
  std::vector<AgentInfo> agents{
      Agent("a", 1, {Ib("mlx5_0", 1, 11), Roce("mlx5_2", 12)}),
      Agent("b", 2, {Roce("rocep1s0", 21)}),  // RoCE only, another device name
      Agent("c", 3, {Ib("mlx5_7", 3, 31)}),   // IB only, another device name
  };
  const PlanSet set = Planner(PlannerConfig{}, nullptr).PlanFor(agents);
  std::map<std::string, std::string> route;  // "src_device>node" -> dst device
  for (const PlannedPeer* p : RdmaPeers(set.plans.at("a"))) {
    route[p->rdma->src_device + ">" + p->node] = p->rdma->dst.device;
  }
  EXPECT_EQ(route,
            (std::map<std::string, std::string>{{"mlx5_0>c", "mlx5_7"}, {"mlx5_2>b", "rocep1s0"}}));
  // b (RoCE) and c (IB) cannot reach each other over RDMA.
  EXPECT_EQ(RdmaPeers(set.plans.at("b")).size(), 1u);
  EXPECT_EQ(RdmaPeers(set.plans.at("c")).size(), 1u);
}

TEST(PlannerRdmaTest, RdmaPeersFollowTheLatencyPlanWithAMapAndCanBeTurnedOff) {
  // Two leaves of two hosts under one spine.
  auto map = FabricMap::Parse(
      "routing: ecmp\nswitches:\n  - {name: s1, tier: spine}\n  - {name: l1, tier: leaf}\n"
      "  - {name: l2, tier: leaf}\nlinks:\n  - {a: l1, b: s1}\n  - {a: l2, b: s1}\nhosts:\n"
      "  - {node: h1, nic: mlx5_0, address: 10.1.0.1, switch: l1}\n"
      "  - {node: h2, nic: mlx5_0, address: 10.1.0.2, switch: l1}\n"
      "  - {node: h3, nic: mlx5_0, address: 10.2.0.1, switch: l2}\n"
      "  - {node: h4, nic: mlx5_0, address: 10.2.0.2, switch: l2}\n");
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  auto shared = std::make_shared<const FabricMap>(std::move(map).value());
  std::vector<AgentInfo> agents;
  for (int i = 1; i <= 4; ++i) {
    agents.push_back(AgentInfo{
        "h" + std::to_string(i),
        {{"10." + std::to_string((i + 1) / 2) + ".0." + std::to_string(2 - i % 2), 9753, "mlx5_0"}},
        {Ib("mlx5_0", i, 100 + i)}});
  }
  const PlanSet set = Planner(PlannerConfig{}, shared).PlanFor(agents);
  for (const auto& [node, plan] : set.plans) {
    std::set<std::string> udp, rdma;
    std::map<std::string, PathClass> udp_class;
    for (const PlannedPeer& p : plan.peers) {
      if (p.transport == Transport::kUdp) {
        udp.insert(p.node);
        udp_class[p.node] = p.path_class;
      }
    }
    for (const PlannedPeer& p : plan.peers) {
      if (p.transport != Transport::kRdmaUd) continue;
      rdma.insert(p.node);
      EXPECT_EQ(p.path_class, udp_class[p.node]) << node << " -> " << p.node;
    }
    EXPECT_EQ(rdma, udp) << node;
    EXPECT_FALSE(rdma.empty()) << node;
  }
  // Each target gets its path class's cap over all its flows (rates step down a 9% grid).
  for (const auto& [node, plan] : set.plans) {
    for (const PlannedPeer& p : plan.peers) {
      if (p.transport != Transport::kRdmaUd) continue;
      const double cap = p.path_class == PathClass::kIntraLeaf ? 10.0 : 1.0;
      EXPECT_NE(p.path_class, PathClass::kUnknown) << node << " -> " << p.node;
      EXPECT_LE(p.rate_pps * p.flows, cap + 1e-9) << node << " -> " << p.node;
      EXPECT_GE(p.rate_pps * p.flows, cap * 0.9) << node << " -> " << p.node;
    }
  }
  PlannerConfig off;
  off.rdma_ud = false;
  for (const auto& [node, plan] : Planner(off, shared).PlanFor(agents).plans) {
    EXPECT_TRUE(RdmaPeers(plan).empty()) << node;
  }
}

TEST(PlannerRdmaTest, RdmaProbesArePaidFromTheNodeBudget) {
  std::vector<AgentInfo> agents;
  for (int i = 1; i <= 6; ++i) {
    agents.push_back(Agent("r" + std::to_string(i), i, {Ib("mlx5_0", i, 100 + i)}));
  }
  PlannerConfig generous;
  generous.rdma_other_pps = 50;  // per target: 5 targets x 50/s, over a budget of 40
  generous.budget_pps = 40;
  const PlanSet set = Planner(generous, nullptr).PlanFor(agents);
  for (const auto& [node, plan] : set.plans) {
    double rdma = 0;
    for (const PlannedPeer* p : RdmaPeers(plan)) rdma += p->rate_pps * p->flows;
    EXPECT_GT(rdma, 0) << node;
    EXPECT_LE(plan.planned.pps, 40 + 1e-9) << node;
    EXPECT_LE(rdma, plan.planned.pps) << node;
  }
  // A cap of 0 plans no RDMA targets of that class.
  PlannerConfig none;
  none.rdma_other_pps = 0;
  for (const auto& [node, plan] : Planner(none, nullptr).PlanFor(agents).plans) {
    EXPECT_TRUE(RdmaPeers(plan).empty()) << node;
  }
}

// The fleet cap's demand counts RDMA targets: without a map, 4 nodes ask for 48 UDP results/s
// (3 peers x 4 flows x 1/s each) and 12 RDMA ones (3 targets x 1/s each). A cap of 50 scales
// both; a cap of 60 fits them and scales nothing.
TEST(PlannerRdmaTest, FleetCapDemandCountsRdmaTargets) {
  std::vector<AgentInfo> agents;
  for (int i = 1; i <= 4; ++i) {
    agents.push_back(Agent("r" + std::to_string(i), i, {Ib("mlx5_0", i, 100 + i)}));
  }
  PlannerConfig tight;
  tight.fleet_results_per_s = 50;
  const PlanSet capped = Planner(tight, nullptr).PlanFor(agents);
  bool noted = false;
  for (const std::string& n : capped.notes) {
    noted = noted || n.find("asks for 60 results/s") != std::string::npos;
  }
  EXPECT_TRUE(noted) << (capped.notes.empty() ? "" : capped.notes[0]);
  for (const auto& [node, plan] : capped.plans) {
    for (const PlannedPeer* p : RdmaPeers(plan)) EXPECT_LT(p->rate_pps, 0.25) << node;
  }
  PlannerConfig fits;
  fits.fleet_results_per_s = 60;
  const PlanSet free = Planner(fits, nullptr).PlanFor(agents);
  for (const std::string& n : free.notes) {
    EXPECT_EQ(n.find("over the fleet cap"), std::string::npos) << n;
  }
  for (const auto& [node, plan] : free.plans) {
    for (const PlannedPeer* p : RdmaPeers(plan)) EXPECT_DOUBLE_EQ(p->rate_pps, 0.25) << node;
  }
}

TEST(PlannerRdmaTest, PlansAreTheSameWhateverTheInputOrder) {
  std::vector<AgentInfo> agents;
  for (int i = 1; i <= 4; ++i) {
    agents.push_back(Agent("r" + std::to_string(i), i,
                           {Ib("mlx5_0", 10 * i, 100 + i), Ib("mlx5_1", 10 * i + 1, 200 + i)}));
  }
  auto order = [](const Plan& plan) {
    std::vector<std::string> out;
    for (const PlannedPeer& p : plan.peers) {
      out.push_back(p.node + "/" + std::string(TransportName(p.transport)) + "/" +
                    (p.rdma ? p.rdma->src_device : ""));
    }
    return out;
  };
  const PlanSet a = Planner(PlannerConfig{}, nullptr).PlanFor(agents);
  std::reverse(agents.begin(), agents.end());
  const PlanSet b = Planner(PlannerConfig{}, nullptr).PlanFor(agents);
  for (const auto& [node, plan] : a.plans) EXPECT_EQ(order(plan), order(b.plans.at(node))) << node;
}

}  // namespace
}  // namespace fw::aggregator
