// Which pairs a suspect element escalates: its own bad pairs and, for a fabric link's suspicion,
// a pair beside it under each of its switches.
#include "daemon/aggregator/analysis/escalation_candidates.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/aggregator/analysis/testing/blame_fixture.h"
#include "daemon/aggregator/analysis/testing/synthetic_fleet.h"
#include "daemon/aggregator/plan/escalation.h"
#include "daemon/aggregator/plan/plan_overlay.h"
#include "daemon/aggregator/plan/planner.h"

namespace fw::analysis {
namespace {

std::vector<std::string> PairsOf(const std::vector<aggregator::EscalationRequest>& requests,
                                 const std::string& element, bool* suspicion) {
  std::vector<std::string> out;
  for (const auto& r : requests) {
    if (r.element != element) continue;
    *suspicion = r.suspicion;
    for (const auto& p : r.pairs) out.push_back(p.a + "~" + p.b);
  }
  return out;
}

// Spine s1 with leaves l1 (a), l2 (b), l3 (c, d). l1~s1 is weakly lossy (a~b and a~c have lost
// probes). At the suspicion's significance its request also escalates b~c, which crosses l2~s1
// and l3~s1 but not l1~s1, so that a lossy spine shows on them in the same evaluation; c~d
// crosses no fabric link. Below it (weak evidence alone, the 3 % budget) only its own pairs.
TEST(EscalationCandidates, ALinkSuspicionAlsoEscalatesAPairBesideItUnderItsSwitch) {
  auto pairs = [](double significance, bool* suspicion) {
    testing::BlameFixture t(testing::ThreeLeafMap());
    t.AddPair("a", "b", 2, 1);
    t.AddPair("a", "c", 2, 1);
    t.AddPair("b", "c", 2, 0);
    t.AddPair("c", "d", 1, 0);
    LinkBlame weak = testing::LossBlame(t.LinkOf("l1", "s1"), 0.02, 0.02);
    weak.significance = significance;
    t.ev.weak_loss.push_back(weak);
    ElementTracker tracker(t.config);
    return PairsOf(EscalationCandidates(t.Context(), t.ev, tracker), "link:l1~s1", suspicion);
  };
  bool suspicion = false;
  EXPECT_EQ(pairs(6, &suspicion), (std::vector<std::string>{"a~b", "a~c", "b~c"}));
  EXPECT_TRUE(suspicion);
  EXPECT_EQ(pairs(4, &suspicion), (std::vector<std::string>{"a~b", "a~c"}));
  EXPECT_FALSE(suspicion);
}

// A lead (ev.lead_loss: one lost flow on l1~s1) asks for the link as a lead, with only the pairs
// that lost probes: a~c lost one, a~b only has slow samples (a healthy fleet's pairs cross every
// link with some). The same link weakly lossy is an ordinary request, never a lead; it may spend
// a lead's budget (lead_budget) while it is no suspicion.
TEST(EscalationCandidates, ALeadAsksOnlyForThePairsThatLostProbes) {
  testing::BlameFixture t(testing::ThreeLeafMap());
  t.AddPair("a", "c", 2, 1);
  t.AddPair("a", "b", 2, 0);
  for (auto& [key, p] : t.ev.pairs) {
    if (p.loss_flows == 0) p.bad_flows = p.slow_flows = 1;
  }
  LinkBlame lead = testing::LossBlame(t.LinkOf("l1", "s1"), 0.001, 0);
  lead.bad = lead.bad_flows = 1;
  lead.significance = 1.5;
  t.ev.lead_loss.push_back(lead);
  ElementTracker tracker(t.config);
  std::vector<aggregator::EscalationRequest> requests =
      EscalationCandidates(t.Context(), t.ev, tracker);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].element, "link:l1~s1");
  EXPECT_TRUE(requests[0].lead);
  EXPECT_FALSE(requests[0].suspicion);
  bool suspicion = true;
  EXPECT_EQ(PairsOf(requests, "link:l1~s1", &suspicion), (std::vector<std::string>{"a~c"}));

