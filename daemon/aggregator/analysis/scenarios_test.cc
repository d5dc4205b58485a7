// End-to-end analyzer scenarios on a synthetic fleet in simulated time: each fault must give the
// right finding kind on exactly the right element, and a healthy fleet must give none.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>

#include "daemon/aggregator/analysis/testing/synthetic_fleet.h"

namespace fw::analysis::testing {
namespace {

FleetShape Shape() {
  FleetShape s;
  s.spines = 4;
  s.leaves = 8;
  s.hosts_per_leaf = 6;
  s.inter_flows = 32;
  return s;
}

// The namespace fabric of tests/fabric_e2e: 2 spines x 3 leaves x 2 hosts.
FleetShape NamespaceFabricShape() {
  FleetShape s;
  s.spines = 2;
  s.leaves = 3;
  s.hosts_per_leaf = 2;
  s.inter_flows = 4;
  return s;
}

// Links that carry a few hundred probes in the 10 s window, like the traced suite's: 4 hosts per
// leaf, 8 flows per inter-leaf pair.
FleetShape MidShape() {
  FleetShape s = Shape();
  s.hosts_per_leaf = 4;
  s.inter_flows = 8;
  return s;
}

constexpr int kWarmup = 90;  // baselines need ~60 s of data

std::string Describe(const std::vector<TrackedFinding>& fs) {
  std::string out;
  for (const auto& f : fs) out += f.finding.kind + "@" + f.finding.location.id + " ";
  return out;
}

// Runs until a finding of `kind` at `location` is active; returns the seconds it took, or -1.
int TimeToDetect(SyntheticFleet& fleet, const std::string& kind, const std::string& location,
                 int limit) {
  for (int s = 1; s <= limit; ++s) {
    fleet.Run(1);
    for (const auto& f : fleet.Active()) {
      if (f.finding.kind == kind && f.finding.location.id == location) return s;
    }
  }
  return -1;
}

TEST(Scenarios, HealthyThirtyMinutesWithJitterGivesNoFindings) {
  SyntheticFleet fleet(Shape());
  int max_active = 0;
  for (int s = 0; s < 1800; ++s) {
    fleet.Run(1);
    max_active = std::max<int>(max_active, fleet.Active().size());
  }
  EXPECT_EQ(max_active, 0);
  EXPECT_TRUE(fleet.analyzer().Findings(false).empty())
      << Describe(fleet.analyzer().Findings(false));
  EXPECT_GT(fleet.analyzer().stats().baselines_ready, 0u);
  for (const LinkView& l : fleet.analyzer().Links()) EXPECT_EQ(l.state, "ok") << l.id;
}

class SingleLinkLoss : public ::testing::TestWithParam<double> {};

TEST_P(SingleLinkLoss, BlamesExactlyThatLink) {
  SyntheticFleet fleet(Shape());
  fleet.Run(kWarmup);
  fleet.SetLinkFault("leaf2~spine1", LinkFault{GetParam()});
  const int ttd = TimeToDetect(fleet, "link_degraded", "leaf2~spine1", 40);
  ASSERT_GT(ttd, 0) << Describe(fleet.Active());
  fleet.Run(20);
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_EQ(active[0].finding.location.type, "link");
  EXPECT_NEAR(active[0].finding.evidence.at("loss_ratio"), GetParam(), GetParam() * 0.5 + 0.003);
  EXPECT_LE(ttd, GetParam() >= 0.02 ? 10 : 20) << "time to detect " << ttd << " s";
  std::printf("loss %.2f: detected in %d s\n", GetParam(), ttd);
}
INSTANTIATE_TEST_SUITE_P(LossRates, SingleLinkLoss, ::testing::Values(0.01, 0.02, 0.05, 0.2));

TEST(Scenarios, LinkDownAndResolvesAfterRecovery) {
  SyntheticFleet fleet(Shape());
  fleet.Run(kWarmup);
  fleet.SetLinkFault("leaf5~spine3", LinkFault{1.0});
  const int ttd = TimeToDetect(fleet, "link_down", "leaf5~spine3", 20);
  ASSERT_GT(ttd, 0) << Describe(fleet.Active());
  EXPECT_LE(ttd, 10);
  fleet.Run(10);
  ASSERT_EQ(fleet.Active().size(), 1u) << Describe(fleet.Active());
  bool link_down_state = false;
  for (const LinkView& l : fleet.analyzer().Links()) {
    if (l.id == "leaf5~spine3") link_down_state = l.state == "down";
  }
  EXPECT_TRUE(link_down_state);

  fleet.ClearFaults();
  fleet.Run(60);  // window (10 s) + recovery period (30 s) + slack
  EXPECT_TRUE(fleet.Active().empty()) << Describe(fleet.Active());
  const auto all = fleet.analyzer().Findings(false);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_FALSE(all[0].active);
  EXPECT_EQ(all[0].finding.kind, "link_down");
}

TEST(Scenarios, FlappingLink) {
  SyntheticFleet fleet(Shape());
  fleet.Run(kWarmup);
  for (int cycle = 0; cycle < 6; ++cycle) {
    fleet.SetLinkFault("leaf1~spine0", LinkFault{1.0});
    fleet.Run(5);
    fleet.ClearFaults();
    fleet.Run(5);
  }
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_EQ(active[0].finding.kind, "link_flapping");
  EXPECT_EQ(active[0].finding.location.id, "leaf1~spine0");
}

// The traced suite's flap (3 s down every 10 s): a link that went down and came back on its own
// within flap_short_outage_s is one flap cycle, named once it has read up and clean for
// flap_short_outage_up_s; the first outage alone was link_down. The toggle count and the outage's
// length are the evidence.
TEST(Scenarios, ShortOutageThatComesBackIsAFlap) {
  SyntheticFleet fleet(Shape());
  fleet.Run(kWarmup);
  fleet.SetLinkFault("leaf1~spine0", LinkFault{1.0});
  fleet.Run(3);
  for (const auto& f : fleet.Active()) EXPECT_NE(f.finding.kind, "link_flapping");
  fleet.ClearFaults();
  const int ttd = TimeToDetect(fleet, "link_flapping", "leaf1~spine0", 6);
  EXPECT_GT(ttd, 0) << Describe(fleet.Active());
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_EQ(active[0].finding.evidence.at("toggles"), 2);
  EXPECT_NEAR(active[0].finding.evidence.at("outage_s"), 3, 1.5);
  EXPECT_NE(active[0].finding.summary.find("came back"), std::string::npos)
      << active[0].finding.summary;
}

// Runs a can-flap link_down observation of "link:x" through an ElementTracker with one reading
// per tick from tick 1: 'd' down; up and clean from 'c' 3 probes, 'm' 12, 'C' 40; 'l' up and
// lossy; '-' not judged. Returns the tick it turned flapping, or 0.
int FlappingAt(const AnalysisConfig& config, const std::string& readings) {
  Observation o;
  o.finding.kind = "link_down";
  o.can_flap = true;
  ElementTracker tracker(config);
  for (size_t i = 0; i < readings.size(); ++i) {
    const double t = 100.0 + i;
    const char r = readings[i];
    const double probes = r == 'C' ? 40 : (r == 'm' ? 12 : 3);
    if (r != '-') tracker.Instant("link:x", r == 'd', r == 'c' || r == 'm' || r == 'C', t, probes);
    tracker.Observe("link:x", o);
    tracker.EndTick(t, static_cast<int64_t>(t * 1e9));
    if (tracker.IsFlapping("link:x")) return static_cast<int>(i) + 1;
  }
  return 0;
}

// The clean return is counted in complete seconds read: the evaluation after the return reads the
// first whole second of it, so flap_short_outage_up_s (2) is two consecutive clean readings when
// they hold flap_return_min_probes (20) probes on the link, three when they are sparser, or two up
// readings of which the last is clean from dense probes (flap_dense_return: the second the link
// came back in is partly down). A lossy second, or an evaluation that does not judge the link,
// starts the count again (a clean second between two down seconds is a third toggle,
// flap_toggles).
TEST(Scenarios, ShortOutageIsAFlapAfterTwoCleanSecondsRead) {
  AnalysisConfig config;
  auto flapping_at = [&](const std::string& readings) { return FlappingAt(config, readings); };
  EXPECT_EQ(flapping_at("dddmm"), 5);
  EXPECT_EQ(flapping_at("dddmmmm"), 5);
  EXPECT_EQ(flapping_at("dddm"), 0);
  EXPECT_EQ(flapping_at("dddcc"), 0);  // sparse: one clean second more
  EXPECT_EQ(flapping_at("dddccc"), 6);
  EXPECT_EQ(flapping_at("dddmlml"), 0);   // lossy between clean seconds
  EXPECT_EQ(flapping_at("dddm-m-m"), 0);  // not judged between clean seconds
  EXPECT_EQ(flapping_at("dddm-mm"), 7);
  // The second the link came back in is partly down: up and lossy, then a dense clean second.
  EXPECT_EQ(flapping_at("dddlC"), 5);
  EXPECT_EQ(flapping_at("dddlm"), 0);  // not dense: two clean seconds after the lossy one
  EXPECT_EQ(flapping_at("dddlmm"), 6);
  EXPECT_EQ(flapping_at("dddC"), 0);       // one reading, dense or not, is no return
  EXPECT_EQ(flapping_at("dddl-C"), 0);     // not judged between them
  EXPECT_EQ(flapping_at("dddllllll"), 0);  // held down, losing part of its flows
  config.flap_short_outage_up_s = 3;
  EXPECT_EQ(flapping_at("dddmmm"), 6);
  EXPECT_EQ(flapping_at("dddllC"), 6);
  config.flap_short_outage_up_s = 2;
  config.flap_dense_return = false;
  EXPECT_EQ(flapping_at("dddlC"), 0);
}

// A held-down link that reads under 50 % loss for a second now and then, or is not judged for a
// tick, and reads down again is no flap (the traced suite's link_down under load was named
// link_flapping, 3 toggles): only a clean reading toggles a down link back up. Three toggles
// (down, a clean return, down) still are.
TEST(Scenarios, HeldDownLinkThatReadsUpForASecondIsNoFlap) {
  AnalysisConfig config;
  config.flap_short_outage_s = 0;  // toggles alone
  auto flapping_at = [&](const std::string& readings) { return FlappingAt(config, readings); };
  EXPECT_EQ(flapping_at("dddldddldddl"), 0);
  EXPECT_EQ(flapping_at("ddd-ddd-ddd-"), 0);
  EXPECT_EQ(flapping_at("dddCddd"), 5);
  EXPECT_EQ(flapping_at("dddlCddd"), 6);
}

// A link held down is no flap because part of its flows move: when the fabric reroutes the flows
// one end can send elsewhere, those the other end still sends into the dead link are lost (the
// namespace demo's link_down read "went down for 1 s and came back"). Only a return that reads
// clean (flap_return_loss) for flap_short_outage_up_s ends a short outage.
TEST(Scenarios, LinkHeldDownWhoseFlowsPartlyRerouteStaysDown) {
  SyntheticFleet fleet(Shape());
  fleet.Run(kWarmup);
  fleet.SetLinkFault("leaf1~spine0", LinkFault{1.0});
  fleet.Run(2);
  fleet.SetLinkFault("leaf1~spine0", LinkFault{0.35});  // under the 50 % "up" line, not clean
  for (int s = 0; s < 20; ++s) {
    fleet.Run(1);
    for (const auto& f : fleet.Active()) {
      EXPECT_NE(f.finding.kind, "link_flapping") << "at +" << s << " s: " << Describe({f});
    }
  }
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_EQ(active[0].finding.kind, "link_down");
  EXPECT_EQ(active[0].finding.location.id, "leaf1~spine0");
}

// The namespace demo's held-down uplink (scripts/demo --fabric; deterministic map, flows pinned
// by source port, agents tracing their flows but not yet their echoes). With leaf1~spine0 down,
// leaf1 sends the probes pinned to spine0 up spine1 instead, while the far leaves still pin the
// echoes to spine0, which has no way to leaf1 and drops them. Traces taken during the outage show
// the probes' detour; the flows are lost on the map's path. Voted onto the detour alone, they
// made leaf1~spine1 as bad as its sibling and rolled leaf1 up (switch_degraded "2 of its 2 links
// look bad"), resolving the link_down (the CI's first try of demo_fabric, 46 s into the fault).
TEST(Scenarios, HeldDownUplinkWhoseLeafRoutesAroundItStaysLinkDown) {
  FleetShape shape = NamespaceFabricShape();
  shape.inter_flows = 8;
  shape.switch_addresses = true;
  SyntheticFleet fleet(shape);
  fleet.TraceFlows();
  fleet.Run(kWarmup);
  fleet.SetLinkFault("leaf1~spine0", LinkFault{1.0});  // every round trip over it is lost
  fleet.Run(3);
  // The agents on leaf1 trace their flows again: those pinned to spine0 now leave over spine1.
  const std::string leaf1 = "198.19.0.2", spine0 = "198.19.64.1", spine1 = "198.19.64.2";
  int detours = 0;
  TracedPaths* traced = fleet.analyzer().traced_paths();
  for (SyntheticFleet::FlowTrace t : fleet.FlowTraces()) {
    if (t.hops.size() < 3 || t.hops[0] != leaf1 || t.hops[1] != spine0) continue;
    t.hops[1] = spine1;
    const TraceOutcome out =
        traced->Record(t.src, t.dst, t.src_port, t.hops, fleet.clock().MonotonicNanos());
    ASSERT_EQ(out.kind, TraceOutcome::kResolved);
    ++detours;
  }
  ASSERT_GE(detours, 8);
  for (int s = 0; s < 60; ++s) {
    fleet.Run(1);
    const auto active = fleet.Active();
    ASSERT_EQ(active.size(), 1u) << "at +" << s << " s: " << Describe(active);
    EXPECT_EQ(active[0].finding.kind, "link_down") << "at +" << s << " s";
    EXPECT_EQ(active[0].finding.location.id, "leaf1~spine0") << "at +" << s << " s";
  }
}

// An outage longer than flap_short_outage_s that ends is a repair, not a flap: it stays
// link_down; failing again after it makes the third toggle, which is a flap.
TEST(Scenarios, LongOutageThatEndsStaysDownAndASecondOutageFlaps) {
  SyntheticFleet fleet(Shape());
  fleet.Run(kWarmup);
  fleet.SetLinkFault("leaf1~spine0", LinkFault{1.0});
  fleet.Run(15);
  fleet.ClearFaults();
  fleet.Run(6);
  ASSERT_EQ(fleet.Active().size(), 1u) << Describe(fleet.Active());
  EXPECT_EQ(fleet.Active()[0].finding.kind, "link_down");
  fleet.SetLinkFault("leaf1~spine0", LinkFault{1.0});
  const int ttd = TimeToDetect(fleet, "link_flapping", "leaf1~spine0", 3);
  EXPECT_GT(ttd, 0) << Describe(fleet.Active());
  EXPECT_EQ(fleet.Active().size(), 1u) << Describe(fleet.Active());
}

// Regression (fleet simulator, link_flap with ECMP): toggles were read only for single links, so
// an ambiguous group (a leaf's uplinks) that went down and up stayed link_down.
TEST(Scenarios, EcmpFlappingLinkFlapsAsAGroup) {
  FleetShape shape = Shape();
  shape.deterministic = false;
  SyntheticFleet fleet(shape);
  fleet.Run(kWarmup);
  for (int cycle = 0; cycle < 6; ++cycle) {
    fleet.SetLinkFault("leaf1~spine0", LinkFault{1.0});
    fleet.Run(5);
    fleet.ClearFaults();
    fleet.Run(5);
  }
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_EQ(active[0].finding.kind, "link_flapping");
  EXPECT_EQ(active[0].finding.location.id, "leaf1");
}

TEST(Scenarios, TwoSimultaneousFaults) {
  SyntheticFleet fleet(Shape());
  fleet.Run(kWarmup);
  fleet.SetLinkFault("leaf0~spine1", LinkFault{0.05});
  fleet.SetLinkFault("leaf6~spine2", LinkFault{0.1});
  fleet.Run(30);
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 2u) << Describe(active);
  std::set<std::string> where;
  for (const auto& f : active) {
    EXPECT_EQ(f.finding.kind, "link_degraded");
    where.insert(f.finding.location.id);
  }
  EXPECT_EQ(where, (std::set<std::string>{"leaf0~spine1", "leaf6~spine2"}));
}

TEST(Scenarios, CongestedSpine) {
  SyntheticFleet fleet(Shape());
  fleet.Run(kWarmup);
  for (int l = 0; l < 8; ++l) {
    fleet.SetLinkFault("leaf" + std::to_string(l) + "~spine2", LinkFault{0, 2.5});
  }
  fleet.Run(45);  // latency alone: latency_confirm_ticks (30)
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_EQ(active[0].finding.kind, "congestion");
  EXPECT_EQ(active[0].finding.location.type, "switch");
  EXPECT_EQ(active[0].finding.location.id, "spine2");
}

// A spine congested 12 s after the analyzer started, before pairs have 60 s of data: pair
// baselines refresh every few ticks until half the pairs have one (judged against their class
// before that), and queueing on most of a switch's links at once confirms in
// correlated_latency_confirm_ticks.
TEST(Scenarios, CongestedSpineSoonAfterTheStartIsFoundWithinFifteenSeconds) {
  SyntheticFleet fleet(Shape());
  fleet.Run(12);
  for (int l = 0; l < 8; ++l) {
    fleet.SetLinkFault("leaf" + std::to_string(l) + "~spine2", LinkFault{0, 4});
  }
  const int ttd = TimeToDetect(fleet, "congestion", "spine2", 30);
  ASSERT_GT(ttd, 0) << Describe(fleet.Active());
  EXPECT_LE(ttd, 15);
  std::printf("congested spine 12 s after the start: detected in %d s\n", ttd);
  fleet.Run(10);
  const auto all = fleet.analyzer().Findings(false);
  ASSERT_EQ(all.size(), 1u) << Describe(all);
  EXPECT_EQ(all[0].finding.location.id, "spine2");
}

// A congested spine whose links are slow on the last two complete seconds on their own confirms
// in correlated_fresh_latency_confirm_ticks (3) from its suspicion, not
// correlated_latency_confirm_ticks (5): two evaluations sooner, the same single finding; densely
// confirmed, one sooner again; and with the fresh lead (its links slow on the freshest seconds
// before their windows show it), one sooner again.
TEST(Scenarios, CongestedSpineSlowOnTheFreshestSecondsConfirmsTwoEvaluationsSooner) {
  bool led = false;  // the last detection's finding carries evidence fresh_latency_lead 1
  auto detect = [&led](const AnalysisConfig& config) {
    SyntheticFleet fleet(Shape(), config);
    fleet.Run(kWarmup);
    for (int l = 0; l < 8; ++l) {
      fleet.SetLinkFault("leaf" + std::to_string(l) + "~spine2", LinkFault{0, 4});
    }
    const int ttd = TimeToDetect(fleet, "congestion", "spine2", 30);
    fleet.Run(5);
    const auto all = fleet.analyzer().Findings(false);
    EXPECT_EQ(all.size(), 1u) << Describe(all);
    led = !all.empty() && all[0].finding.evidence.count("fresh_latency_lead") > 0 &&
          all[0].finding.evidence.at("fresh_latency_lead") == 1;
    return ttd;
  };
  AnalysisConfig no_lead;  // dense confirmation from the windows' suspicion on
  no_lead.correlated_fresh_latency_lead = false;
  AnalysisConfig fresh_config = no_lead;  // the fresh rule's evaluations, not dense
  fresh_config.correlated_fresh_latency_dense = false;
  AnalysisConfig persistence = fresh_config;  // without the fresh rule
  persistence.correlated_fresh_latency_confirm_ticks = persistence.correlated_latency_confirm_ticks;
  const int fresh = detect(fresh_config);
  const int before = detect(persistence);
  const int dense = detect(no_lead);
  EXPECT_FALSE(led);
  const int lead = detect(AnalysisConfig{});
  EXPECT_TRUE(led);  // five evaluations after it fired, still said
  std::printf(
      "congested spine: %d s with the fresh lead, %d s densely confirmed, %d s with the fresh "
      "rule, %d s without\n",
      lead, dense, fresh, before);
  ASSERT_GT(fresh, 0);
  ASSERT_GT(before, 0);
  EXPECT_EQ(fresh, before - 2);
  // Every evaluation from the suspicion on passed the fresh test: dense_confirm_ticks (2).
  EXPECT_EQ(dense, fresh - 1);
  // The freshest seconds showed the spine's links queueing one evaluation before their windows
  // did: that evaluation is the weak lead, and the windows' first evaluation fires.
  EXPECT_EQ(lead, dense - 1);
}

// Short correlated queueing on every link of a spine (our own bursts crossing it at once, a
// second or two) is no finding: it lifts no link's 10 s window over slow_fraction, so nothing is
// suspect for the fresh seconds to confirm. A queue of the same strength that stands is found.
TEST(Scenarios, ShortQueueingOnEveryLinkOfASpineIsNotCongestion) {
  for (int seconds : {1, 2}) {
    SyntheticFleet fleet(Shape());
    fleet.Run(kWarmup);
    for (int episode = 0; episode < 3; ++episode) {
      for (int l = 0; l < 8; ++l) {
        fleet.SetLinkFault("leaf" + std::to_string(l) + "~spine2", LinkFault{0, 4});
      }
      fleet.Run(seconds);
      fleet.ClearFaults();
      fleet.Run(20);
    }
    EXPECT_TRUE(fleet.analyzer().Findings(false).empty())
        << seconds << " s: " << Describe(fleet.analyzer().Findings(false));
  }
  SyntheticFleet fleet(Shape());
  fleet.Run(kWarmup);
  for (int l = 0; l < 8; ++l) {
    fleet.SetLinkFault("leaf" + std::to_string(l) + "~spine2", LinkFault{0, 4});
  }
  EXPECT_GT(TimeToDetect(fleet, "congestion", "spine2", 15), 0) << Describe(fleet.Active());
}

// Regression (fleet simulator, congested_spine with deterministic routing, 16 leaves): explain-away
// credits a flow leafA -> spine2 -> leafB to the first of the two links blamed, so only 8 of 16
// links kept enough unexplained flows to be blamed, the spine was not rolled up, and 8 link
// findings appeared; the reduced goodput of bursts then turned them into link_degraded and
// switch_degraded. Congestion is queueing plus lower goodput with little loss.
TEST(Scenarios, CongestedSpineOfSixteenLeavesIsOneCongestionFinding) {
  FleetShape shape = Shape();
  shape.leaves = 16;
  shape.hosts_per_leaf = 4;
  shape.inter_flows = 8;
  shape.bw_every_s = 5;
  SyntheticFleet fleet(shape);
  fleet.Run(kWarmup);
  for (int l = 0; l < 16; ++l) {
    fleet.SetLinkFault("leaf" + std::to_string(l) + "~spine2", LinkFault{0.0005, 4, 0.6});
  }
  const int ttd = TimeToDetect(fleet, "congestion", "spine2", 60);
  ASSERT_GT(ttd, 0) << Describe(fleet.Active());
  EXPECT_LE(ttd, 40);
  fleet.Run(30);
  const auto all = fleet.analyzer().Findings(false);
  ASSERT_EQ(all.size(), 1u) << Describe(all);
  EXPECT_EQ(all[0].finding.location.type, "switch");
  EXPECT_GE(all[0].finding.evidence.at("bad_links"), 12);  // 75 % of 16
}

// Regression (fleet simulator, congested_spine with ECMP): without path knowledge every leaf's
// uplinks were one ambiguous group, reported as congestion at each of the 16 leaves, plus a
// switch finding on spine00 (each group counted for its first link's spine). The leaves' groups
// all point at the same spines: one finding names that set, and none names a leaf.
TEST(Scenarios, EcmpCongestedSpineIsOneFindingOnTheSpineSet) {
  FleetShape shape = Shape();
  shape.deterministic = false;
  SyntheticFleet fleet(shape);
  fleet.Run(kWarmup);
  for (int l = 0; l < 8; ++l) {
    fleet.SetLinkFault("leaf" + std::to_string(l) + "~spine2", LinkFault{0, 4});
  }
  const int ttd = TimeToDetect(fleet, "congestion", "spine0,spine1,spine2,spine3", 60);
  ASSERT_GT(ttd, 0) << Describe(fleet.Active());
  fleet.Run(20);
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_EQ(active[0].finding.location.type, "switch");
  EXPECT_GE(active[0].finding.evidence.at("switches_alike"), 6);
}

TEST(Scenarios, BadNic) {
  SyntheticFleet fleet(Shape());
  fleet.Run(kWarmup);
  fleet.SetLinkFault("l3h2:mlx5_0~leaf3", LinkFault{0.05});
  fleet.Run(30);
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_EQ(active[0].finding.kind, "nic_degraded");
  EXPECT_EQ(active[0].finding.location.type, "nic");
  EXPECT_EQ(active[0].finding.location.node, "l3h2");
  EXPECT_EQ(active[0].finding.location.device, "mlx5_0");
}

TEST(Scenarios, NoisyHostIsBlamedNotTheNetwork) {
  SyntheticFleet fleet(Shape());
  fleet.Run(kWarmup);
  fleet.SetHostNoise("l4h1", 4.0, /*as_prober=*/true, /*as_target=*/false);
  fleet.Run(45);  // latency alone: confirmed over latency_confirm_ticks (30)
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_EQ(active[0].finding.kind, "host_network");
  EXPECT_EQ(active[0].finding.location.id, "l4h1");
}

// The namespace fabric's shape (2 spines x 3 leaves x 2 hosts): l1h1 is leaf1's only prober
// toward the other leaves. Its probes come back slow (a busy host) while leaf1~spine1 drops 5%:
// the slow prober is named, and its lost probes still speak for the link.
TEST(Scenarios, SlowProberDoesNotHideALossyLink) {
  SyntheticFleet fleet(NamespaceFabricShape());
  fleet.Run(kWarmup);
  fleet.SetHostNoise("l1h1", 4.0, /*as_prober=*/true, /*as_target=*/false);
  fleet.SetLinkFault("leaf1~spine1", LinkFault{0.05});
  const int ttd = TimeToDetect(fleet, "link_degraded", "leaf1~spine1", 30);
  ASSERT_GT(ttd, 0) << Describe(fleet.Active());
  fleet.Run(35);  // the slow prober is latency alone: latency_confirm_ticks (30)
  const auto active = fleet.Active();
  bool host = false, link = false;
  for (const auto& f : active) {
    if (f.finding.kind == "host_network" && f.finding.location.id == "l1h1") {
      host = true;
      EXPECT_EQ(f.finding.evidence.at("noisy_latency"), 1.0);
      EXPECT_EQ(f.finding.evidence.at("noisy_loss"), 0.0);
    } else if (f.finding.kind == "link_degraded" && f.finding.location.id == "leaf1~spine1") {
      link = true;
    } else {
      ADD_FAILURE() << "unexpected finding " << f.finding.kind << "@" << f.finding.location.id;
    }
  }
  EXPECT_TRUE(link) << Describe(active);
  EXPECT_TRUE(host) << Describe(active);
}

// Slow both ways is latency alone on the host's access link: it must persist for
// latency_confirm_ticks (30) before it is called a host problem.
// The namespace fabric's congestion test in simulated time: a standing queue on leaf1~spine1
// (30x RTT; the e2e tbf queue grows by ~50 ms a second, hundreds of times the namespace RTT).
// Every flow over it also crosses spine1's link to leaf2 or leaf3, whose raw rates
// therefore look bad too; they carry no bad flow of their own, so spine1 is not blamed. Severe
// queueing fires after the usual confirmation, not the 30 ticks of mild latency.
TEST(Scenarios, StandingQueueOnOneLinkOfASmallFabricIsThatLink) {
  SyntheticFleet fleet(NamespaceFabricShape());
  fleet.Run(kWarmup);
  fleet.SetLinkFault("leaf1~spine1", LinkFault{0, 30});
  const int ttd = TimeToDetect(fleet, "congestion", "leaf1~spine1", 30);
  ASSERT_GT(ttd, 0) << Describe(fleet.Active());
  EXPECT_LE(ttd, 15);
  fleet.Run(10);
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_EQ(active[0].finding.location.type, "link");
}

TEST(Scenarios, HostSlowBothWaysIsHostNetwork) {
  SyntheticFleet fleet(Shape());
  fleet.Run(kWarmup);
  fleet.SetHostNoise("l2h4", 4.0, true, true);
  const int ttd = TimeToDetect(fleet, "host_network", "l2h4", 60);
  ASSERT_GT(ttd, 0) << Describe(fleet.Active());
  EXPECT_GE(ttd, 30);
  EXPECT_LE(ttd, 40);
  fleet.Run(5);
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_EQ(active[0].finding.kind, "host_network");
  EXPECT_EQ(active[0].finding.location.id, "l2h4");
}

// Regression (fleet simulator, issue 5): background micro-congestion episodes (+15 us per
// traversal for 2.5-9 s) on one host's NIC cable were called host_network within 3 s, 2-5 false
// positives per run. Latency alone on one access link now has to persist.
// Three 9 s episodes of RTT x2.5 (the sim's worst) on three cables; returns every finding.
std::vector<TrackedFinding> EpisodesOnNicCables(const AnalysisConfig& config) {
  SyntheticFleet fleet(Shape(), config);
  fleet.Run(kWarmup);
  for (const char* cable : {"l1h3:mlx5_0~leaf1", "l5h0:mlx5_0~leaf5", "l6h2:mlx5_0~leaf6"}) {
    fleet.SetLinkFault(cable, LinkFault{0, 2.5});
    fleet.Run(9);
    fleet.ClearFaults();
    fleet.Run(20);
  }
  return fleet.analyzer().Findings(false);
}

TEST(Scenarios, QueueingEpisodeOnOneNicCableIsNotAHostProblem) {
  const auto findings = EpisodesOnNicCables(AnalysisConfig{});
  EXPECT_TRUE(findings.empty()) << Describe(findings);
  // The old rule (the usual 3 ticks) called each episode a host problem.
  AnalysisConfig old;
  old.latency_confirm_ticks = 0;
  EXPECT_EQ(EpisodesOnNicCables(old).size(), 3u);
}

// ...while the same inflation, persisting, is still named as the host's problem.
TEST(Scenarios, PersistentLatencyOnOneNicCableIsHostNetwork) {
  SyntheticFleet fleet(Shape());
  fleet.Run(kWarmup);
  fleet.SetLinkFault("l1h3:mlx5_0~leaf1", LinkFault{0, 2.5});
  const int ttd = TimeToDetect(fleet, "host_network", "l1h3", 60);
  ASSERT_GT(ttd, 0) << Describe(fleet.Active());
  EXPECT_GE(ttd, 30);
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
}

// Regression (fleet simulator, noisy_host): a host whose stack drops 1 % of the probes it sends
// or answers and delays 30 % of them by milliseconds was called nic_degraded. Its access link
// carries exactly that evidence (the synthetic fleet puts it there); the delay, ~15x the
// baseline, is more than a switch port can queue, so the host is named, within the usual 3 ticks.
TEST(Scenarios, HostThatDropsAndDelaysIsHostNetworkNotItsNic) {
  SyntheticFleet fleet(Shape());
  fleet.Run(kWarmup);
  fleet.SetLinkFault("l3h2:mlx5_0~leaf3", LinkFault{0.02, 15});
  const int ttd = TimeToDetect(fleet, "host_network", "l3h2", 30);
  ASSERT_GT(ttd, 0) << Describe(fleet.Active());
  // Its first ticks are latency alone (the loss is not yet significant), which holds it back;
  // three ticks of the quick rule in a row then fire it (11 s here).
  EXPECT_LE(ttd, 15);
  fleet.Run(10);
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_GE(active[0].finding.evidence.at("latency_inflation"), 8.0);

  AnalysisConfig old;  // without the rule: the NIC is blamed
  old.host_delay_inflation = 1e9;
  SyntheticFleet before(Shape(), old);
  before.Run(kWarmup);
  before.SetLinkFault("l3h2:mlx5_0~leaf3", LinkFault{0.02, 15});
  EXPECT_GT(TimeToDetect(before, "nic_degraded", "l3h2/mlx5_0", 30), 0)
      << Describe(before.Active());
}

// A NIC that drops and queues a little (the sim's bad_nic: loss and +20 us) stays a NIC fault.
TEST(Scenarios, NicThatDropsAndQueuesIsNicDegraded) {
  SyntheticFleet fleet(Shape());
  fleet.Run(kWarmup);
  fleet.SetLinkFault("l3h2:mlx5_0~leaf3", LinkFault{0.05, 2.0});
  fleet.Run(30);
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_EQ(active[0].finding.kind, "nic_degraded");
  EXPECT_EQ(active[0].finding.location.id, "l3h2/mlx5_0");
}

// Regression (fleet simulator, link_loss_5pct and link_loss_20pct): background queueing episodes
// on fabric links (+9 to 13 us per traversal for 4.5 to 8.6 s) gave a congestion finding on the
// link within 3 s, the suite's remaining false positives once host_network was fixed.
std::vector<TrackedFinding> EpisodesOnFabricLinks(FleetShape shape, const AnalysisConfig& config) {
  SyntheticFleet fleet(shape, config);
  fleet.Run(kWarmup);
  for (const char* link : {"leaf1~spine0", "leaf4~spine2", "leaf6~spine3"}) {
    fleet.SetLinkFault(link, LinkFault{0, 2.5});
    fleet.Run(9);
    fleet.ClearFaults();
    fleet.Run(20);
  }
  return fleet.analyzer().Findings(false);
}

TEST(Scenarios, QueueingEpisodeOnAFabricLinkIsNotCongestion) {
  FleetShape ecmp = Shape();
  ecmp.deterministic = false;
  for (const FleetShape& shape : {Shape(), ecmp}) {
    const auto findings = EpisodesOnFabricLinks(shape, AnalysisConfig{});
    EXPECT_TRUE(findings.empty()) << Describe(findings);
    AnalysisConfig old;  // the usual 3 ticks: each episode was congestion
    old.latency_confirm_ticks = 0;
    EXPECT_EQ(EpisodesOnFabricLinks(shape, old).size(), 3u)
        << Describe(EpisodesOnFabricLinks(shape, old));
  }
}

// The simulator's episodes have an exponential mean queueing delay (mean 15 us per traversal), so
// about a quarter of them inflate a 22 us RTT 3x or more and one in nine 4x or more: a shortcut
// that fires "severe" latency fast must sit well above that tail (the sim's congested spine is
// 15x, a standing tbf queue of milliseconds is beyond 64x).
TEST(Scenarios, StrongQueueingEpisodesAreNotFindingsEither) {
  for (bool deterministic : {true, false}) {
    FleetShape shape = Shape();
    shape.deterministic = deterministic;
    SyntheticFleet fleet(shape);
    fleet.Run(kWarmup);
    for (const char* link : {"leaf1~spine0", "l5h0:mlx5_0~leaf5", "leaf6~spine3"}) {
      fleet.SetLinkFault(link, LinkFault{0, 5});
      fleet.Run(9);
      fleet.ClearFaults();
      fleet.Run(20);
    }
    EXPECT_TRUE(fleet.analyzer().Findings(false).empty())
        << Describe(fleet.analyzer().Findings(false));
  }
}

// Regression (fleet simulator, healthy_30min): a 4 s episode (74 us per traversal) on one host's
// cable was latency alone on its access link (30 ticks), but for one tick the host guard saw the
// host's own results a batch ahead of its peers' and called it noisy (3 ticks) under the same
// element, node:<host>, which then fired. An element now needs the longest confirmation any of
// its observations asked for since it became suspect.
TEST(Scenarios, QuickRuleDoesNotFireWhatASlowRuleHolds) {
  ElementTracker tracker(AnalysisConfig{});
  Observation slow;
  slow.finding.kind = "host_network";
  slow.confirm_ticks = 30;
  Observation quick = slow;
  quick.confirm_ticks = 0;
  for (int t = 1; t <= 10; ++t) {
    tracker.Observe("node:h", t == 3 ? quick : slow);
    const auto changes = tracker.EndTick(t, t * 1'000'000'000LL);
    EXPECT_TRUE(changes.material.empty()) << "fired at tick " << t;
  }
  EXPECT_EQ(tracker.HealthOf("node:h"), ElementHealth::kSuspect);
}

// The healthy 16,000-agent simulator run's false host_network (98 % of node00260's samples slow,
// 12x the baseline, "for at least 30 evaluations"): the CPU-starved simulator sent a simulated
// second every few real seconds, so one queueing episode of a few seconds on the host's cable
// filled 30 one-second evaluations. The ingest lag (how late heartbeats are read) grew by as much
// as the data fell behind; a latency-only confirmation now counts the data time it covered.
// Dense confirmation: a suspect whose loss the freshest data shows again on its own fires at its
// second bad evaluation instead of its third; one without such data, and a latency-only suspect
// (which asks for persistence), keep their confirmations.
TEST(Scenarios, FreshLossConfirmsInTwoEvaluations) {
  auto fired_at = [](bool dense, int confirm_ticks) {
    ElementTracker tracker(AnalysisConfig{});
    Observation o;
    o.finding.kind = "link_degraded";
    o.dense_confirmed = dense;
    o.confirm_ticks = confirm_ticks;
    for (int t = 1; t <= 40; ++t) {
      tracker.Observe("link:x", o);
      if (!tracker.EndTick(t, t * 1'000'000'000LL).material.empty()) return t;
    }
    return 0;
  };
  EXPECT_EQ(fired_at(false, 0), 3);
  EXPECT_EQ(fired_at(true, 0), 2);
  EXPECT_EQ(fired_at(true, 30), 30);
  EXPECT_EQ(fired_at(true, 5), 5);
}

// Weak loss evidence (escalated, not yet suspect) in the evaluation before the suspicion counts as
// its first: the fresh data alone confirms what the weak evidence raised, at the suspicion. Weak
// evidence two evaluations back, or none, does not.
TEST(Scenarios, WeakEvidenceThenFreshLossConfirmsAtTheSuspicion) {
  auto fired_at = [](int weak_tick, bool dense) {
    ElementTracker tracker(AnalysisConfig{});
    Observation o;
    o.finding.kind = "link_degraded";
    o.dense_confirmed = dense;
    for (int t = 1; t <= 10; ++t) {
      if (t == weak_tick) tracker.Weak("link:x");
      if (t >= 3) tracker.Observe("link:x", o);
      if (!tracker.EndTick(t, t * 1'000'000'000LL).material.empty()) return t;
    }
    return 0;
  };
  EXPECT_EQ(fired_at(2, true), 3);  // weak at 2, suspect and fresh at 3
  EXPECT_EQ(fired_at(1, true), 4);  // weak too long ago: two evaluations
  EXPECT_EQ(fired_at(0, true), 4);
  EXPECT_EQ(fired_at(2, false), 5);  // no fresh confirmation: three evaluations
}

// Between ticks the dense test fires only what the tick's own dense rule would have fired had the
// freshest data passed: a link with its evaluations counted (two, or a weak one and the
// suspicion), on loss that may be densely confirmed, not yet confirmed. Latency alone, a link held
// for its switch (no dense_recheck) and a first suspicion wait for their ticks.
TEST(Scenarios, DenseRecheckFiresOnlyWhatTheTicksDenseRuleWould) {
  Observation o;
  o.finding.kind = "link_degraded";
  o.dense_recheck = true;
  const std::map<std::string, double> evidence = {{"dense_between_ticks", 1}};
  {
    ElementTracker tracker(AnalysisConfig{});
    tracker.Weak("link:x");
    EXPECT_TRUE(tracker.EndTick(1, 1'000'000'000).material.empty());
    tracker.Observe("link:x", o);
    EXPECT_TRUE(tracker.EndTick(2, 2'000'000'000).material.empty());
    ASSERT_TRUE(tracker.DenseRecheckable("link:x"));
    const auto changes = tracker.ConfirmDense("link:x", 2'250'000'000, evidence);
    ASSERT_EQ(changes.material.size(), 1u);
    EXPECT_EQ(changes.material[0].finding.kind, "link_degraded");
    EXPECT_EQ(changes.material[0].finding.evidence.at("dense_between_ticks"), 1);
    EXPECT_EQ(tracker.HealthOf("link:x"), ElementHealth::kFiring);
    // Once firing, nothing more to confirm.
    EXPECT_FALSE(tracker.DenseRecheckable("link:x"));
    EXPECT_TRUE(tracker.ConfirmDense("link:x", 2'500'000'000, evidence).material.empty());
  }
  {
    // A first suspicion without a weak evaluation before it: one evaluation, not two.
    ElementTracker tracker(AnalysisConfig{});
    tracker.Observe("link:x", o);
    tracker.EndTick(1, 1'000'000'000);
    EXPECT_FALSE(tracker.DenseRecheckable("link:x"));
    EXPECT_TRUE(tracker.ConfirmDense("link:x", 1'250'000'000, evidence).material.empty());
    tracker.Observe("link:x", o);
    tracker.EndTick(2, 2'000'000'000);
    EXPECT_TRUE(tracker.DenseRecheckable("link:x"));
  }
  auto recheckable_after_two = [&](Observation obs) {
    ElementTracker tracker(AnalysisConfig{});
    for (int t = 1; t <= 2; ++t) {
      tracker.Observe("link:x", obs);
      tracker.EndTick(t, t * 1'000'000'000LL);
    }
    return tracker.DenseRecheckable("link:x");
  };
  Observation latency = o;
  latency.confirm_ticks = 30;  // latency alone asks for persistence
  EXPECT_FALSE(recheckable_after_two(latency));
  Observation held = o;
  held.dense_recheck = false;  // held for its switch, or latency: blame_link does not set it
  EXPECT_FALSE(recheckable_after_two(held));
  Observation confirmed = o;
  confirmed.dense_confirmed = true;  // fired at the tick already
  EXPECT_FALSE(recheckable_after_two(confirmed));
}

// On a fleet whose links carry dense probes (32 flows per inter-leaf pair), 5 % loss on one link
// is confirmed by its freshest seconds: one evaluation sooner than with three consecutive ones.
TEST(Scenarios, DenseLossIsConfirmedOneEvaluationSooner) {
  auto ttd = [](int dense_ticks) {
    AnalysisConfig c;
    c.dense_confirm_ticks = dense_ticks;
    SyntheticFleet fleet(Shape(), c);
    fleet.Run(kWarmup);
    fleet.SetLinkFault("leaf2~spine1", LinkFault{0.05});
    return TimeToDetect(fleet, "link_degraded", "leaf2~spine1", 20);
  };
  const int dense = ttd(2), counted = ttd(3);
  ASSERT_GT(dense, 0);
  EXPECT_EQ(dense, counted - 1) << "dense " << dense << " s, three evaluations " << counted << " s";
}

// Runs `fleet` second by second, with or without the aggregator's between-tick work, until a
// finding of `kind` at `location` is active; returns the seconds it took, or -1.
int TimeToDetectWith(SyntheticFleet& fleet, bool between_ticks, const std::string& kind,
                     const std::string& location, int limit) {
  for (int s = 1; s <= limit; ++s) {
    if (between_ticks) {
      fleet.RunWithBetweenTicks(1);
    } else {
      fleet.Run(1);
    }
    for (const auto& f : fleet.Active()) {
      if (f.finding.kind == kind && f.finding.location.id == location) return s;
    }
  }
  return -1;
}

// A lossy link (30 %) of a fabric whose links carry a few hundred probes in the window (8 flows
// per inter-leaf pair, 4 hosts per leaf): its first lost probes arrive between ticks, and the
// leads they make there (the tick's own lead rule, read 250 ms after ingest) count as the link's
// weak evaluation, so the tick after them confirms it from its fresh data alone (the dense rule),
// one evaluation sooner than when that tick has to find the lead itself. Same seed, same data:
// only when the lead is judged differs. The synthetic fleet does not escalate (its rates are
// fixed); the fresh data is dense enough without.
TEST(Scenarios, LeadBetweenTicksConfirmsOneEvaluationSooner) {
  auto ttd = [](bool between, size_t* leads) {
    SyntheticFleet fleet(MidShape());
    fleet.Run(kWarmup);
    fleet.SetLinkFault("leaf2~spine1", LinkFault{0.3});
    const int t = TimeToDetectWith(fleet, between, "link_degraded", "leaf2~spine1", 20);
    *leads = fleet.between_leads().size();
    EXPECT_EQ(fleet.Active().size(), 1u) << Describe(fleet.Active());
    return t;
  };
  size_t leads_off = 0, leads_on = 0;
  const int at_ticks = ttd(false, &leads_off), between = ttd(true, &leads_on);
  ASSERT_GT(at_ticks, 0);
  ASSERT_GT(between, 0);
  EXPECT_EQ(leads_off, 0u);
  EXPECT_GE(leads_on, 1u);
  EXPECT_EQ(between, at_ticks - 1)
      << "between ticks " << between << " s, at ticks " << at_ticks << " s";
}

// The between-tick work keeps a healthy fleet as it was: background losses (10^-4 per crossing)
// make leads between ticks as they make leads at ticks, and the findings are those of the same
// fleet without it (none): the dense test asks as much of the data as at a tick.
TEST(Scenarios, HealthyTenMinutesWithBetweenTickWorkGivesNoFindings) {
  for (FleetShape shape : {MidShape(), NamespaceFabricShape()}) {
    shape.background_loss = 1e-4;
    SyntheticFleet fleet(shape);
    fleet.Run(kWarmup);
    fleet.RunWithBetweenTicks(600);
    EXPECT_TRUE(fleet.analyzer().Findings(false).empty())
        << Describe(fleet.analyzer().Findings(false));
    EXPECT_GT(fleet.between_leads().size(), 0u) << shape.leaves << " leaves";
    EXPECT_EQ(fleet.analyzer().stats().between_tick_leads, fleet.between_leads().size());
    EXPECT_EQ(fleet.analyzer().stats().between_tick_findings, 0u);
    std::printf("%d leaves: %zu leads between ticks in 600 s\n", shape.leaves,
                fleet.between_leads().size());
  }
}

TEST(Scenarios, LatencyAloneOverALaggingIngestWaitsForDataTime) {
  Observation slow;
  slow.finding.kind = "host_network";
  slow.confirm_ticks = 30;
  auto fired_at = [&](double lag_growth_per_tick) {
    ElementTracker tracker(AnalysisConfig{});
    for (int t = 1; t <= 400; ++t) {
      tracker.SetIngestLag(lag_growth_per_tick * t);
      tracker.Observe("node:h", slow);
      if (!tracker.EndTick(t, t * 1'000'000'000LL).material.empty()) return t;
    }
    return 0;
  };
  EXPECT_EQ(fired_at(0), 30);     // a steady lag: 30 evaluations as before
  EXPECT_EQ(fired_at(0.02), 30);  // heartbeat jitter does not delay it
  // Data a quarter as fast as the ticks: 30 evaluations are 7.5 s of the fabric's time; it fires
  // once the evaluations cover 29 s of data.
  const int t = fired_at(0.75);
  EXPECT_GT(t, 100);
  EXPECT_LT(t, 125);
}

TEST(Scenarios, BandwidthHalved) {
  FleetShape shape = Shape();
  shape.bw_every_s = 5;
  SyntheticFleet fleet(shape);
  fleet.Run(kWarmup);
  fleet.SetLinkFault("leaf4~spine0", LinkFault{0, 1, 0.5});
  const int ttd = TimeToDetect(fleet, "link_degraded", "leaf4~spine0", 240);
  ASSERT_GT(ttd, 0) << Describe(fleet.Active());
  std::printf("bandwidth halved: detected in %d s\n", ttd);
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_NEAR(active[0].finding.evidence.at("bandwidth_ratio"), 0.5, 0.1);
}

// Queueing at 40x the RTT on leaf1~spine1 of the namespace fabric, where bursts get a quarter of
// the goodput and `slowed_fraction` of the probes are slow: the one finding, 20 s after it first
// appears as `kind`, is still of that kind.
void ExpectSlowLinkKind(double slowed_fraction, const std::string& kind) {
  FleetShape shape = NamespaceFabricShape();
  shape.bw_every_s = 2;
  SyntheticFleet fleet(shape);
  fleet.Run(kWarmup);
  LinkFault fault;
  fault.rtt_factor = 40;
  fault.bw_factor = 0.25;
  fault.slowed_fraction = slowed_fraction;
  fleet.SetLinkFault("leaf1~spine1", fault);
  const int ttd = TimeToDetect(fleet, kind, "leaf1~spine1", 60);
  ASSERT_GT(ttd, 0) << Describe(fleet.Active());
  fleet.Run(20);
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_EQ(active[0].finding.kind, kind) << Describe(active);
}

// A tbf far below the line rate (tests/fabric_e2e TbfDegradedTest): only our own bursts load the
// link, so probes queue only while a burst crosses it, and the bursts get a quarter of the
// goodput. That is the link's capacity: link_degraded, not congestion.
TEST(Scenarios, QueueingThatComesWithOurBurstsOnASlowLinkIsLinkDegraded) {
  ExpectSlowLinkKind(0.35, "link_degraded");
}

// Background traffic keeps the queue standing: nearly every probe is slow, and our bursts get
// less goodput because they share the link. That stays congestion.
TEST(Scenarios, StandingQueueWithLowBurstGoodputIsCongestion) {
  ExpectSlowLinkKind(1.0, "congestion");
}

TEST(Scenarios, WithoutMapLocalizesToHost) {
  FleetShape shape = Shape();
  shape.with_map = false;
  SyntheticFleet fleet(shape);
  fleet.Run(kWarmup);
  fleet.SetLinkFault("l3h2:mlx5_0~leaf3", LinkFault{0.2});
  fleet.Run(30);
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_EQ(active[0].finding.kind, "host_network");
  EXPECT_EQ(active[0].finding.location.id, "l3h2");
  EXPECT_NE(active[0].finding.summary.find("without a fabric map"), std::string::npos);
  EXPECT_TRUE(fleet.analyzer().Links().empty());
}

TEST(Scenarios, EcmpWithoutPathKnowledgeNamesTheCandidateGroup) {
  FleetShape shape = Shape();
  shape.deterministic = false;
  SyntheticFleet fleet(shape);
  fleet.Run(kWarmup);
  fleet.SetLinkFault("leaf2~spine1", LinkFault{0.1});
  fleet.Run(30);
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_EQ(active[0].finding.kind, "link_degraded");
  // Every uplink of leaf2 explains the same flows: the finding names the leaf and the candidates.
  EXPECT_EQ(active[0].finding.location.type, "switch");
  EXPECT_EQ(active[0].finding.location.id, "leaf2");
  EXPECT_NE(active[0].finding.summary.find("leaf2~spine1"), std::string::npos);
}

// RDMA UD: every latency probe sent as rdma_ud, with rtt_ns the network RTT and the hosts' delays
// beside it (docs/rdma.md). The network RTT and loss localize links as UDP's do; a host slow to
// poll or answer is host_network, not a link.
struct HostDelay {
  int64_t prober_ns = 12'000;  // a host that polls: microseconds
  int64_t responder_ns = 9'000;
};

// `bursts`, when given, sees each bandwidth result (tcp_bw) first.
void SendAsRdma(SyntheticFleet& fleet, std::map<std::string, HostDelay>& slow,
                std::function<void(ReportedProbe&)> bursts = nullptr) {
  fleet.SetRewrite([&slow, bursts](std::vector<ReportedProbe>& batch) {
    for (ReportedProbe& r : batch) {
      if (bursts && r.transport == Transport::kTcpBw) bursts(r);
      if (r.transport != Transport::kUdp) continue;
      r.transport = Transport::kRdmaUd;
      auto src = slow.find(r.src_node), dst = slow.find(r.dst_node);
      r.prober_host_ns = (src == slow.end() ? HostDelay{} : src->second).prober_ns;
      r.responder_host_ns = (dst == slow.end() ? HostDelay{} : dst->second).responder_ns;
      r.src_nic = r.dst_nic = "mlx5_0";
    }
  });
}

TEST(RdmaScenarios, HealthyRdmaFleetGivesNoFindings) {
  SyntheticFleet fleet(NamespaceFabricShape());
  std::map<std::string, HostDelay> slow;
  SendAsRdma(fleet, slow);
  fleet.Run(kWarmup + 60);
  EXPECT_TRUE(fleet.Active().empty()) << Describe(fleet.Active());
  EXPECT_GT(fleet.analyzer().stats().baselines_ready, 0u);
}

TEST(RdmaScenarios, LinkLossOnRdmaProbesBlamesThatLink) {
  SyntheticFleet fleet(NamespaceFabricShape());
  std::map<std::string, HostDelay> slow;
  SendAsRdma(fleet, slow);
  fleet.Run(kWarmup);
  fleet.SetLinkFault("leaf1~spine1", LinkFault{0.05});
  ASSERT_GT(TimeToDetect(fleet, "link_degraded", "leaf1~spine1", 30), 0)
      << Describe(fleet.Active());
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
}

TEST(RdmaScenarios, SlowHostIsHostNetworkNotALink) {
  SyntheticFleet fleet(NamespaceFabricShape());
  std::map<std::string, HostDelay> slow;
  SendAsRdma(fleet, slow);
  fleet.Run(kWarmup);
  const std::string busy = SyntheticFleet::HostName(1, 0);
  // The host takes milliseconds to poll and to answer; the network RTT stays as it was.
  slow[busy] = HostDelay{4'000'000, 3'000'000};
  fleet.Run(20);
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  const Finding& f = active[0].finding;
  EXPECT_EQ(f.kind, "host_network");
  EXPECT_EQ(f.location.id, busy);
  EXPECT_NEAR(f.evidence.at("prober_host_delay_ms"), 4.0, 1e-9);
  EXPECT_NEAR(f.evidence.at("responder_host_delay_ms"), 3.0, 1e-9);
  EXPECT_NEAR(f.evidence.at("fleet_prober_host_delay_ms"), 0.012, 1e-9);
  EXPECT_NE(f.summary.find("not the fabric"), std::string::npos) << f.summary;
  for (const LinkView& l : fleet.analyzer().Links()) EXPECT_EQ(l.state, "ok") << l.id;
  // Quick again: the finding resolves after the recovery time.
  slow.clear();
  fleet.Run(45);
  EXPECT_TRUE(fleet.Active().empty()) << Describe(fleet.Active());
}

// A host with a high RDMA host delay also posts and polls its RC bursts late, and its peers'
// bursts toward it read low too: the host explains them (host_network), so neither its access
// link nor its pairs get a bandwidth finding (Analyzer::Evaluate, slow_host). The busy host is
// l1h1, a representative of two of the 56 leaf pairs in this shape (bursts from l0h1 and to
// l0h3), so its low bursts are a minority of the fleet's and alone name its NIC
// (LowRcBurstsWithoutHostDelayAreFindings): the host-delay case then shows the setting aside.
std::vector<TrackedFinding> LowRcBurstsOfOneHost(bool with_host_delay) {
  FleetShape shape = Shape();
  shape.bw_every_s = 2;
  SyntheticFleet fleet(shape);
  std::map<std::string, HostDelay> slow;
  bool low = false;
  const std::string busy = SyntheticFleet::HostName(1, 1);
  int low_bursts = 0;
  SendAsRdma(fleet, slow, [&low, &busy, &low_bursts](ReportedProbe& r) {
    r.transport = Transport::kRdmaRc;
    if (low && (r.src_node == busy || r.dst_node == busy)) {
      r.goodput_bps *= 0.3;
      ++low_bursts;
    }
  });
  fleet.Run(kWarmup);
  EXPECT_TRUE(fleet.Active().empty()) << Describe(fleet.Active());
  low = true;
  if (with_host_delay) slow[busy] = HostDelay{5'000'000, 5'000'000};
  fleet.Run(30);
  EXPECT_GE(low_bursts, 20) << "the busy host bursts";
  if (with_host_delay) {
    for (const LinkView& l : fleet.analyzer().Links()) EXPECT_EQ(l.state, "ok") << l.id;
  }
  return fleet.Active();
}

TEST(RdmaScenarios, SlowHostsLowRcBurstsAreTheHostsNotALink) {
  const auto active = LowRcBurstsOfOneHost(true);
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_EQ(active[0].finding.kind, "host_network");
  EXPECT_EQ(active[0].finding.location.id, SyntheticFleet::HostName(1, 1));
}

// The control of the case above: the same low bursts without the host delay are bandwidth
// evidence against the host's NIC (its access link reads 0.3 of its bandwidth).
TEST(RdmaScenarios, LowRcBurstsWithoutHostDelayAreFindings) {
  const auto active = LowRcBurstsOfOneHost(false);
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  EXPECT_EQ(active[0].finding.kind, "nic_degraded") << Describe(active);
  EXPECT_EQ(active[0].finding.location.id, SyntheticFleet::HostName(1, 1) + "/mlx5_0");
}

TEST(RdmaScenarios, HostDelayUnderTheFloorIsNoFinding) {
  SyntheticFleet fleet(NamespaceFabricShape());
  std::map<std::string, HostDelay> slow;
  SendAsRdma(fleet, slow);
  fleet.Run(kWarmup);
  // 50x the fleet's, but 0.6 ms: a host that is merely slower than the others.
  slow[SyntheticFleet::HostName(2, 1)] = HostDelay{600'000, 450'000};
  fleet.Run(20);
  EXPECT_TRUE(fleet.Active().empty()) << Describe(fleet.Active());
}

// The bursts l1h1 sends read 0.3 of the expected goodput, and its agent reports its CPUs
// `busy_permille` busy (0: not measured) and under `pressure_permille` CPU pressure during them;
// every other burst reports 30 % busy and 10 % pressure. (A host's CPU limits the bursts it
// sends; the bursts toward it are its peers', which report their own CPUs.)
std::vector<TrackedFinding> LowBurstsOfOneHostWithCpu(
    uint16_t busy_permille, int* set_aside, double cpu_busy_limit = 0.9,
    uint16_t pressure_permille = 100,
    double cpu_pressure_limit = AnalysisConfig{}.bandwidth_cpu_pressure_limit) {
  FleetShape shape = Shape();
  shape.bw_every_s = 2;
  AnalysisConfig config;
  config.bandwidth_cpu_busy_limit = cpu_busy_limit;
  config.bandwidth_cpu_pressure_limit = cpu_pressure_limit;
  SyntheticFleet fleet(shape, config);
  bool low = false;
  const std::string busy = SyntheticFleet::HostName(1, 1);
  int low_bursts = 0;
  fleet.SetRewrite([&](std::vector<ReportedProbe>& batch) {
    for (ReportedProbe& r : batch) {
      if (r.transport != Transport::kTcpBw) continue;
      r.cpu_busy_permille = 300;
      r.cpu_peak_permille = 450;
      r.cpu_pressure_permille = 100;
      if (!low || r.src_node != busy) continue;
      r.goodput_bps *= 0.3;
      r.cpu_busy_permille = busy_permille;
      r.cpu_peak_permille = busy_permille == 0 ? 0 : 1000;
      r.cpu_pressure_permille = pressure_permille;
      ++low_bursts;
    }
  });
  fleet.Run(kWarmup);
  EXPECT_TRUE(fleet.Active().empty()) << Describe(fleet.Active());
  low = true;
  fleet.Run(30);
  EXPECT_GE(low_bursts, 10) << "the busy host bursts";
  *set_aside = static_cast<int>(fleet.analyzer().stats().cpu_saturated_bursts);
  return fleet.Active();
}

// The host's own CPUs were saturated (97 %) during its low bursts: no link, NIC or pair finding;
// one host_network finding that quotes the CPU figures.
TEST(Scenarios, LowBurstsOfACpuSaturatedHostAreTheHostsNotALink) {
  int set_aside = 0;
  const auto active = LowBurstsOfOneHostWithCpu(970, &set_aside);
  EXPECT_GE(set_aside, 2);
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  const Finding& f = active[0].finding;
  EXPECT_EQ(f.kind, "host_network");
  EXPECT_EQ(f.location.id, SyntheticFleet::HostName(1, 1));
  EXPECT_GE(f.evidence.at("cpu_saturated_bursts"), 2);
  EXPECT_NEAR(f.evidence.at("cpu_busy"), 0.97, 1e-9);
  EXPECT_NEAR(f.evidence.at("cpu_busiest"), 1.0, 1e-9);
  EXPECT_NEAR(f.evidence.at("bandwidth_ratio"), 0.3, 0.05);
  EXPECT_NE(f.summary.find("97% busy"), std::string::npos) << f.summary;
  EXPECT_NE(f.summary.find("not the fabric"), std::string::npos) << f.summary;
}

// The control: the same low bursts on a host at 40 % CPU are evidence against its NIC (its
// access link carries every one of them), and so are the saturated host's without the rule.
TEST(Scenarios, LowBurstsWithoutCpuSaturationAreLinkEvidence) {
  for (const auto& [busy, limit] : {std::pair<uint16_t, double>{400, 0.9}, {970, 0.0}}) {
    int set_aside = 0;
    const auto active = LowBurstsOfOneHostWithCpu(busy, &set_aside, limit);
    EXPECT_EQ(set_aside, 0);
    ASSERT_EQ(active.size(), 1u) << Describe(active);
    EXPECT_EQ(active[0].finding.kind, "nic_degraded") << busy;
    EXPECT_EQ(active[0].finding.location.id, SyntheticFleet::HostName(1, 1) + "/mlx5_0");
    EXPECT_EQ(active[0].finding.evidence.count("cpu_saturated_bursts"), 0u);
  }
}

// qualify_loopback in the grader's CI: loopback bursts read low while the host was contended and
// the busy rule did not set them aside (here: busy not measured, as for an RC burst on a small
// host); their CPU pressure (58 %, the median of loopback bursts beside two busy loops on a
// 2-core host, docs/probes.md) sets them aside, and the host's finding says "CPU pressure" with
// the figure, not "busy".
TEST(Scenarios, LowShortBurstsOfAHostUnderCpuPressureAreTheHostsNotALink) {
  int set_aside = 0;
  const auto active = LowBurstsOfOneHostWithCpu(0, &set_aside, 0.9, 580);
  EXPECT_GE(set_aside, 2);
  ASSERT_EQ(active.size(), 1u) << Describe(active);
  const Finding& f = active[0].finding;
  EXPECT_EQ(f.kind, "host_network");
  EXPECT_EQ(f.location.id, SyntheticFleet::HostName(1, 1));
  EXPECT_GE(f.evidence.at("cpu_pressure_bursts"), 2);
  EXPECT_EQ(f.evidence.at("cpu_pressure_bursts"), f.evidence.at("cpu_saturated_bursts"));
  EXPECT_NEAR(f.evidence.at("cpu_pressure"), 0.58, 1e-9);
  EXPECT_EQ(f.evidence.count("cpu_busy"), 0u);
  EXPECT_NEAR(f.evidence.at("bandwidth_ratio"), 0.3, 0.05);
  EXPECT_NE(f.summary.find("CPU pressure was 58%"), std::string::npos) << f.summary;
  EXPECT_EQ(f.summary.find("busy"), std::string::npos) << f.summary;
  EXPECT_NE(f.summary.find("not the fabric"), std::string::npos) << f.summary;
}

// The control: the same low bursts under 5 % CPU pressure (a 2-core host beside one busy loop
// read at most 4.6 %) are evidence against the host's NIC, and so are those under 58 % with the
// pressure rule off.
TEST(Scenarios, LowBurstsWithoutCpuPressureAreLinkEvidence) {
  for (const auto& [pressure, limit] : {std::pair<uint16_t, double>{50, 0.25}, {580, 0.0}}) {
    int set_aside = 0;
    const auto active = LowBurstsOfOneHostWithCpu(0, &set_aside, 0.9, pressure, limit);
    EXPECT_EQ(set_aside, 0);
    ASSERT_EQ(active.size(), 1u) << Describe(active);
    EXPECT_EQ(active[0].finding.kind, "nic_degraded") << pressure;
    EXPECT_EQ(active[0].finding.location.id, SyntheticFleet::HostName(1, 1) + "/mlx5_0");
  }
}

// Bandwidth evidence is confirmed before it fires: one burst at 0.2 of the expected goodput (the
// demo's false finding was one at 0.23) names nothing on a mapped fabric, neither its links
// (which need `min_flows` flows with a low burst) nor its pair (which needs 2 from different
// flows). BandwidthHalved is the confirmed case.
TEST(Scenarios, OneLowBurstOnAMappedFabricIsNotAFinding) {
  FleetShape shape = Shape();
  shape.bw_every_s = 2;
  SyntheticFleet fleet(shape);
  int low_left = 0;
  fleet.SetRewrite([&low_left](std::vector<ReportedProbe>& batch) {
    for (ReportedProbe& r : batch) {
      if (r.transport != Transport::kTcpBw || r.lost || low_left == 0) continue;
      r.goodput_bps *= 0.2;
      --low_left;
    }
  });
  fleet.Run(kWarmup);
  low_left = 1;
  int max_active = 0;
  for (int s = 0; s < 60; ++s) {
    fleet.Run(1);
    max_active = std::max<int>(max_active, fleet.Active().size());
  }
  EXPECT_EQ(low_left, 0) << "the low burst was sent";
  EXPECT_EQ(max_active, 0) << Describe(fleet.analyzer().Findings(false));
}

// tests/fabric_e2e TbfDegradedTest as its agents burst: each host bursts to one peer on its own
// leaf and one on each other leaf every 10 s (random phase), from a fresh ephemeral source port
// each time, reported as flow 0 (the fabric pins every TCP burst to path 0, spine0 here). A tbf
// on leaf0's path-0 uplink gives the bursts crossing it a quarter of the goodput and queues some
// probes; it is removed 1 s after the finding, as the test does. Nothing but that link (or its
// spine) may be named, during the fault or after it.
struct TbfRun {
  int detected_s = -1;
  std::set<std::string> others;  // other link or switch findings, kind@location
  std::string first_other;       // when the first one came, and its summary
};

TbfRun RunTbfLikeTheE2eTest(uint64_t seed, double low_share) {
  FleetShape shape = NamespaceFabricShape();
  shape.seed = seed;
  SyntheticFleet fleet(shape);
  const FabricMap& map = *fleet.map();
  const std::string fault_link = "leaf0~spine0";
  const aggregator::LinkIndex faulty = *map.FindLink(fault_link);
  struct Burst {
    std::string src, dst;
    double phase;
    bool crosses;
  };
  std::vector<Burst> bursts;
  std::mt19937_64 rng(seed * 7919 + 1);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  std::normal_distribution<double> gauss(0.0, 1.0);
  for (int l = 0; l < shape.leaves; ++l) {
    for (int h = 0; h < shape.hosts_per_leaf; ++h) {
      const std::string src = SyntheticFleet::HostName(l, h);
      std::vector<std::string> peers = {SyntheticFleet::HostName(l, 1 - h)};
      for (int m = 0; m < shape.leaves; ++m) {
        if (m != l) peers.push_back(SyntheticFleet::HostName(m, h));
      }
      for (const std::string& dst : peers) {
        const auto paths =
            map.Paths(*map.FindHostNic(src, "mlx5_0"), *map.FindHostNic(dst, "mlx5_0")).FullPaths();
        const auto& p0 = paths.front();
        bursts.push_back(
            {src, dst, 10 * uni(rng), std::find(p0.begin(), p0.end(), faulty) != p0.end()});
      }
    }
  }
  bool fault_on = false;
  int second = 0;
  uint16_t port = 32768;
  fleet.SetRewrite([&](std::vector<ReportedProbe>& batch) {
    ++second;
    for (const Burst& b : bursts) {
      const double t = std::fmod(second - b.phase + 1000.0, 10.0);
      if (t >= 1.0) continue;
      ReportedProbe r;
      r.src_node = b.src;
      r.dst_node = b.dst;
      r.transport = Transport::kTcpBw;
      r.src_port = port++;
      if (port < 32768) port = 32768;
      r.flow_id = 0;
      r.bytes = 4 << 20;
      const double factor = fault_on && b.crosses ? 0.25 : 1.0;
      double noise = std::clamp(1.0 + 0.05 * gauss(rng), 0.8, 1.2);
      if (uni(rng) < low_share) noise = 0.45 + 0.3 * uni(rng);  // a busy host or a shared NIC
      r.goodput_bps = 200e6 * factor * noise;
      r.rtt_ns = static_cast<int64_t>(r.bytes * 8 / r.goodput_bps * 1e9);
      batch.push_back(std::move(r));
    }
  });
  std::string phase;
  int at = 0;
  auto others = [&](TbfRun& run) {
    ++at;
    for (const auto& f : fleet.Active()) {
      const auto& loc = f.finding.location;
      if ((loc.type == "link" || loc.type == "switch") && loc.id != fault_link) {
        run.others.insert(f.finding.kind + "@" + loc.id);
        if (run.first_other.empty()) {
          run.first_other = phase + " +" + std::to_string(at) + " s: " + f.finding.summary;
        }
      }
    }
  };
  TbfRun run;
  fleet.Run(kWarmup);
  fault_on = true;
  LinkFault fault;
  fault.rtt_factor = 40;
  fault.slowed_fraction = 0.35;
  fleet.SetLinkFault(fault_link, fault);
  phase = "fault";
  for (int s = 1; s <= 60 && run.detected_s < 0; ++s) {
    fleet.Run(1);
    others(run);
    for (const auto& f : fleet.Active()) {
      if (f.finding.location.id == fault_link) run.detected_s = s;
    }
  }
  fleet.Run(1);
  fault_on = false;
  fleet.ClearFaults();
  phase = "after";
  at = 0;
  for (int s = 0; s < 120; ++s) {
    fleet.Run(1);
    others(run);
  }
  return run;
}

// Before the expected goodput kept its history (AnalysisConfig::bandwidth_window_s), 8 of the 12
// inter-leaf bursts crossed the tbf, the class median fell to their goodput within a burst round,
// and 11% of 1000 simulated runs found the link after more than 30 s or not at all (0 after). The
// seeds here are fixed: every run finds the link within 30 s and names nothing else, during the
// fault or after it. Healthy bursts read 0.45-0.75 of the line rate 3% of the time.
TEST(Scenarios, TbfOnALinkMostBurstsCrossNamesOnlyThatLink) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const TbfRun run = RunTbfLikeTheE2eTest(seed, 0.03);
    std::string others;
    for (const auto& o : run.others) others += o + " ";
    EXPECT_GT(run.detected_s, 0) << "seed " << seed;
    EXPECT_LE(run.detected_s, 30) << "seed " << seed;
    EXPECT_TRUE(run.others.empty()) << "seed " << seed << ": " << others << run.first_other;
  }
}

}  // namespace
}  // namespace fw::analysis::testing
