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