  LinkBlame weak = testing::LossBlame(t.LinkOf("l1", "s1"), 0.02, 0.02);
  weak.significance = 3.5;  // two lost flows: under escalate_suspicion_significance
  t.ev.weak_loss.push_back(weak);
  requests = EscalationCandidates(t.Context(), t.ev, tracker);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_FALSE(requests[0].lead);
  EXPECT_TRUE(requests[0].lead_budget);
  EXPECT_EQ(PairsOf(requests, "link:l1~s1", &suspicion), (std::vector<std::string>{"a~b", "a~c"}));
  EXPECT_FALSE(suspicion);

  t.ev.weak_loss.back().significance = 40;  // a suspicion has its own budget
  requests = EscalationCandidates(t.Context(), t.ev, tracker);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_TRUE(requests[0].suspicion);
  EXPECT_FALSE(requests[0].lead_budget);
}

// A traced ECMP fleet (2 spines, 4 leaves, 2 hosts each) without background loss, 15 s in, whose
// next second's results lose one probe of one inter-leaf UDP flow; its pair ("a~b") goes to
// `*pair` when it is dropped.
std::unique_ptr<testing::SyntheticFleet> FleetLosingOneProbe(double lead_significance,
                                                             std::string* pair) {
  testing::FleetShape shape = testing::TracedEcmpShape(2, 4, 2, 2);
  shape.background_loss = 0;
  AnalysisConfig config;
  config.escalate_lead_significance = lead_significance;
  auto fleet = std::make_unique<testing::SyntheticFleet>(shape, config);
  fleet->TraceFlows();
  fleet->Run(15);
  auto dropped = std::make_shared<bool>(false);
  fleet->SetRewrite([dropped, pair](std::vector<ReportedProbe>& batch) {
    for (ReportedProbe& r : batch) {
      // The leaf is the name's part before 'h' ("l<leaf>h<host>").
      const auto leaf = [](const std::string& n) { return n.substr(0, n.find('h')); };
      if (*dropped || r.transport != Transport::kUdp || leaf(r.src_node) == leaf(r.dst_node)) {
        continue;
      }
      r.lost = true;
      r.rtt_ns = 0;
      *dropped = true;
      *pair = std::min(r.src_node, r.dst_node) + "~" + std::max(r.src_node, r.dst_node);
    }
  });
  return fleet;
}

// The analyzer end to end on a traced ECMP fleet without background loss: one probe lost on one
// inter-leaf flow makes a lead on a fabric link of its path, escalating its pair alone; with
// escalate_lead_significance 0 it escalates nothing.
TEST(EscalationCandidates, OneLostProbeIsALeadUnlessLeadsAreOff) {
  auto leads = [](double lead_significance, std::string* pair) {
    pair->clear();
    std::unique_ptr<testing::SyntheticFleet> f = FleetLosingOneProbe(lead_significance, pair);
    testing::SyntheticFleet& fleet = *f;
    fleet.Run(1);
    EXPECT_FALSE(pair->empty());
    std::vector<aggregator::EscalationRequest> out;
    for (const auto& r : fleet.analyzer().escalation_candidates()) {
      EXPECT_TRUE(r.lead) << r.element;
      out.push_back(r);
    }
    EXPECT_TRUE(fleet.Active().empty()) << testing::DescribeFindings(fleet.Active());
    return out;
  };
  std::string pair;
  const std::vector<aggregator::EscalationRequest> on = leads(1.0, &pair);
  ASSERT_EQ(on.size(), 1u);
  EXPECT_TRUE(on[0].element.starts_with("link:leaf")) << on[0].element;
  // The lost flow's pair first, then pairs whose traced flows crossed the link (no lost probe).
  ASSERT_GE(on[0].pairs.size(), 2u);
  EXPECT_LE(on[0].pairs.size(), Tomography::kCrossingPairs + 1);
  const aggregator::EscalationPair& p = on[0].pairs[0];
  EXPECT_EQ(std::min(p.a, p.b) + "~" + std::max(p.a, p.b), pair);
  EXPECT_TRUE(leads(0, &pair).empty());
}

