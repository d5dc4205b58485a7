// A qualification overlay through the planner: dense pairs at the raised rate, budget raised,
// nodes outside untouched, and gone once cleared.
#include "daemon/aggregator/plan/plan_overlay.h"

#include <gtest/gtest.h>

#include <functional>
#include <string_view>
#include <vector>

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

// ApplyOverlay's view of `agents` (borrowed).
std::function<const AgentInfo*(std::string_view)> Lookup(const std::vector<AgentInfo>& agents) {
  return [&agents](std::string_view n) -> const AgentInfo* {
    for (const AgentInfo& a : agents) {
      if (a.node == n) return &a;
    }
    return nullptr;
  };
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

// A per-NIC plan holds one UDP entry per NIC pair toward a peer. An escalation of a rail-1
// element names rail 1's NICs: the rail-1 entry is raised, not the first entry toward the peer
// (rail 0's, whose flows do not cross the element). Without NICs the first entry, as before.
TEST(PlanOverlayTest, RaisesTheEntryBetweenTheNamedNicsOfAMultiRailPlan) {
  const std::vector<AgentInfo> agents = Agents(2);
  const auto agent_of = Lookup(agents);
  Plan base;
  for (int rail = 0; rail < 2; ++rail) {
    PlannedPeer p;
    p.node = "n2";
    p.address = "198.18." + std::to_string(rail) + ".2";
    p.port = 9753;
    p.src_nic = p.dst_nic = "mlx5_" + std::to_string(rail);
    p.flows = 6;
    p.rate_pps = 1;
    base.peers.push_back(p);
  }
  auto rates = [](const Plan& plan) {
    return std::vector<double>{plan.peers[0].rate_pps, plan.peers[1].rate_pps};
  };
  PlanOverlay o{"escalation:n1~n2", {"n1", "n2"}, 10, 1};
  o.nics = {"mlx5_1", "mlx5_1"};
  Plan plan = base;
  ApplyOverlay(o, "n1", agent_of, 64, plan);
  ASSERT_EQ(plan.peers.size(), 2u);
  EXPECT_EQ(rates(plan), (std::vector<double>{1, 10}));
  EXPECT_DOUBLE_EQ(plan.planned.pps, 6 * 9.0);  // the rail-1 entry's six flows, 1/s -> 10/s
  o.nics.clear();
  plan = base;
  ApplyOverlay(o, "n1", agent_of, 64, plan);
  EXPECT_EQ(rates(plan), (std::vector<double>{10, 1}));
}

// An overlay's probe timeout shortens the entries it raises or adds (an entry's own shorter one
// stays) and touches no other entry; an overlay without one (a qualification's) leaves them.
TEST(PlanOverlayTest, AnOverlaysProbeTimeoutShortensOnlyTheEntriesItRaises) {
  const std::vector<AgentInfo> agents = Agents(3);
  const auto agent_of = Lookup(agents);
  Plan base;
  for (const char* peer : {"n2", "n3"}) {
    PlannedPeer p;
    p.node = peer;
    p.address = agent_of(peer)->endpoints.front().address;
    p.port = 9753;
    p.rate_pps = 1;
    base.peers.push_back(p);
  }
  PlanOverlay o{"escalation:n1~n2", {"n1", "n2"}, 10, 1};
  o.probe_timeout_ms = 250;
  Plan plan = base;
  ApplyOverlay(o, "n1", agent_of, 64, plan);
  EXPECT_EQ(Find(plan, "n2")->timeout_ms, 250u);
  EXPECT_EQ(Find(plan, "n3")->timeout_ms, 0u);
  // A peer added by the overlay (none planned toward it) gets it too.
  plan = Plan{};
  ApplyOverlay(o, "n2", agent_of, 64, plan);
  ASSERT_NE(Find(plan, "n1"), nullptr);
  EXPECT_EQ(Find(plan, "n1")->timeout_ms, 250u);
  // An entry already shorter keeps its own.
  plan = base;
  plan.peers[0].timeout_ms = 100;
  ApplyOverlay(o, "n1", agent_of, 64, plan);
  EXPECT_EQ(Find(plan, "n2")->timeout_ms, 100u);
  // Without one: as planned.
  o.probe_timeout_ms = 0;
  plan = base;
  ApplyOverlay(o, "n1", agent_of, 64, plan);
  EXPECT_EQ(Find(plan, "n2")->timeout_ms, 0u);
  EXPECT_DOUBLE_EQ(Find(plan, "n2")->rate_pps, 10);
}

// An escalation raises the flows that crossed its element (PlanOverlay::flow_sets): the listed
// flows at the overlay's rate, the entry's others at their own, and the budget grows by the raised
// flows' extra probes only. A member none of whose flows crossed keeps its entry as planned (its
// traces are still asked for); every flow, or a flow the entry does not have, raises every flow.
TEST(PlanOverlayTest, RaisesOnlyTheFlowsInTheMembersSet) {
  const std::vector<AgentInfo> agents = Agents(3);
  const auto agent_of = Lookup(agents);
  Plan base;
  for (const char* peer : {"n1", "n2", "n3"}) {
    PlannedPeer p;
    p.node = peer;
    p.address = agent_of(peer)->endpoints.front().address;
    p.port = 9753;
    p.flows = 8;
    p.rate_pps = 1;
    base.peers.push_back(p);
  }
  PlanOverlay o{"escalation:n1~n2", {"n1", "n2"}, 10, 1};
  o.trace_id = 7;
  o.flow_sets = {FlowBit(1) | FlowBit(5), 0};
  Plan plan = base;
  ApplyOverlay(o, "n1", agent_of, 64, plan);
  const PlannedPeer* raised = Find(plan, "n2");
  ASSERT_NE(raised, nullptr);
  EXPECT_EQ(raised->flows, 8u);
  EXPECT_EQ(raised->raised_flows, (std::vector<uint32_t>{1, 5}));
  EXPECT_DOUBLE_EQ(raised->rate_pps, 10);
  EXPECT_DOUBLE_EQ(raised->unraised_rate_pps, 1);
  EXPECT_TRUE(Find(plan, "n3")->raised_flows.empty());
  EXPECT_DOUBLE_EQ(Find(plan, "n3")->rate_pps, 1);
  EXPECT_DOUBLE_EQ(plan.budget.pps, 2 * 9.0);  // two flows from 1 to 10 probes/s
  ASSERT_EQ(plan.trace_requests.size(), 1u);
  // n2's flows toward n1 did not cross: its entry stays, its traces are asked for.
  plan = base;
  ApplyOverlay(o, "n2", agent_of, 64, plan);
  EXPECT_TRUE(Find(plan, "n1")->raised_flows.empty());
  EXPECT_DOUBLE_EQ(Find(plan, "n1")->rate_pps, 1);
  EXPECT_DOUBLE_EQ(plan.budget.pps, 0);
  ASSERT_EQ(plan.trace_requests.size(), 1u);
  EXPECT_EQ(plan.trace_requests[0].peer, "n1");
  EXPECT_EQ(plan.trace_requests[0].id, 7u);
  // A second escalation of other flows of the pair: the union, at the higher rate.
  plan = base;
  ApplyOverlay(o, "n1", agent_of, 64, plan);
  PlanOverlay other = o;
  other.rate_pps = 20;
  other.flow_sets = {FlowBit(2), 0};
  ApplyOverlay(other, "n1", agent_of, 64, plan);
  EXPECT_EQ(Find(plan, "n2")->raised_flows, (std::vector<uint32_t>{1, 2, 5}));
  EXPECT_DOUBLE_EQ(Find(plan, "n2")->rate_pps, 20);
  EXPECT_DOUBLE_EQ(Find(plan, "n2")->unraised_rate_pps, 1);
  EXPECT_DOUBLE_EQ(plan.budget.pps, 18 + (3 * 20 + 5 - 8 * 1 - 18));
  // Then every flow at 10 (no list): the others come up to 10, the raised ones stay at 20.
  PlanOverlay all = o;
  all.flow_sets.clear();
  ApplyOverlay(all, "n1", agent_of, 64, plan);
  EXPECT_EQ(Find(plan, "n2")->raised_flows, (std::vector<uint32_t>{1, 2, 5}));
  EXPECT_DOUBLE_EQ(Find(plan, "n2")->rate_pps, 20);
  EXPECT_DOUBLE_EQ(Find(plan, "n2")->unraised_rate_pps, 10);
  // And every flow at 20 or more: one rate, no list.
  all.rate_pps = 20;
  ApplyOverlay(all, "n1", agent_of, 64, plan);
  EXPECT_TRUE(Find(plan, "n2")->raised_flows.empty());
  EXPECT_DOUBLE_EQ(Find(plan, "n2")->rate_pps, 20);
  EXPECT_DOUBLE_EQ(Find(plan, "n2")->unraised_rate_pps, 0);
  // A set naming flow 9 of an 8-flow entry (another entry's flow): every flow.
  plan = base;
  o.flow_sets = {FlowBit(9), 0};
  ApplyOverlay(o, "n1", agent_of, 64, plan);
  EXPECT_TRUE(Find(plan, "n2")->raised_flows.empty());
  EXPECT_DOUBLE_EQ(Find(plan, "n2")->rate_pps, 10);
  EXPECT_DOUBLE_EQ(plan.budget.pps, 8 * 9.0);
  // A set of every flow of the entry is every flow too.
  plan = base;
  o.flow_sets = {0xff, 0};
  ApplyOverlay(o, "n1", agent_of, 64, plan);
  EXPECT_TRUE(Find(plan, "n2")->raised_flows.empty());
  EXPECT_DOUBLE_EQ(Find(plan, "n2")->rate_pps, 10);
}

// An escalation of some flows and an overlay of every flow (a qualification mesh) on one entry:
// the escalated flows at the escalation's rate, the others at the mesh's, whichever overlay the
// planner applies first (it applies them in the order they were set). Raising every flow to the
// escalation's rate instead would send probes neither overlay asked or paid for.
TEST(PlanOverlayTest, AnEscalationAndAMeshOnOneEntryGiveTheSameRatesInEitherOrder) {
  const std::vector<AgentInfo> agents = Agents(2);
  const auto agent_of = Lookup(agents);
  Plan base;
  PlannedPeer p;
  p.node = "n2";
  p.address = agent_of("n2")->endpoints.front().address;
  p.port = 9753;
  p.flows = 8;
  p.rate_pps = 1;
  base.peers.push_back(p);
  PlanOverlay escalation{"escalation:n1~n2", {"n1", "n2"}, 10, 1};
  escalation.flow_sets = {FlowBit(1) | FlowBit(5), 0};
  const PlanOverlay mesh{"q1", {"n1", "n2"}, 5, 8};
  for (const bool escalation_first : {true, false}) {
    SCOPED_TRACE(escalation_first ? "escalation first" : "mesh first");
    Plan plan = base;
    ApplyOverlay(escalation_first ? escalation : mesh, "n1", agent_of, 64, plan);
    ApplyOverlay(escalation_first ? mesh : escalation, "n1", agent_of, 64, plan);
    const PlannedPeer* raised = Find(plan, "n2");
    ASSERT_NE(raised, nullptr);
    EXPECT_EQ(raised->raised_flows, (std::vector<uint32_t>{1, 5}));
    EXPECT_DOUBLE_EQ(raised->unraised_rate_pps, 5);
    EXPECT_DOUBLE_EQ(raised->rate_pps, 10);
    EXPECT_DOUBLE_EQ(plan.budget.pps, 2 * 9.0 + 6 * 4.0);
  }
}

// An escalated pair need not be planned between the NICs it names (its flows were planned before
// the plan changed, or its results came from another schedule): the entry is added between those
// NICs, not raised on the first entry toward the peer, whose rail-0 flows would not cross a
// rail-1 element. Without an endpoint on the named NIC, the first entry as before.
TEST(PlanOverlayTest, AddsAnEntryBetweenTheNamedNicsWhenThePlanHasNone) {
  std::vector<AgentInfo> agents;
  for (int i = 1; i <= 2; ++i) {
    AgentInfo a{"n" + std::to_string(i), {}};
    for (int rail = 0; rail < 2; ++rail) {
      a.endpoints.push_back({"198.18." + std::to_string(rail) + "." + std::to_string(i), 9753,
                             "mlx5_" + std::to_string(rail)});
    }
    agents.push_back(a);
  }
  const auto agent_of = Lookup(agents);
  Plan base;
  PlannedPeer rail0;
  rail0.node = "n2";
  rail0.address = "198.18.0.2";
  rail0.port = 9753;
  rail0.src_nic = rail0.dst_nic = "mlx5_0";
  rail0.flows = 6;
  rail0.rate_pps = 1;
  base.peers.push_back(rail0);
  PlanOverlay o{"escalation:n1~n2", {"n1", "n2"}, 10, 1};
  o.nics = {"mlx5_1", "mlx5_1"};
  Plan plan = base;
  ApplyOverlay(o, "n1", agent_of, 64, plan);
  ASSERT_EQ(plan.peers.size(), 2u);
  EXPECT_EQ(plan.peers[0].rate_pps, 1);  // rail 0 stays
  const PlannedPeer& added = plan.peers[1];
  EXPECT_EQ(added.address, "198.18.1.2");
  EXPECT_EQ(added.src_address, "198.18.1.1");
  EXPECT_EQ(added.src_nic, "mlx5_1");
  EXPECT_EQ(added.dst_nic, "mlx5_1");
  EXPECT_EQ(added.rate_pps, 10);
  EXPECT_EQ(added.flows, 1u);
  EXPECT_DOUBLE_EQ(plan.planned.pps, 10.0);

  o.nics = {"mlx5_1", "mlx5_9"};  // the peer has no endpoint on that NIC
  plan = base;
  ApplyOverlay(o, "n1", agent_of, 64, plan);
  ASSERT_EQ(plan.peers.size(), 1u);
  EXPECT_EQ(plan.peers[0].rate_pps, 10);
}

}  // namespace
}  // namespace fw::aggregator

