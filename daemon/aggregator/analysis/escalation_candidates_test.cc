// Which pairs a suspect element escalates: its own bad pairs and, for a fabric link's suspicion,
// a pair beside it under each of its switches.
#include "daemon/aggregator/analysis/escalation_candidates.h"

#include <gtest/gtest.h>

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
// link with some). The same link weakly lossy is an ordinary request, never a lead.
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

  t.ev.weak_loss.push_back(testing::LossBlame(t.LinkOf("l1", "s1"), 0.02, 0.02));
  requests = EscalationCandidates(t.Context(), t.ev, tracker);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_FALSE(requests[0].lead);
  EXPECT_EQ(PairsOf(requests, "link:l1~s1", &suspicion), (std::vector<std::string>{"a~b", "a~c"}));
}

// The analyzer end to end on a traced ECMP fleet without background loss: one probe lost on one
// inter-leaf flow makes a lead on a fabric link of its path, escalating its pair alone; with
// escalate_lead_significance 0 it escalates nothing.
TEST(EscalationCandidates, OneLostProbeIsALeadUnlessLeadsAreOff) {
  auto leads = [](double lead_significance, std::string* pair) {
    testing::FleetShape shape;
    shape.spines = 2;
    shape.leaves = 4;
    shape.hosts_per_leaf = 2;
    shape.inter_flows = 2;
    shape.deterministic = false;
    shape.switch_addresses = true;
    shape.background_loss = 0;
    AnalysisConfig config;
    config.escalate_lead_significance = lead_significance;
    testing::SyntheticFleet fleet(shape, config);
    fleet.TraceFlows();
    fleet.Run(15);
    bool dropped = false;
    fleet.SetRewrite([&](std::vector<ReportedProbe>& batch) {
      for (ReportedProbe& r : batch) {
        // The leaf is the name's part before 'h' ("l<leaf>h<host>").
        const auto leaf = [](const std::string& n) { return n.substr(0, n.find('h')); };
        if (dropped || r.transport != Transport::kUdp || leaf(r.src_node) == leaf(r.dst_node)) {
          continue;
        }
        r.lost = true;
        r.rtt_ns = 0;
        dropped = true;
        *pair = std::min(r.src_node, r.dst_node) + "~" + std::max(r.src_node, r.dst_node);
      }
    });
    fleet.Run(1);
    EXPECT_TRUE(dropped);
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
  EXPECT_TRUE(on[0].element.starts_with("link:l")) << on[0].element;
  ASSERT_EQ(on[0].pairs.size(), 1u);
  const aggregator::EscalationPair& p = on[0].pairs[0];
  EXPECT_EQ(std::min(p.a, p.b) + "~" + std::max(p.a, p.b), pair);
  EXPECT_TRUE(leads(0, &pair).empty());
}

// The evaluation of a lead counts towards the dense confirmation of every fabric link its lost
// flow surely crossed, as weak loss does: a link that lost one probe on a flow in one second and
// loses 30 % of its probes in the next fires at that next evaluation on the dense data. Without
// leads it fires one evaluation later.
TEST(EscalationCandidates, ALeadCountsTowardsTheNextEvaluationsDenseConfirmation) {
  auto evaluations_to_fire = [](double lead_significance) {
    testing::FleetShape shape;
    shape.spines = 2;
    shape.leaves = 4;
    shape.hosts_per_leaf = 2;
    shape.inter_flows = 16;
    shape.deterministic = false;
    shape.switch_addresses = true;
    shape.background_loss = 0;
    AnalysisConfig config;
    config.escalate_lead_significance = lead_significance;
    testing::SyntheticFleet fleet(shape, config);
    fleet.TraceFlows();
    fleet.Run(15);
    // A flow whose probes go up leaf1~spine0.
    testing::SyntheticFleet::FlowTrace lost;
    for (const auto& t : fleet.FlowTraces()) {
      for (size_t i = 0; i + 1 < t.hops.size(); ++i) {
        if (t.hops[i] == "leaf1" && t.hops[i + 1] == "spine0") lost = t;
      }
    }
    EXPECT_FALSE(lost.src.empty());
    bool dropped = false;
    fleet.SetRewrite([&](std::vector<ReportedProbe>& batch) {
      for (ReportedProbe& r : batch) {
        if (dropped || r.src_node != lost.src || r.dst_node != lost.dst ||
            r.src_port != lost.src_port) {
          continue;
        }
        r.lost = true;
        r.rtt_ns = 0;
        dropped = true;
      }
    });
    fleet.Run(1);
    EXPECT_TRUE(dropped);
    EXPECT_TRUE(fleet.Active().empty()) << testing::DescribeFindings(fleet.Active());
    fleet.SetRewrite(nullptr);
    fleet.SetLinkFault("leaf1~spine0", testing::LinkFault{0.3});
    for (int n = 1; n <= 5; ++n) {
      fleet.Run(1);
      for (const TrackedFinding& f : fleet.Active()) {
        if (f.element == "link:leaf1~spine0") return n;
      }
    }
    return 0;
  };
  EXPECT_EQ(evaluations_to_fire(1.0), 1);
  EXPECT_EQ(evaluations_to_fire(0), 2);
}

}  // namespace
}  // namespace fw::analysis