// The same lost probe judged between ticks (Analyzer::BetweenTicks, 250 ms after ingest) makes
// the lead the next tick would make of it: the same link, the lost flow's pair first, then the
// pairs whose flows crossed the link. With leads off, nothing between ticks either.
TEST(EscalationCandidates, ALostProbeBetweenTicksIsTheLeadTheNextTickWouldMake) {
  auto run = [](double lead_significance, bool between) {
    std::string pair;
    std::unique_ptr<testing::SyntheticFleet> f = FleetLosingOneProbe(lead_significance, &pair);
    testing::SyntheticFleet& fleet = *f;
    if (!between) {
      fleet.Run(1);
      return fleet.analyzer().escalation_candidates();
    }
    fleet.RunWithBetweenTicks(1);
    EXPECT_TRUE(fleet.Active().empty()) << testing::DescribeFindings(fleet.Active());
    return fleet.between_leads();
  };
  const std::vector<aggregator::EscalationRequest> at_tick = run(1.0, false);
  const std::vector<aggregator::EscalationRequest> between = run(1.0, true);
  ASSERT_EQ(at_tick.size(), 1u);
  ASSERT_EQ(between.size(), 1u);
  EXPECT_TRUE(between[0].lead);
  EXPECT_FALSE(between[0].suspicion);
  EXPECT_EQ(between[0].element, at_tick[0].element);
  ASSERT_EQ(between[0].pairs.size(), at_tick[0].pairs.size());
  for (size_t i = 0; i < between[0].pairs.size(); ++i) {
    const aggregator::EscalationPair& x = between[0].pairs[i];
    const aggregator::EscalationPair& y = at_tick[0].pairs[i];
    EXPECT_EQ(std::minmax(x.a, x.b), std::minmax(y.a, y.b)) << i;
    // The lost flow's pair is priced at its direction's flows (the tick halves a count that holds
    // only the bad direction's); a crossing pair's the same way as at the tick.
    EXPECT_GE(x.flows, y.flows) << i;
  }
  EXPECT_TRUE(run(0, true).empty());
}