namespace fw::aggregator {
namespace {

RdmaPort IbPort(uint32_t lid) {
  RdmaPort p;
  p.device = "mlx5_0";
  p.port = 1;
  p.link_layer = "InfiniBand";
  p.lid = lid;
  p.qpn = 256;
  p.qkey = 0x46570001;
  return p;
}

// A qualification's RDMA parts: the RDMA UD mesh among the members with RDMA ports at the raised
// rate (none toward a member without), and an RC round marked on the sender's RC peer.
TEST(PlanOverlayTest, RdmaUdAmongMembersWithRdmaAndAnRcRoundOnTheSender) {
  PlannerConfig config;
  config.rdma_rc = false;  // no RC peers in the base plan: the round adds its own
  Planner planner(config, nullptr);
  auto live = Agents(4);
  for (int i = 0; i < 3; ++i) live[i].rdma = {IbPort(static_cast<uint32_t>(i + 1))};
  PlanOverlay o;
  o.id = "q1";
  o.nodes = {"n1", "n2", "n3", "n4"};
  o.rate_pps = 25;
  o.flows = 2;
  o.rdma_rate_pps = 25;
  planner.SetOverlay(o);
  planner.SetOverlay({.id = "q1/rdma_rc", .bursts = {{"n1", "n2", 0, 9, 0, true}}});
  const PlanSet during = planner.PlanFor(live);
  for (const std::string a : {"n1", "n2", "n3"}) {
    size_t ud = 0;
    for (const PlannedPeer& p : during.plans.at(a).peers) {
      if (p.transport != Transport::kRdmaUd) continue;
      ++ud;
      EXPECT_NE(p.node, "n4") << a;
      EXPECT_GE(p.rate_pps, 25.0) << a << "->" << p.node;
      EXPECT_GE(p.flows, 2u);  // the base plan's flows, when more
      ASSERT_TRUE(p.rdma);
      EXPECT_EQ(p.rdma->src_device, "mlx5_0");
    }
    EXPECT_EQ(ud, 2u) << a;
  }
  for (const PlannedPeer& p : during.plans.at("n4").peers) {
    EXPECT_NE(p.transport, Transport::kRdmaUd);
  }
  std::vector<const PlannedPeer*> rc;
  for (const auto& [node, plan] : during.plans) {
    for (const PlannedPeer& p : plan.peers) {
      if (p.transport == Transport::kRdmaRc) {
        EXPECT_EQ(node, "n1");
        rc.push_back(&p);
      }
    }
  }
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0]->node, "n2");
  EXPECT_EQ(rc[0]->rdma_rc_round, 9u);
  ASSERT_TRUE(rc[0]->rdma);
  EXPECT_EQ(rc[0]->rdma->dst.lid, 2u);
}

}  // namespace
}  // namespace fw::aggregator
