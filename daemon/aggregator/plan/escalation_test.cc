// The escalation budget: suspects escalate within the fleet budget, highest priority first; an
// escalation is renewed while its element stays suspect, ends when it does not, is capped in
// length and followed by a cool-down; its overlays raise both directions of each pair.
#include "daemon/aggregator/plan/escalation.h"

#include <gtest/gtest.h>

#include "daemon/aggregator/plan/planner.h"

namespace fw::aggregator {
namespace {

EscalationRequest Suspect(const std::string& element, int pairs, double priority = 0,
                          uint32_t flows = 1) {
  EscalationRequest r;
  r.element = element;
  r.priority = priority;
  for (int i = 0; i < pairs; ++i) {
    r.pairs.push_back(
        {element + "-a" + std::to_string(i), element + "-b" + std::to_string(i), flows});
  }
  return r;
}

TEST(EscalationBudgetTest, ExtraProbesStayWithinTheFleetBudget) {
  EscalationConfig c;
  c.rate_factor = 10;
  c.budget_fraction = 0.03;
  c.min_budget_pps = 0;
  c.max_pairs_per_element = 100;
  c.min_rate_factor = 10;  // full rate or nothing: the pair count is exact
  EscalationBudget book(c);
  // 10,000 probes/s planned: 300 extra allowed. One pair costs 2 directions x 1 flow x 9 = 18.
  std::vector<EscalationRequest> suspects = {Suspect("link:x", 40), Suspect("link:y", 40)};
  EXPECT_TRUE(book.Update(0, suspects, 10'000, 1.0));
  EXPECT_LE(book.stats().extra_pps, 300.0);
  EXPECT_EQ(book.stats().active_pairs, 16u);  // 16 x 18 = 288; a 17th would pass 300
  EXPECT_EQ(book.stats().active_flows, 32u);
  EXPECT_EQ(book.stats().active_elements, 1u);  // y got nothing: the budget was spent on x
  EXPECT_EQ(book.stats().refused_budget, 1u);
  EXPECT_EQ(book.Overlays().size(), 16u);
  // Over a minute of renewals (each capped at 30 s, then a cool-down) the budget holds at every
  // tick.
  for (int t = 1; t <= 60; ++t) {
    book.Update(t, suspects, 10'000, 1.0);
    EXPECT_LE(book.stats().extra_pps, 300.0) << "t=" << t;
  }
  EXPECT_LE(book.stats().extra_probes, 300.0 * 60);
}

TEST(EscalationBudgetTest, HigherPriorityIsServedFirstAndAPairCountsOnce) {
  EscalationConfig c;
  c.min_budget_pps = 0;
  c.min_rate_factor = 10;    // full rate or nothing
  c.budget_fraction = 0.01;  // 1,000 planned: 10 extra... below one pair (18)
  EscalationBudget tight(c);
  EXPECT_FALSE(tight.Update(0, {Suspect("link:x", 1)}, 1'000, 1.0));
  EXPECT_EQ(tight.stats().active_pairs, 0u);
  EXPECT_EQ(tight.stats().refused_budget, 1u);

  c.budget_fraction = 0.02;  // 20: exactly one pair
  EscalationBudget book(c);
  EXPECT_TRUE(
      book.Update(0, {Suspect("link:latency", 1, 1), Suspect("link:loss", 1, 5)}, 1'000, 1.0));
  EXPECT_GE(book.EscalatedSince("link:loss"), 0);
  EXPECT_LT(book.EscalatedSince("link:latency"), 0);

  // Two elements crossed by the same pair: the second one adds no traffic.
  EscalationBudget shared(c);
  EscalationRequest a = Suspect("link:a", 0), b = Suspect("link:b", 0);
  a.pairs.push_back({"n1", "n2", 1});
  b.pairs.push_back({"n2", "n1", 1});
  shared.Update(0, {a, b}, 1'000, 1.0);
  EXPECT_EQ(shared.stats().active_pairs, 1u);
  EXPECT_DOUBLE_EQ(shared.stats().extra_pps, 18.0);
}

TEST(EscalationBudgetTest, RenewedWhileSuspectEndedWhenNotCappedAndCooledDown) {
  EscalationConfig c;
  c.duration_s = 10;
  c.max_duration_s = 30;
  c.cooldown_s = 60;
  EscalationBudget book(c);
  const std::vector<EscalationRequest> x = {Suspect("link:x", 2)};
  EXPECT_TRUE(book.Update(0, x, 10'000, 1.0));
  EXPECT_FALSE(book.Update(9, x, 10'000, 1.0));  // renewed to 19
  EXPECT_FALSE(book.Update(18, x, 10'000, 1.0));
  EXPECT_DOUBLE_EQ(book.EscalatedSince("link:x"), 0);
  EXPECT_TRUE(book.Update(30, x, 10'000, 1.0));  // 30 s in all: ends though still suspect
  EXPECT_LT(book.EscalatedSince("link:x"), 0);
  EXPECT_FALSE(book.Update(60, x, 10'000, 1.0));  // cooling down until 90
  EXPECT_TRUE(book.Update(90, x, 10'000, 1.0));
  EXPECT_EQ(book.stats().started, 2u);
  // No longer suspect (confirmed or dropped): ends at once.
  EXPECT_TRUE(book.Update(92, {}, 10'000, 1.0));
  EXPECT_EQ(book.stats().active_pairs, 0u);
  EXPECT_DOUBLE_EQ(book.stats().extra_pps, 0);
}

TEST(EscalationBudgetTest, OverlaysRaiseBothDirectionsOfEachPair) {
  EscalationBudget book;
  EscalationRequest r = Suspect("link:x", 0);
  r.pairs.push_back({"n2", "n1", 1});
  book.Update(0, {r}, 10'000, 1.0);
  PlannerConfig pc;
  pc.full_mesh_max_nodes = 64;
  Planner planner(pc, nullptr);
  for (const PlanOverlay& o : book.Overlays()) planner.SetOverlay(o);
  std::vector<AgentInfo> agents;
  for (int i = 1; i <= 3; ++i) {
    agents.push_back(
        AgentInfo{"n" + std::to_string(i), {{"198.18.0." + std::to_string(i), 9753, ""}}});
  }
  const PlanSet plans = planner.PlanFor(agents);
  auto rate = [&](const std::string& from, const std::string& to) {
    for (const PlannedPeer& p : plans.plans.at(from).peers) {
      if (p.node == to && p.transport == Transport::kUdp) return p.rate_pps;
    }
    return -1.0;
  };
  EXPECT_DOUBLE_EQ(rate("n1", "n2"), 10.0);
  EXPECT_DOUBLE_EQ(rate("n2", "n1"), 10.0);
  EXPECT_LT(rate("n1", "n3"), 10.0);
  EXPECT_GT(rate("n1", "n3"), 0.0);
  // Both ends trace every flow toward the other, under the escalation's trace id; n3 traces none.
  auto requests = [&](const std::string& from) { return plans.plans.at(from).trace_requests; };
  ASSERT_EQ(requests("n1").size(), 1u);
  EXPECT_EQ(requests("n1")[0].peer, "n2");
  EXPECT_EQ(requests("n1")[0].src_port, 0);
  EXPECT_EQ(requests("n1")[0].id, 1u);
  ASSERT_EQ(requests("n2").size(), 1u);
  EXPECT_EQ(requests("n2")[0].peer, "n1");
  EXPECT_TRUE(requests("n3").empty());
  // The fleet's base rate leaves the overlay out.
  const PlanSet plain = Planner(pc, nullptr).PlanFor(agents);
  EXPECT_DOUBLE_EQ(plans.base_pps, plain.base_pps);
}

// The pair's NICs (the rail its bad flows took) go into the overlay in its members' order.
TEST(EscalationBudgetTest, OverlaysNameThePairsNicsInMemberOrder) {
  EscalationBudget book;
  EscalationRequest r = Suspect("link:r1-leaf1~r1-spine0", 0);
  r.pairs.push_back({"n2", "n1", 1, 0, "mlx5_1", "mlx5_3"});
  r.pairs.push_back({"n3", "n4", 1});  // results that named no NIC: any rail
  book.Update(0, {r}, 10'000, 1.0);
  const std::vector<PlanOverlay> overlays = book.Overlays();
  ASSERT_EQ(overlays.size(), 2u);
  EXPECT_EQ(overlays[0].nodes, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(overlays[0].nics, (std::vector<std::string>{"mlx5_3", "mlx5_1"}));
  EXPECT_EQ(overlays[1].nodes, (std::vector<std::string>{"n3", "n4"}));
  EXPECT_TRUE(overlays[1].nics.empty());
  // By default they keep the agents' own timeout (EscalationConfig::probe_timeout_ms 0)...
  for (const PlanOverlay& o : overlays) EXPECT_EQ(o.probe_timeout_ms, 0u);
  // ...and carry the configured short one when set.
  EscalationConfig c;
  c.probe_timeout_ms = 250;
  EscalationBudget on(c);
  on.Update(0, {r}, 10'000, 1.0);
  for (const PlanOverlay& o : on.Overlays()) EXPECT_EQ(o.probe_timeout_ms, 250u);
}

TEST(EscalationBudgetTest, APairTheBudgetCannotPayInFullRunsAtTheRateItCan) {
  EscalationConfig c;
  c.min_budget_pps = 0;
  c.budget_fraction = 0.03;  // 1,000 planned: 30 extra
  EscalationBudget book(c);
  // 8 flows: 10x would cost 2 x 8 x 9 = 144; 30 pays for 1 + 30 / 16 = 2.875x.
  EXPECT_TRUE(book.Update(0, {Suspect("link:x", 2, 0, 8)}, 1'000, 1.0));
  ASSERT_EQ(book.stats().active_pairs, 1u);  // the second pair would run under 1.5x: left out
  EXPECT_NEAR(book.stats().extra_pps, 30.0, 1e-9);
  const std::vector<PlanOverlay> o = book.Overlays();
  ASSERT_EQ(o.size(), 1u);
  EXPECT_NEAR(o[0].rate_pps, 2.875, 1e-9);
  EXPECT_NEAR(book.Escalations().at("link:x").pairs[0].rate_factor, 2.875, 1e-9);
}

TEST(EscalationBudgetTest, EachEscalationTracesUnderANewIdAndItsOverlaysExpire) {
  EscalationConfig c;
  c.duration_s = 10;
  c.max_duration_s = 30;
  c.cooldown_s = 60;
  EscalationBudget book(c, 500);
  const EscalationRequest r = Suspect("link:x", 2);
  EXPECT_TRUE(book.Update(0, {r}, 10'000, 1.0));
  std::vector<PlanOverlay> o = book.Overlays();
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o[0].trace_id, 500u);
  EXPECT_EQ(o[1].trace_id, 500u);
  EXPECT_EQ(book.Escalations().at("link:x").pairs.size(), 2u);
  // Renewed while suspect, up to max_duration_s; then the overlays go.
  EXPECT_FALSE(book.Update(20, {r}, 10'000, 1.0));
  EXPECT_EQ(book.Overlays().size(), 2u);
  EXPECT_TRUE(book.Update(30, {r}, 10'000, 1.0));
  EXPECT_TRUE(book.Overlays().empty());
  EXPECT_TRUE(book.Escalations().empty());
  // After the cool-down, a new escalation of it asks for traces again: a new id.
  EXPECT_FALSE(book.Update(60, {r}, 10'000, 1.0));
  EXPECT_TRUE(book.Update(91, {r}, 10'000, 1.0));
  o = book.Overlays();
  ASSERT_FALSE(o.empty());
  EXPECT_EQ(o[0].trace_id, 501u);
}

TEST(EscalationBudgetTest, ExtraLoadStaysUnderFivePercentOfTheBaseline) {
  std::vector<EscalationRequest> many;
  for (int i = 0; i < 50; ++i) many.push_back(Suspect("link:" + std::to_string(i), 8, i));
  for (double baseline : {2'000.0, 10'000.0, 100'000.0}) {
    EscalationBudget b;
    b.Update(0, many, baseline, 1.0);
    EXPECT_GT(b.stats().active_pairs, 0u) << baseline;
    EXPECT_LE(b.stats().extra_pps, 0.05 * baseline) << baseline;
    EXPECT_GT(b.stats().refused_budget, 0u) << baseline;
  }
}

// A small fleet (1,000 planned probes/s: 3 % is 30, so the 40/s floor holds): weak evidence
// escalates two one-flow pairs at 10x (18/s each) and a third at what is left (3x, 4/s); a
// suspicion raises the floor to 150/s: eight pairs at 10x (144/s). A fleet whose 3 % is above that
// floor is not changed by a suspicion.
TEST(EscalationBudgetTest, ASuspicionRaisesTheFloorOfASmallFleet) {
  auto pairs = [](bool suspicion, double baseline) {
    EscalationConfig c;
    c.suspicion_budget_pps = 150;
    EscalationBudget b(c);
    EscalationRequest r = Suspect("link:x", 12);
    r.suspicion = suspicion;
    b.Update(0, {r}, baseline, 1.0);
    EXPECT_LE(b.stats().extra_pps, b.last_budget_pps()) << suspicion << " " << baseline;
    return b.stats().active_pairs;
  };
  EXPECT_EQ(pairs(false, 1'000), 3u);
  EXPECT_EQ(pairs(true, 1'000), 8u);  // max_pairs_per_element
  EXPECT_EQ(pairs(false, 10'000), pairs(true, 10'000));
  EscalationConfig c;
  c.suspicion_budget_pps = 150;
  EscalationBudget b(c);
  EXPECT_DOUBLE_EQ(b.BudgetPps(1'000, false), 40);
  EXPECT_DOUBLE_EQ(b.BudgetPps(1'000, true), 150);
  EXPECT_DOUBLE_EQ(EscalationBudget().BudgetPps(1'000, true), 150) << "the default";
  EXPECT_DOUBLE_EQ(b.BudgetPps(10'000, true), 300);
}

// Weak evidence escalates a link at the plain floor (three pairs on a small fleet); when the link
// turns into a suspicion a tick later, its escalation is widened with the suspicion's budget to
// eight pairs at once, and the plans must follow. It keeps its start time.
TEST(EscalationBudgetTest, AnEscalationIsWidenedWhenItsElementBecomesASuspicion) {
  EscalationBudget b;
  EscalationRequest r = Suspect("link:x", 12);
  EXPECT_TRUE(b.Update(0, {r}, 1'000, 1.0));
  EXPECT_EQ(b.stats().active_pairs, 3u);
  EXPECT_FALSE(b.Update(1, {r}, 1'000, 1.0));  // renewed, unchanged
  r.suspicion = true;
  EXPECT_TRUE(b.Update(2, {r}, 1'000, 1.0));
  EXPECT_EQ(b.stats().active_pairs, 8u);
  EXPECT_LE(b.stats().extra_pps, b.last_budget_pps());
  EXPECT_EQ(b.stats().started, 1u);
  EXPECT_DOUBLE_EQ(b.EscalatedSince("link:x"), 0);
  EXPECT_EQ(b.Overlays().size(), 8u);
  EXPECT_FALSE(b.Update(3, {r}, 1'000, 1.0));  // widened once
}

EscalationRequest Lead(const std::string& element, int pairs, uint32_t flows = 1) {
  EscalationRequest r = Suspect(element, pairs, 0, flows);
  r.lead = true;
  return r;
}

// A lead (one lost flow on a link) runs lead_duration_s (3 s) and is not renewed while it stays a
// lead, though its lost probe keeps it asked for; then its element waits cooldown_s before
// another lead.
TEST(EscalationBudgetTest, ALeadIsShortAndNotRenewedWhileItStaysALead) {
  EscalationConfig c;
  c.lead_duration_s = 3;
  c.lead_rate_factor = 30;
  c.cooldown_s = 60;
  EscalationBudget b(c);
  const std::vector<EscalationRequest> lead = {Lead("link:x", 1)};
  EXPECT_TRUE(b.Update(0, lead, 1'000, 1.0));
  EXPECT_EQ(b.stats().started, 1u);
  EXPECT_EQ(b.stats().leads_started, 1u);
  EXPECT_DOUBLE_EQ(b.stats().extra_pps, 58.0);  // one one-flow pair at 30x, both directions
  EXPECT_FALSE(b.Update(1, lead, 1'000, 1.0));
  EXPECT_FALSE(b.Update(2, lead, 1'000, 1.0));
  EXPECT_DOUBLE_EQ(b.EscalatedSince("link:x"), 0);
  EXPECT_TRUE(b.Update(3, lead, 1'000, 1.0));  // 3 s, though still asked for
  EXPECT_LT(b.EscalatedSince("link:x"), 0);
  for (int t = 4; t < 63; ++t) EXPECT_FALSE(b.Update(t, lead, 1'000, 1.0)) << "t=" << t;
  EXPECT_TRUE(b.Update(63, lead, 1'000, 1.0));  // cooled down
  EXPECT_EQ(b.stats().leads_started, 2u);
  // Three seconds of 58 extra probes/s a minute: a lead is cheap.
  EXPECT_NEAR(b.stats().extra_probes, 3 * 58.0, 1e-9);
}

// Weak evidence that is no suspicion (EscalationRequest::lead_budget) spends what a lead may for
// a lead's course: the plain 40/s pays for 3 one-flow pairs (2 at 10x, 1 at 3x), the lead's
// 150/s for 8; a second later it keeps the 3 plain pairs and runs on, renewed. Become a
// suspicion within that second, it keeps all 8. Without lead_budget, 3 pairs from the start.
TEST(EscalationBudgetTest, WeakEvidenceSpendsALeadsBudgetForALeadsCourse) {
  EscalationConfig c;  // lead_duration_s 1, lead_budget_pps 150, min_budget_pps 40
  EscalationRequest r = Suspect("link:x", 12);
  r.lead_budget = true;
  EscalationBudget b(c);
  EXPECT_TRUE(b.Update(0, {r}, 1'000, 1.0));
  EXPECT_EQ(b.stats().active_pairs, 8u);
  EXPECT_DOUBLE_EQ(b.stats().extra_pps, 40.0 + 5 * 18.0);
  EXPECT_EQ(b.stats().leads_started, 0u);
  EXPECT_TRUE(b.Update(1, {r}, 1'000, 1.0));  // the lead's course is over
  EXPECT_EQ(b.stats().active_pairs, 3u);
  EXPECT_DOUBLE_EQ(b.stats().extra_pps, 40.0);
  EXPECT_EQ(b.Overlays().size(), 3u);
  EXPECT_FALSE(b.Update(2, {r}, 1'000, 1.0));  // renewed, unchanged
  EXPECT_DOUBLE_EQ(b.EscalatedSince("link:x"), 0);

  EscalationBudget s(c);
  EXPECT_TRUE(s.Update(0, {r}, 1'000, 1.0));
  EscalationRequest suspicion = r;
  suspicion.lead_budget = false;
  suspicion.suspicion = true;
  s.Update(0.5, {suspicion}, 1'000, 1.0);
  EXPECT_FALSE(s.Update(1, {suspicion}, 1'000, 1.0));
  EXPECT_EQ(s.stats().active_pairs, 8u);

  EscalationBudget plain(c);
  r.lead_budget = false;
  EXPECT_TRUE(plain.Update(0, {r}, 1'000, 1.0));
  EXPECT_EQ(plain.stats().active_pairs, 3u);
}

// A lead that ended cools down only against leads: its element's weak evidence (an ordinary
// request) escalates at once, for the ordinary 10 s, renewed.
TEST(EscalationBudgetTest, AnEndedLeadDoesNotBlockAnOrdinaryEscalation) {
  EscalationBudget b;
  EXPECT_TRUE(b.Update(0, {Lead("link:x", 1)}, 1'000, 1.0));
  EXPECT_TRUE(b.Update(3, {Lead("link:x", 1)}, 1'000, 1.0));  // ran its course
  EXPECT_LT(b.EscalatedSince("link:x"), 0);
  EXPECT_TRUE(b.Update(4, {Suspect("link:x", 2)}, 1'000, 1.0));
  EXPECT_DOUBLE_EQ(b.EscalatedSince("link:x"), 4);
  EXPECT_EQ(b.stats().started, 2u);
  EXPECT_EQ(b.stats().leads_started, 1u);
  EXPECT_FALSE(b.Update(13, {Suspect("link:x", 2)}, 1'000, 1.0));  // renewed to 23
  EXPECT_DOUBLE_EQ(b.EscalatedSince("link:x"), 4);
}

// A running lead asked for as an ordinary request (its second lost flow, or a suspicion) runs on
// as one: renewed past the lead's 3 s and widened to the request's pairs, keeping its start.
TEST(EscalationBudgetTest, ALeadThatBecomesOrdinaryIsRenewedAndWidened) {
  EscalationConfig c;
  c.lead_budget_pps = 0;    // leads at the plain floor...
  c.lead_rate_factor = 10;  // ...and the ordinary rate
  EscalationBudget b(c);
  EscalationRequest r = Lead("link:x", 12);
  EXPECT_TRUE(b.Update(0, {r}, 1'000, 1.0));
  EXPECT_EQ(b.stats().active_pairs, 3u);  // the plain 40/s floor: 18 + 18 + 4
  r.lead = false;
  r.suspicion = true;
  EXPECT_TRUE(b.Update(1, {r}, 1'000, 1.0));
  EXPECT_EQ(b.stats().active_pairs, 8u);
  EXPECT_EQ(b.stats().started, 1u);
  EXPECT_FALSE(b.Update(5, {r}, 1'000, 1.0));  // past the lead's 1 s: renewed
  EXPECT_DOUBLE_EQ(b.EscalatedSince("link:x"), 0);
  // Asked for only as a lead again: not renewed by it, it ends 10 s after its last renewal.
  r.lead = true;
  r.suspicion = false;
  EXPECT_FALSE(b.Update(14, {r}, 1'000, 1.0));
  EXPECT_TRUE(b.Update(15, {r}, 1'000, 1.0));
  EXPECT_LT(b.EscalatedSince("link:x"), 0);
  // ...and, having run as an ordinary escalation, it cools down against every request.
  EXPECT_FALSE(b.Update(16, {Suspect("link:x", 2)}, 1'000, 1.0));
}

// Leads are served after every other request, whatever their order or priority, and a running
// lead gives way when a new ordinary request cannot get its first pair at the full rate.
TEST(EscalationBudgetTest, LeadsAreServedLastAndGiveWayToOrdinaryRequests) {
  EscalationConfig c;
  c.min_budget_pps = 20;  // one one-flow pair at 10x (18/s)
  c.lead_budget_pps = 0;  // leads share the plain budget
  c.min_rate_factor = 10;
  EscalationBudget b(c);
  EscalationRequest lead = Lead("link:lead", 1);
  lead.priority = 100;
  EXPECT_TRUE(b.Update(0, {lead, Suspect("link:weak", 1, 1)}, 100, 1.0));
  EXPECT_GE(b.EscalatedSince("link:weak"), 0);
  EXPECT_LT(b.EscalatedSince("link:lead"), 0);
  EXPECT_EQ(b.stats().leads_started, 0u);

  EscalationBudget running(c);
  EXPECT_TRUE(running.Update(0, {lead}, 100, 1.0));
  EXPECT_GE(running.EscalatedSince("link:lead"), 0);
  EXPECT_TRUE(running.Update(1, {lead, Suspect("link:weak", 1, 1)}, 100, 1.0));
  EXPECT_LT(running.EscalatedSince("link:lead"), 0);
  EXPECT_DOUBLE_EQ(running.EscalatedSince("link:weak"), 1);
  EXPECT_LE(running.stats().extra_pps, 20.0);
  // Leads spend at most lead_budget_pps (450/s by default) together, and never raise the others'
  // floor: an ordinary request beside them gets the plain 40/s, served first.
  EscalationBudget many;
  std::vector<EscalationRequest> leads;
  for (int i = 0; i < 20; ++i) leads.push_back(Lead("link:l" + std::to_string(i), 1));
  leads.push_back(Suspect("link:weak", 4));
  many.Update(0, leads, 1'000, 1.0);
  EXPECT_DOUBLE_EQ(many.last_budget_pps(), 40);
  EXPECT_DOUBLE_EQ(many.LeadBudgetPps(1'000), 450);
  EXPECT_LE(many.stats().extra_pps, 450.0);
  EXPECT_GT(many.stats().extra_pps, 440.0);
  // The weak link's 3 pairs (40/s), then 7 leads at 30x (58/s each) and an 8th at the 3x the
  // rest pays for.
  EXPECT_EQ(many.stats().active_elements, 1u + 8u);
  EXPECT_DOUBLE_EQ(many.EscalatedSince("link:weak"), 0);
}

// Ordinary escalations at 10x the base rate, leads at 30x within `lead_budget_pps`.
EscalationConfig DenseLeads(double lead_budget_pps) {
  EscalationConfig c;
  c.rate_factor = 10;
  c.lead_rate_factor = 30;
  c.lead_budget_pps = lead_budget_pps;
  return c;
}

// A lead probes at lead_rate_factor for its short course; asked for as an ordinary escalation, its
// pairs run on at the ordinary rate_factor (its overlays follow).
TEST(EscalationBudgetTest, ALeadIsDenseAndDropsToTheOrdinaryRateWhenAskedForAsOne) {
  EscalationBudget b(DenseLeads(450));
  EscalationRequest r = Lead("link:x", 2);
  EXPECT_TRUE(b.Update(0, {r}, 1'000, 1.0));
  EXPECT_DOUBLE_EQ(b.stats().extra_pps, 2 * 58.0);
  for (const PlanOverlay& o : b.Overlays()) EXPECT_DOUBLE_EQ(o.rate_pps, 30.0) << o.id;
  r.lead = false;  // weak loss on the link at the next evaluation
  EXPECT_TRUE(b.Update(0.4, {r}, 1'000, 1.0));
  EXPECT_DOUBLE_EQ(b.EscalatedSince("link:x"), 0);
  EXPECT_DOUBLE_EQ(b.stats().extra_pps, 2 * 18.0);
  for (const PlanOverlay& o : b.Overlays()) EXPECT_DOUBLE_EQ(o.rate_pps, 10.0) << o.id;
  EXPECT_FALSE(b.Update(5, {r}, 1'000, 1.0));  // renewed as an ordinary escalation
  EXPECT_DOUBLE_EQ(b.stats().extra_pps, 2 * 18.0);
}

// A running lead spends what leads may, not the ordinary budget: an ordinary request that fits
// the plain budget beside it starts without ending it; one that would take all escalations past
// what leads may spend ends it.
TEST(EscalationBudgetTest, AnOrdinaryRequestEndsALeadOnlyWhereLeadsCannotPayForBoth) {
  EscalationConfig c = DenseLeads(150);
  c.min_budget_pps = 40;
  c.min_rate_factor = 10;  // full rate or nothing
  EscalationBudget b(c);
  EXPECT_TRUE(b.Update(0, {Lead("link:lead", 2)}, 100, 1.0));
  EXPECT_DOUBLE_EQ(b.stats().extra_pps, 2 * 58.0);
  EXPECT_TRUE(b.Update(0.25, {Lead("link:lead", 2), Suspect("link:weak", 2)}, 100, 1.0));
  EXPECT_DOUBLE_EQ(b.EscalatedSince("link:lead"), 0);
  EXPECT_DOUBLE_EQ(b.EscalatedSince("link:weak"), 0.25);
  // One weak pair: a second would take all escalations past the 150/s leads may spend.
  EXPECT_DOUBLE_EQ(b.stats().extra_pps, 2 * 58.0 + 18.0);
  EXPECT_EQ(b.stats().active_pairs, 2u + 1u);

  EscalationBudget full(c);
  EXPECT_TRUE(full.Update(0, {Lead("link:lead", 3)}, 100, 1.0));  // 2 at 30x, 1 at the 18x left
  EXPECT_EQ(full.stats().active_pairs, 3u);
  EXPECT_DOUBLE_EQ(full.stats().extra_pps, 150.0);
  // The weak link's first pair (18/s) would take the lead's 150/s past 150/s: the lead ends.
  EXPECT_TRUE(full.Update(0.25, {Suspect("link:weak", 1), Suspect("link:w2", 1)}, 100, 1.0));
  EXPECT_LT(full.EscalatedSince("link:lead"), 0);
  EXPECT_EQ(full.stats().active_pairs, 2u);
  EXPECT_LE(full.stats().extra_pps, 40.0);
}

// The link a lead names can move along its lost flow's path from one evaluation to the next (the
// escalated probes change the links' counts). The lead runs its course though its link is no
// longer asked for, and its lost flow's pair (a lead's first) starts no other lead meanwhile: one
// lost probe pays for one lead.
TEST(EscalationBudgetTest, OneLostFlowStartsOneLeadWhicheverLinkNamesIt) {
  EscalationConfig c;
  c.lead_duration_s = 2;
  EscalationBudget b(c);
  EscalationRequest first = Lead("link:up", 1);
  first.pairs.front() = {"h1", "h2", 1};
  first.pairs.push_back({"h3", "h4", 1});
  EXPECT_TRUE(b.Update(0, {first}, 1'000, 1.0));
  EscalationRequest moved = Lead("link:down", 1);
  moved.pairs.front() = {"h2", "h1", 1};
  EXPECT_FALSE(b.Update(1, {moved}, 1'000, 1.0));
  EXPECT_DOUBLE_EQ(b.EscalatedSince("link:up"), 0);
  EXPECT_LT(b.EscalatedSince("link:down"), 0);
  EXPECT_TRUE(b.Update(2, {moved}, 1'000, 1.0));  // ends at its 2 s; its pair still cools
  EXPECT_EQ(b.stats().active_elements, 0u);
  EXPECT_EQ(b.stats().leads_started, 1u);
  // Another lost flow's lead starts at once.
  EXPECT_TRUE(b.Update(3, {Lead("link:down", 1)}, 1'000, 1.0));
  EXPECT_EQ(b.stats().leads_started, 2u);
}

// A pair whose flows that crossed the element are known pays for those only: its other flows, and
// a direction none of whose flows crossed, stay at the base rate. Its overlay lists the flows per
// member, in member order.
TEST(EscalationBudgetTest, APairPaysForTheFlowsThatCrossedAndItsOverlayListsThem) {
  EscalationConfig c;
  c.min_budget_pps = 40;
  c.budget_fraction = 0;
  c.min_rate_factor = 10;  // full rate or nothing
  EscalationBudget book(c);
  EscalationRequest r = Suspect("link:x", 0);
  // 8 flows a direction; n9's flows 1 and 5 toward n1 crossed, none of n1's toward n9.
  EscalationPair p{"n9", "n1", 8};
  p.a_flows = FlowBit(1) | FlowBit(5);
  p.b_flows = 0;
  r.pairs.push_back(p);
  // Every flow of a second pair: 2 x 8 flows x 9 = 144 > 40 - 18 left.
  r.pairs.push_back({"n2", "n3", 8});
  // One flow of a third: 9.
  EscalationPair q{"n4", "n5", 8};
  q.a_flows = 0;
  q.b_flows = FlowBit(7);
  r.pairs.push_back(q);
  EXPECT_TRUE(book.Update(0, {r}, 1'000, 1.0));
  EXPECT_DOUBLE_EQ(book.stats().extra_pps, 2 * 9.0 + 9.0);
  EXPECT_EQ(book.stats().active_pairs, 2u);  // the whole pair did not fit
  EXPECT_EQ(book.stats().active_flows, 3u);
  const std::vector<PlanOverlay> overlays = book.Overlays();
  ASSERT_EQ(overlays.size(), 2u);
  EXPECT_EQ(overlays[0].nodes, (std::vector<std::string>{"n1", "n9"}));
  EXPECT_EQ(overlays[0].flow_sets, (std::vector<uint64_t>{0, FlowBit(1) | FlowBit(5)}));
  EXPECT_DOUBLE_EQ(overlays[0].rate_pps, 10.0);
  EXPECT_EQ(overlays[1].nodes, (std::vector<std::string>{"n4", "n5"}));
  EXPECT_EQ(overlays[1].flow_sets, (std::vector<uint64_t>{0, FlowBit(7)}));
  // A pair with every flow raised keeps the plain overlay (no flow sets).
  EscalationBudget plain(c);
  plain.Update(0, {Suspect("link:y", 1)}, 1'000, 1.0);
  ASSERT_EQ(plain.Overlays().size(), 1u);
  EXPECT_TRUE(plain.Overlays()[0].flow_sets.empty());
}

// A pair another element escalates already costs nothing more when its flows are raised already;
// other flows of it that crossed another element are escalated for that one, and the pair's one
// overlay raises both elements' flows.
TEST(EscalationBudgetTest, APairsOtherFlowsAreEscalatedForAnotherElement) {
  EscalationConfig c;
  c.min_budget_pps = 100;
  c.budget_fraction = 0;
  EscalationBudget book(c);
  auto one = [](const std::string& element, uint64_t a_flows) {
    EscalationRequest r;
    r.element = element;
    EscalationPair p{"a", "b", 8};
    p.a_flows = a_flows;
    p.b_flows = 0;
    r.pairs.push_back(p);
    return r;
  };
  book.Update(0, {one("link:x", FlowBit(1)), one("link:y", FlowBit(1)), one("link:z", FlowBit(3))},
              1'000, 1.0);
  EXPECT_EQ(book.stats().active_elements, 2u);  // y's flow is x's already
  EXPECT_EQ(book.Escalations().count("link:y"), 0u);
  EXPECT_DOUBLE_EQ(book.stats().extra_pps, 2 * 9.0);
  const std::vector<PlanOverlay> overlays = book.Overlays();
  ASSERT_EQ(overlays.size(), 1u);
  EXPECT_EQ(overlays[0].id, "escalation:a~b");
  EXPECT_EQ(overlays[0].flow_sets, (std::vector<uint64_t>{FlowBit(1) | FlowBit(3), 0}));
}

}  // namespace
}  // namespace fw::aggregator