// A lead raises, of each pair, the UDP flows that crossed its link (EscalationPair::a_flows and
// b_flows, from the traces), not every flow of the pair: 8 flows a pair over 4 spines, so about 2
// a direction cross a leaf's link to one spine. The lost flow is among its pair's.
TEST(EscalationCandidates, ALeadRaisesOnlyTheFlowsThatCrossedItsLink) {
  testing::FleetShape shape = testing::TracedEcmpShape(4, 4, 2, 8);
  shape.background_loss = 0;
  testing::SyntheticFleet fleet(shape, AnalysisConfig{});
  fleet.TraceFlows();
  fleet.Run(15);
  std::string lost_src, lost_dst;
  uint32_t lost_id = 0;
  fleet.SetRewrite([&](std::vector<ReportedProbe>& batch) {
    for (ReportedProbe& r : batch) {
      const auto leaf = [](const std::string& n) { return n.substr(0, n.find('h')); };
      if (!lost_src.empty() || r.transport != Transport::kUdp ||
          leaf(r.src_node) == leaf(r.dst_node)) {
        continue;
      }
      r.lost = true;
      r.rtt_ns = 0;
      lost_src = r.src_node;
      lost_dst = r.dst_node;
      lost_id = r.flow_id;
    }
  });
  fleet.Run(1);
  ASSERT_FALSE(lost_src.empty());
  const std::vector<aggregator::EscalationRequest> requests =
      fleet.analyzer().escalation_candidates();
  ASSERT_EQ(requests.size(), 1u);
  ASSERT_TRUE(requests[0].lead);
  // The link's two switches, and which flows' traced paths pass both (flow id = src_port - 40000).
  const FabricMap& map = *fleet.map();
  const std::optional<aggregator::LinkIndex> link =
      map.FindLink(requests[0].element.substr(std::string("link:").size()));
  ASSERT_TRUE(link.has_value());
  std::set<std::string> ends;
  for (aggregator::SwitchIndex sw : {map.links()[*link].a, map.links()[*link].b}) {
    ends.insert(map.switches()[sw].addresses.front());
  }
  std::map<std::pair<std::string, std::string>, uint64_t> crossed;
  for (const auto& t : fleet.FlowTraces()) {
    const auto on = std::count_if(t.hops.begin(), t.hops.end(),
                                  [&](const std::string& h) { return ends.contains(h); });
    if (on == 2) crossed[{t.src, t.dst}] |= aggregator::FlowBit(t.src_port - 40000);
  }
  size_t raised = 0, planned = 0;  // flows raised, and the pairs' flows in both directions
  for (const aggregator::EscalationPair& p : requests[0].pairs) {
    ASSERT_NE(p.a_flows, aggregator::kAllFlows) << p.a << "~" << p.b;
    ASSERT_NE(p.b_flows, aggregator::kAllFlows) << p.a << "~" << p.b;
    const uint64_t ab = crossed[{p.a, p.b}], ba = crossed[{p.b, p.a}];
    EXPECT_EQ(p.a_flows & ~ab, 0u) << p.a << "->" << p.b << " raises a flow that did not cross";
    EXPECT_EQ(p.b_flows & ~ba, 0u) << p.b << "->" << p.a << " raises a flow that did not cross";
    EXPECT_NE(p.a_flows | p.b_flows, 0u) << p.a << "~" << p.b;
    raised += aggregator::RaisedFlowCount(p.a_flows, p.flows) +
              aggregator::RaisedFlowCount(p.b_flows, p.flows);
    planned += 2 * 8;
  }
  const aggregator::EscalationPair& first = requests[0].pairs.front();
  ASSERT_EQ(std::minmax(first.a, first.b), std::minmax(lost_src, lost_dst));
  EXPECT_NE((first.a == lost_src ? first.a_flows : first.b_flows) & aggregator::FlowBit(lost_id),
            0u);
  EXPECT_GE(requests[0].pairs.size(), 2u);
  // Every flow of each pair would be 16 (8 a direction); this fleet's hash sends 5 of the lost
  // flow's pair's 8 over the link, and 1-2 of the others'.
  EXPECT_LE(raised * 2, planned) << raised << " of " << planned << " flows raised";
}

