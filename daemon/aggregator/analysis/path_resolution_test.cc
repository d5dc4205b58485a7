// How the analyzer knows a flow's path: the traced path where an agent traced the flow, the map
// where routing is deterministic, the equal-cost candidates otherwise; and the finding's evidence
// says which (paths_traced, paths_map, paths_candidates). A synthetic ECMP fleet whose routing hash
// the analyzer cannot see.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "daemon/aggregator/analysis/testing/synthetic_fleet.h"

namespace fw::analysis::testing {
namespace {

constexpr int kWarmup = 90;  // baselines need ~60 s of data

// Warms the fleet up, puts 5 % loss on leaf2~spine1 for 30 s and returns the active findings.
std::vector<TrackedFinding> AfterLossOnLeaf2Spine1(SyntheticFleet& fleet) {
  fleet.Run(kWarmup);
  fleet.SetLinkFault("leaf2~spine1", LinkFault{0.05});
  fleet.Run(30);
  return fleet.Active();
}

TEST(PathResolution, UntracedEcmpNamesTheCandidateGroupAndSaysSo) {
  SyntheticFleet fleet(TracedEcmpShape());
  const auto active = AfterLossOnLeaf2Spine1(fleet);
  ASSERT_EQ(active.size(), 1u) << DescribeFindings(active);
  EXPECT_EQ(active[0].finding.location.id, "leaf2");  // the group, at its common switch
  EXPECT_GT(FindingEvidence(active[0], "paths_candidates"), 0);
  EXPECT_EQ(FindingEvidence(active[0], "paths_traced"), 0);
}

TEST(PathResolution, TracedFlowsNameTheExactLink) {
  SyntheticFleet fleet(TracedEcmpShape());
  fleet.TraceFlows();
  const auto active = AfterLossOnLeaf2Spine1(fleet);
  ASSERT_EQ(active.size(), 1u) << DescribeFindings(active);
  EXPECT_EQ(active[0].finding.kind, "link_degraded");
  EXPECT_EQ(active[0].finding.location.type, "link");
  EXPECT_EQ(active[0].finding.location.id, "leaf2~spine1");
  EXPECT_GE(FindingEvidence(active[0], "paths_traced"), 3);
  EXPECT_EQ(FindingEvidence(active[0], "paths_candidates"), 0);
  const TracedPaths::Stats st = fleet.analyzer().traced_paths()->stats();
  EXPECT_EQ(st.resolved, st.traces);
  EXPECT_EQ(st.flows, fleet.flow_count());
}

TEST(PathResolution, TracedFlowsNameTheCongestedSpine) {
  SyntheticFleet fleet(TracedEcmpShape());
  fleet.TraceFlows();
  fleet.Run(kWarmup);
  for (int l = 0; l < 8; ++l) {
    fleet.SetLinkFault("leaf" + std::to_string(l) + "~spine2", LinkFault{0, 4});
  }
  fleet.Run(60);
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u) << DescribeFindings(active);
  EXPECT_EQ(active[0].finding.kind, "congestion");
  EXPECT_EQ(active[0].finding.location.type, "switch");
  EXPECT_EQ(active[0].finding.location.id, "spine2");
}

// Flows whose spine does not answer TTL expiry stay on their candidates, and the finding says so;
// the traced ones still narrow the blame.
TEST(PathResolution, SilentSpinesLeaveFlowsOnTheirCandidates) {
  SyntheticFleet fleet(TracedEcmpShape());
  fleet.TraceFlows({"spine0", "spine1", "spine2", "spine3"});
  const TracedPaths::Stats st = fleet.analyzer().traced_paths()->stats();
  EXPECT_GT(st.ambiguous, 0u);
  EXPECT_EQ(st.resolved + st.ambiguous, st.traces);
  const auto active = AfterLossOnLeaf2Spine1(fleet);
  ASSERT_EQ(active.size(), 1u) << DescribeFindings(active);
  EXPECT_EQ(active[0].finding.location.id, "leaf2");
  EXPECT_GT(FindingEvidence(active[0], "paths_candidates"), 0);
}

TEST(PathResolution, DeterministicMapIsSaidToBeTheMap) {
  FleetShape shape = TracedEcmpShape();
  shape.deterministic = true;
  SyntheticFleet fleet(shape);
  const auto active = AfterLossOnLeaf2Spine1(fleet);
  ASSERT_EQ(active.size(), 1u) << DescribeFindings(active);
  EXPECT_EQ(active[0].finding.location.id, "leaf2~spine1");
  EXPECT_GE(FindingEvidence(active[0], "paths_map"), 3);
  EXPECT_EQ(FindingEvidence(active[0], "paths_traced"), 0);
}

// A path moves (the fabric rehashes after a failure): the flow's new trace replaces the old one,
// and the blame follows the new path at the next tick.
TEST(PathResolution, ARetracedFlowIsJudgedOnItsNewPath) {
  SyntheticFleet fleet(TracedEcmpShape());
  fleet.TraceFlows();
  fleet.Reroute(7);  // every flow gets another path, and the agents trace again
  fleet.TraceFlows();
  EXPECT_GT(fleet.analyzer().traced_paths()->stats().moved, 0u);
  const auto active = AfterLossOnLeaf2Spine1(fleet);
  ASSERT_EQ(active.size(), 1u) << DescribeFindings(active);
  EXPECT_EQ(active[0].finding.location.id, "leaf2~spine1");
}

// The namespace test fabric's shape (2 spines x 3 leaves), 4 hosts a leaf, traced, 20 seeds of the
// fleet's routing and loss, no escalation. Before the switch roll-up has the evidence it needs,
// the first blamed link of a lossy spine is the best explanation of what it shows: a link waits
// while its switches' flows that avoid it cannot clear them (AnalysisConfig::
// switch_clear_expected). Without that wait, 4 of the 20 spine runs and 2 of the 20 link runs
// named a wrong element; with it, at most 1 of each.
FleetShape ThreeLeafShape(uint64_t seed) {
  FleetShape shape = TracedEcmpShape(2, 3, 4, 16);
  shape.seed = seed;
  return shape;
}

// Runs 40 s of `faults` on 20 seeds: how many runs named anything but `element`, and how many
// named `element` within `within_s`.
struct SeedRuns {
  int wrong = 0;
  int named = 0;
};
SeedRuns RunSeeds(const std::vector<std::string>& faults, const std::string& element,
                  int within_s) {
  SeedRuns out;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SyntheticFleet fleet(ThreeLeafShape(seed));
    fleet.TraceFlows();
    fleet.Run(kWarmup);
    for (const std::string& link : faults) fleet.SetLinkFault(link, LinkFault{0.05});
    bool wrong = false;
    int first = -1;
    for (int s = 1; s <= 40; ++s) {
      fleet.Run(1);
      for (const auto& f : fleet.Active()) {
        if (f.finding.location.id != element) wrong = true;
        if (first < 0 && f.finding.location.id == element) first = s;
      }
    }
    out.wrong += wrong ? 1 : 0;
    out.named += first > 0 && first <= within_s ? 1 : 0;
  }
  return out;
}

// 5 % loss on each of spine1's links: spine1 is named, and no link of it, on the way or after.
TEST(PathResolution, ALossySpineOfThreeLeavesIsNamedAndSeldomOneOfItsLinks) {
  const SeedRuns r = RunSeeds({"leaf0~spine1", "leaf1~spine1", "leaf2~spine1"}, "spine1", 20);
  EXPECT_LE(r.wrong, 1);
  EXPECT_GE(r.named, 19);
}

// 5 % loss on leaf2~spine1 alone: that link is named, and seldom anything else.
TEST(PathResolution, ALossyLinkOfThreeLeavesIsNamedAndSeldomAnythingElse) {
  const SeedRuns r = RunSeeds({"leaf2~spine1"}, "leaf2~spine1", 15);
  EXPECT_LE(r.wrong, 1);
  EXPECT_GE(r.named, 19);
}

}  // namespace
}  // namespace fw::analysis::testing