// Flow ids are per plan entry, so per NIC pair. In a leaf-per-host fabric two NIC pairs of a and b
// (e0 -> e0 and e1 -> e1, 4 flows each) cross l1~s1 with different ids under ECMP: 0 and 2 of
// e0's, 1 and 3 of e1's (one of them lost), and b's e0 -> a's e0 flow 1. Weak loss on l1~s1
// escalates each NIC pair with its own ids (the link lists them per NIC pair), the budget prices
// exactly those 5 flows, and each pair's overlay raises them on its own entries: a's e0 -> b's
// e0 entry flows 0 and 2, its e1 -> e1 entry 1 and 3, b's e0 -> a's e0 entry flow 1, and no other
// entry. Node-pair sets (before) raised 0-3 on one entry and nothing on the other.
TEST(EscalationCandidates, EachNicPairOfALeafPerHostPairRaisesItsOwnCrossingFlows) {
  testing::BlameFixture t(testing::LeafPerHostMap());
  for (uint32_t id = 0; id < 4; ++id) {
    t.AddNicFlow("a/e0", "b/e0", id, 4, id % 2 == 0 ? "s1" : "s2", 20, 0);
    t.AddNicFlow("a/e1", "b/e1", id, 4, id % 2 == 1 ? "s1" : "s2", 20, id == 3 ? 1 : 0);
    t.AddNicFlow("b/e0", "a/e0", id, 4, id == 1 ? "s1" : "s2", 20, 0);
  }
  const LinkIndex l1s1 = t.LinkOf("l1", "s1");
  ASSERT_EQ(t.tomography().CrossingPairs(l1s1).size(), 3u);
  for (const CrossingPair& c : t.tomography().CrossingPairs(l1s1)) EXPECT_EQ(c.flows, 4u);
  t.AddPair("a", "b", 24, 1);
  LinkBlame weak = testing::LossBlame(l1s1, 0.02, 0.02);
  weak.significance = 4;  // weak, no suspicion: no pairs beside it
  t.ev.weak_loss.push_back(weak);
  ElementTracker tracker(t.config);
  const std::vector<aggregator::EscalationRequest> requests =
      EscalationCandidates(t.Context(), t.ev, tracker);
  ASSERT_EQ(requests.size(), 1u);
  ASSERT_EQ(requests[0].element, "link:l1~s1");
  std::map<std::string, std::pair<uint64_t, uint64_t>> sets;  // "a_nic~b_nic" -> a's, b's
  for (const aggregator::EscalationPair& p : requests[0].pairs) {
    ASSERT_EQ(std::minmax(p.a, p.b), std::minmax(std::string("a"), std::string("b")));
    EXPECT_EQ(p.flows, 4u);
    const bool ab = p.a == "a";
    sets[(ab ? p.a_nic : p.b_nic) + "~" + (ab ? p.b_nic : p.a_nic)] =
        ab ? std::pair{p.a_flows, p.b_flows} : std::pair{p.b_flows, p.a_flows};
  }
  using aggregator::FlowBit;
  const std::map<std::string, std::pair<uint64_t, uint64_t>> want = {
      {"e0~e0", {FlowBit(0) | FlowBit(2), FlowBit(1)}}, {"e1~e1", {FlowBit(1) | FlowBit(3), 0}}};
  EXPECT_EQ(sets, want);

  aggregator::EscalationBudget budget;
  ASSERT_TRUE(budget.Update(0, requests, 10000, 1));
  EXPECT_EQ(budget.stats().active_flows, 5u);
  EXPECT_DOUBLE_EQ(budget.stats().extra_pps, 5 * (budget.config().rate_factor - 1));

  // a's and b's plans: an entry for each of their four NIC pairs, 4 flows each, 1 probe/s a flow.
  std::map<std::string, aggregator::AgentInfo> agents;
  std::map<std::string, aggregator::Plan> plans;
  for (const auto& [node, peer, net] : {std::tuple{"a", "b", "1"}, std::tuple{"b", "a", "0"}}) {
    aggregator::AgentInfo& agent = agents[node];
    agent.node = node;
    aggregator::Plan& plan = plans[node];
    for (int i = 0; i < 2; ++i) {
      const std::string ip = std::string(node) == "a" ? "198.18.0." : "198.18.1.";
      agent.endpoints.push_back({ip + std::to_string(i + 1), 9753, "e" + std::to_string(i)});
      for (int j = 0; j < 2; ++j) {
        aggregator::PlannedPeer p;
        p.node = peer;
        p.address = std::string("198.18.") + net + "." + std::to_string(j + 1);
        p.src_address = ip + std::to_string(i + 1);
        p.src_nic = "e" + std::to_string(i);
        p.dst_nic = "e" + std::to_string(j);
        p.flows = 4;
        p.rate_pps = 1;
        plan.peers.push_back(p);
      }
    }
  }
  const std::vector<aggregator::PlanOverlay> overlays = budget.Overlays();
  ASSERT_EQ(overlays.size(), 2u);
  double added = 0;
  for (auto& [node, plan] : plans) {
    const double before = plan.planned.pps;
    for (const aggregator::PlanOverlay& o : overlays) {
      aggregator::ApplyOverlay(
          o, node,
          [&](std::string_view n) -> const aggregator::AgentInfo* {
            auto it = agents.find(std::string(n));
            return it == agents.end() ? nullptr : &it->second;
          },
          64, plan);
    }
    added += plan.planned.pps - before;
    EXPECT_EQ(plan.trace_requests.size(), 1u) << node;  // once for the node pair
  }
  EXPECT_DOUBLE_EQ(added, budget.stats().extra_pps);  // what is raised is what was priced
  std::map<std::string, std::vector<uint32_t>> raised;  // "node:src_nic~dst_nic" -> flow ids
  for (const auto& [node, plan] : plans) {
    for (const aggregator::PlannedPeer& p : plan.peers) {
      EXPECT_EQ(p.flows, 4u);
      if (p.raised_flows.empty()) {
        EXPECT_DOUBLE_EQ(p.rate_pps, 1) << node << ":" << p.src_nic << "~" << p.dst_nic;
        continue;
      }
      EXPECT_DOUBLE_EQ(p.rate_pps, budget.config().rate_factor);
      EXPECT_DOUBLE_EQ(p.unraised_rate_pps, 1);
      raised[node + ":" + p.src_nic + "~" + p.dst_nic] = p.raised_flows;
    }
  }
  const std::map<std::string, std::vector<uint32_t>> want_raised = {
      {"a:e0~e0", {0, 2}}, {"a:e1~e1", {1, 3}}, {"b:e0~e0", {1}}};
  EXPECT_EQ(raised, want_raised);
}

// A lead's lost flow (between ticks) raises its own NIC pair's flows: flow 3 of a's e1 -> b's e1
// entry was lost, and that NIC pair's crossing flows are 1 and 3; its e0 -> e0 NIC pair follows
// as a crossing pair of its own with 0 and 2 (and b's flow 1 toward a's e0). Before, the lost
// flow's pair carried the union of both NIC pairs' ids (0-3) and no NICs.
TEST(EscalationCandidates, ALeadRaisesTheLostFlowsNicPairWithItsOwnIds) {
  testing::BlameFixture t(testing::LeafPerHostMap());
  for (uint32_t id = 0; id < 4; ++id) {
    t.AddNicFlow("a/e0", "b/e0", id, 4, id % 2 == 0 ? "s1" : "s2", 20, 0);
    t.AddNicFlow("a/e1", "b/e1", id, 4, id % 2 == 1 ? "s1" : "s2", 20, 0);
    t.AddNicFlow("b/e0", "a/e0", id, 4, id == 1 ? "s1" : "s2", 20, 0);
  }
  const aggregator::PathSet lost_paths =
      t.Context().map->Paths(t.NicOf("a/e1"), t.NicOf("b/e1"));
  const aggregator::EscalationRequest r =
      LeadRequest(t.Context(), "link:l1~s1", t.LinkOf("l1", "s1"), t.Id("a"), t.Id("b"), 4,
                  aggregator::FlowBit(3), lost_paths);
  ASSERT_EQ(r.pairs.size(), 2u);
  using aggregator::FlowBit;
  const aggregator::EscalationPair& first = r.pairs[0];
  EXPECT_EQ(std::tie(first.a, first.b, first.a_nic, first.b_nic),
            std::make_tuple("a", "b", "e1", "e1"));
  EXPECT_EQ(first.a_flows, FlowBit(1) | FlowBit(3));
  EXPECT_EQ(first.b_flows, 0u);
  const aggregator::EscalationPair& second = r.pairs[1];
  ASSERT_EQ(std::tie(second.a, second.b, second.a_nic, second.b_nic),
            std::make_tuple("a", "b", "e0", "e0"));
  EXPECT_EQ(second.a_flows, FlowBit(0) | FlowBit(2));
  EXPECT_EQ(second.b_flows, FlowBit(1));
}

// Tomography::Leads: a traced flow's one lost probe names the fabric link of its path with the
// fewest probes (l1~s1: 100, against l2~s1's 300), significant at 10^-2 there; once a loss blame
// explains the flow (the weak pass, or a finding's), it is no lead.
TEST(EscalationCandidates, ALostFlowNoBlameExplainsNamesItsLeastProbedLink) {
  testing::BlameFixture t(testing::ThreeLeafMap());
  t.AddFlow("a", "b", 100, 1);
  t.AddFlow("c", "b", 200, 0);
  SignalSpec spec;
  spec.significance = 1;
  spec.background = 1e-4;
  std::vector<LinkBlame> leads = t.tomography().Leads(spec);
  ASSERT_EQ(leads.size(), 1u);
  EXPECT_EQ(leads[0].link, t.LinkOf("l1", "s1"));
  EXPECT_EQ(leads[0].bad_flows, 1u);
  EXPECT_NEAR(leads[0].significance, 2.0, 0.01);  // P(>= 1 | 0.01)
  spec.significance = 2.5;
  EXPECT_TRUE(t.tomography().Leads(spec).empty());
  spec.significance = 1;
  SignalSpec blame = spec;
  blame.min_flows = 1;
  blame.threshold = 0;
  ASSERT_EQ(t.tomography().Localize(Signal::kLoss, blame).size(), 1u);
  EXPECT_TRUE(t.tomography().Leads(spec).empty());
}

// A lead speaks for every fabric link its lost flow surely crossed (a~b: l1~s1 and l2~s1, not the
// hosts' access links), and it also raises pairs whose traced flows crossed its link without a
// lost probe (c~b over l2~s1), after the pairs that lost probes.
TEST(EscalationCandidates, ALeadSpeaksForItsFlowsLinksAndRaisesPairsThatCrossedIt) {
  testing::BlameFixture t(testing::ThreeLeafMap());
  t.AddFlow("a", "b", 10, 1);
  t.AddFlow("c", "b", 10, 0);
  t.AddFlow("c", "d", 10, 0);
  t.AddPair("a", "b", 2, 1);
  LinkBlame lead = testing::LossBlame(t.LinkOf("l2", "s1"), 0.01, 0);
  lead.bad = lead.bad_flows = 1;
  lead.explained = {0};
  t.ev.lead_loss.push_back(lead);
  EXPECT_EQ(LeadLinks(*t.Context().map, t.tomography(), lead),
            (std::vector<LinkIndex>{t.LinkOf("l1", "s1"), t.LinkOf("l2", "s1")}));
  ElementTracker tracker(t.config);
  bool suspicion = true;
  EXPECT_EQ(PairsOf(EscalationCandidates(t.Context(), t.ev, tracker), "link:l2~s1", &suspicion),
            (std::vector<std::string>{"a~b", "c~b"}));
  EXPECT_FALSE(suspicion);
}

// An unresolved group suspect on loss ("one of l1~s1, l2~s1": flows not traced) escalates the bad
// pairs that may cross any of its links; their escalation also traces their flows.
TEST(EscalationCandidates, AnUnresolvedGroupEscalatesThePairsThatCrossItsLinks) {
  testing::BlameFixture t(testing::ThreeLeafMap());
  t.AddPair("a", "b", 2, 1);  // l1~s1, l2~s1
  t.AddPair("a", "c", 2, 1);  // l1~s1, l3~s1
  t.AddPair("c", "d", 2, 1);  // within l3
  const std::string group = "links:l1~s1,l2~s1";
  Observation obs;
  obs.finding.kind = "link_degraded";
  t.ev.observations.emplace_back(group, obs);
  ElementTracker tracker(t.config);
  tracker.Observe(group, obs);
  tracker.EndTick(1, 1'000'000'000);
  ASSERT_EQ(tracker.HealthOf(group), ElementHealth::kSuspect);
  bool suspicion = false;
  EXPECT_EQ(PairsOf(EscalationCandidates(t.Context(), t.ev, tracker), group, &suspicion),
            (std::vector<std::string>{"a~b", "a~c"}));
  EXPECT_TRUE(suspicion);
}

}  // namespace
}  // namespace fw::analysis
