// Planner: coverage bound, intra-leaf mesh, inter-leaf representatives, map-less sampled mesh,
// determinism, stability under churn, and budgets.
#include "daemon/aggregator/plan/planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <unordered_set>

#include "daemon/aggregator/plan/testing/leaf_spine.h"

namespace fw::aggregator {
namespace {

template <typename... A>
std::string Fmt(const char* f, A... a) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, a...);
  return buf;
}

using testing::LeafSpine;

std::vector<AgentInfo> AgentsOf(const FabricMap& map) {
  std::vector<AgentInfo> out;
  std::set<std::string> nodes;
  for (const HostNic& h : map.host_nics()) {
    if (nodes.insert(h.node).second) out.push_back(AgentInfo{h.node, {{h.address, 9753, h.nic}}});
  }
  return out;
}

std::vector<AgentInfo> Anonymous(int n) {
  std::vector<AgentInfo> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(AgentInfo{
        "host" + std::to_string(i),
        {{"198.18." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1), 9753, ""}}});
  }
  return out;
}

TEST(PlannerTest, FlowsForCoverageIsTheSmallestKMeetingTheBound) {
  EXPECT_EQ(Planner::FlowsForCoverage(1, 0.99), 1u);
  EXPECT_EQ(Planner::FlowsForCoverage(2, 0.99), 8u);
  EXPECT_EQ(Planner::FlowsForCoverage(4, 0.99), 21u);
  EXPECT_EQ(Planner::FlowsForCoverage(8, 0.99), 51u);
  EXPECT_EQ(Planner::FlowsForCoverage(16, 0.99), 115u);
  EXPECT_EQ(Planner::FlowsForCoverage(32, 0.99), 255u);
  EXPECT_EQ(Planner::FlowsForCoverage(64, 0.99), 557u);
  for (size_t s : {2, 3, 4, 8, 16, 32, 64}) {
    const uint32_t k = Planner::FlowsForCoverage(s, 0.99);
    const double d = static_cast<double>(s);
    EXPECT_LE(d * std::pow(1 - 1 / d, k), 0.01) << s;
    EXPECT_GT(d * std::pow(1 - 1 / d, k - 1), 0.01) << s;
  }
}

// Exact P(every one of S paths gets at least one of k uniform flows), by inclusion-exclusion.
double ExactCoverage(size_t s, uint32_t k) {
  double p = 0, binom = 1;
  for (size_t j = 0; j <= s; ++j) {
    p += (j % 2 ? -1 : 1) * binom * std::pow(1.0 - static_cast<double>(j) / s, k);
    binom = binom * static_cast<double>(s - j) / static_cast<double>(j + 1);
  }
  return p;
}

TEST(PlannerTest, CoverageHoldsExactlyAndInSimulation) {
  std::mt19937_64 rng(5);
  for (size_t s : {2, 4, 8, 16}) {
    const uint32_t k = Planner::FlowsForCoverage(s, 0.99);
    const double exact = ExactCoverage(s, k);
    EXPECT_GE(exact, 0.99) << "S=" << s << " k=" << k;
    // Monte Carlo with uniform hashing agrees with the exact value within 4 standard errors.
    std::uniform_int_distribution<size_t> path(0, s - 1);
    int full = 0;
    constexpr int kTrials = 20'000;
    for (int t = 0; t < kTrials; ++t) {
      std::vector<bool> hit(s);
      for (uint32_t f = 0; f < k; ++f) hit[path(rng)] = true;
      full += std::count(hit.begin(), hit.end(), true) == static_cast<long>(s);
    }
    const double se = std::sqrt(exact * (1 - exact) / kTrials);
    EXPECT_NEAR(static_cast<double>(full) / kTrials, exact, 4 * se) << "S=" << s;
  }
}

TEST(PlannerTest, LeafSpineGetsIntraLeafMeshAndOneRepresentativePerLeafPair) {
  const auto map = LeafSpine(2, 2, 3);
  Planner planner(PlannerConfig{}, map);
  const PlanSet set = planner.PlanFor(AgentsOf(*map));
  ASSERT_EQ(set.plans.size(), 6u);
  EXPECT_EQ(set.leaf_pairs_covered, 2u);  // leaf1→leaf2 and leaf2→leaf1
  size_t cross = 0;
  for (const auto& [node, plan] : set.plans) {
    size_t intra = 0;
    for (const PlannedPeer& p : plan.peers) {
      const bool same_leaf = p.node.substr(0, 2) == node.substr(0, 2);
      EXPECT_EQ(p.path_class, same_leaf ? PathClass::kIntraLeaf : PathClass::kInterLeaf);
      if (same_leaf) {
        ++intra;
        EXPECT_EQ(p.flows, 1u);
      } else {
        ++cross;
        EXPECT_EQ(p.flows, 8u);  // S = 2 spines → k = 8
      }
      EXPECT_EQ(p.port, 9753);
      EXPECT_EQ(p.transport, Transport::kUdp);
      EXPECT_DOUBLE_EQ(p.rate_pps, 1.0);
      EXPECT_FALSE(p.src_address.empty());
    }
    EXPECT_EQ(intra, 2u) << node;
    EXPECT_EQ(plan.budget.pps, 1000);
    EXPECT_LE(plan.planned.pps, plan.budget.pps);
    EXPECT_LE(plan.planned.bytes_per_s, plan.budget.bytes_per_s);
    EXPECT_GE(plan.bw_interval_s, 300u);
  }
  EXPECT_EQ(cross, 2u);
  EXPECT_TRUE(set.notes.empty());
}

TEST(PlannerTest, ManyPathsSplitFlowsOverSeveralRepresentatives) {
  const auto map = LeafSpine(8, 2, 4);  // S = 8 → k = 51 > 32 per pair → 2 representatives
  Planner planner(PlannerConfig{}, map);
  const PlanSet set = planner.PlanFor(AgentsOf(*map));
  std::set<std::pair<std::string, std::string>> reps;
  size_t flows = 0;
  for (const auto& [node, plan] : set.plans) {
    for (const PlannedPeer& p : plan.peers) {
      if (node[1] == '1' && p.node[1] == '2') {
        reps.emplace(node, p.node);
        flows += p.flows;
      }
    }
  }
  EXPECT_EQ(reps.size(), 2u);
  EXPECT_GE(flows, 51u);
}

// Regression: the planner gave each inter-leaf pair one flow, but the analyzer resolves flow j to
// path j mod S, so every flow landed on path 0 and the other spines were never probed.
TEST(PlannerTest, DeterministicRoutingGivesEachRepresentativeOneFlowPerPath) {
  const auto map = LeafSpine(4, 2, 3, "deterministic");
  Planner planner(PlannerConfig{}, map);
  const PlanSet set = planner.PlanFor(AgentsOf(*map));
  std::set<std::pair<std::string, std::string>> reps;
  for (const auto& [node, plan] : set.plans) {
    for (const PlannedPeer& p : plan.peers) {
      if (node[1] == '1' && p.node[1] == '2') {
        EXPECT_EQ(p.flows, 4u);  // flow j takes spine path j: all four are covered
        reps.emplace(node, p.node);
      }
    }
  }
  EXPECT_EQ(reps.size(), 2u);  // two distinct NIC pairs per leaf pair
}

TEST(PlannerTest, PlanIsAPureFunctionOfTheLiveSetAndSeed) {
  const auto map = LeafSpine(4, 6, 5);
  Planner planner(PlannerConfig{}, map);
  auto agents = AgentsOf(*map);
  const PlanSet a = planner.PlanFor(agents);
  std::reverse(agents.begin(), agents.end());
  const PlanSet b = planner.PlanFor(agents);
  ASSERT_EQ(a.plans.size(), b.plans.size());
  for (const auto& [node, plan] : a.plans) {
    const auto& other = b.plans.at(node).peers;
    ASSERT_EQ(plan.peers.size(), other.size()) << node;
    for (size_t i = 0; i < other.size(); ++i) {
      EXPECT_EQ(plan.peers[i].node, other[i].node);
      EXPECT_EQ(plan.peers[i].flows, other[i].flows);
    }
  }
  PlannerConfig reseeded;
  reseeded.seed = 99;
  const PlanSet c = Planner(reseeded, map).PlanFor(agents);
  size_t differing = 0;
  for (const auto& [node, plan] : a.plans)
    differing += plan.peers.size() != c.plans.at(node).peers.size();
  EXPECT_GT(differing, 0u);  // another seed picks other representatives
}

// Pairs (src→dst) in a plan set.
std::set<std::pair<std::string, std::string>> Pairs(const PlanSet& s) {
  std::set<std::pair<std::string, std::string>> out;
  for (const auto& [node, plan] : s.plans) {
    for (const PlannedPeer& p : plan.peers) out.emplace(node, p.node);
  }
  return out;
}

TEST(PlannerTest, ALeavingAgentMovesFewPairs) {
  const auto map = LeafSpine(4, 8, 6);
  Planner planner(PlannerConfig{}, map);
  auto agents = AgentsOf(*map);
  const auto before = Pairs(planner.PlanFor(agents));
  const std::string gone = agents[7].node;
  agents.erase(agents.begin() + 7);
  const auto after = Pairs(planner.PlanFor(agents));
  size_t lost_unrelated = 0;
  for (const auto& pair : before) {
    if (pair.first != gone && pair.second != gone && !after.contains(pair)) ++lost_unrelated;
  }
  size_t added = 0;
  for (const auto& pair : after) added += !before.contains(pair);
  // Only leaf pairs whose representative was the leaving node get a new one.
  EXPECT_EQ(lost_unrelated, 0u);
  EXPECT_LE(added, 2u * 7u);
  for (const auto& pair : after) EXPECT_NE(pair.first, gone);
}

TEST(PlannerTest, WithoutAMapSmallFleetsGetAFullMesh) {
  Planner planner(PlannerConfig{}, nullptr);
  const PlanSet set = planner.PlanFor(Anonymous(10));
  for (const auto& [node, plan] : set.plans) {
    EXPECT_EQ(plan.peers.size(), 9u);
    EXPECT_EQ(plan.peers[0].flows, 4u);
  }
}

TEST(PlannerTest, WithoutAMapLargeFleetsGetABoundedSampledMeshCoveringEveryNode) {
  PlannerConfig cfg;
  cfg.sampled_peers = 8;
  Planner planner(cfg, nullptr);
  auto agents = Anonymous(600);
  const PlanSet set = planner.PlanFor(agents);
  std::map<std::string, int> in_degree;
  size_t max_out = 0;
  for (const auto& [node, plan] : set.plans) {
    EXPECT_GE(plan.peers.size(), 8u) << node;
    max_out = std::max(max_out, plan.peers.size());
    for (const PlannedPeer& p : plan.peers) {
      EXPECT_NE(p.node, node);
      ++in_degree[p.node];
    }
  }
  EXPECT_LE(max_out, 10u);            // d, plus at most a fix-up or two
  EXPECT_EQ(in_degree.size(), 600u);  // every node is probed by someone
  // Churn: one node leaves; nearly every other pair stays.
  const auto before = Pairs(set);
  agents.erase(agents.begin() + 123);
  const auto after = Pairs(planner.PlanFor(agents));
  size_t kept = 0, relevant = 0;
  for (const auto& pair : before) {
    if (pair.first == "host123" || pair.second == "host123") continue;
    ++relevant;
    kept += after.contains(pair);
  }
  EXPECT_GE(static_cast<double>(kept) / relevant, 0.99);
}

TEST(PlannerTest, UnmappedAgentsAndMissingEndpointsAreNoted) {
  const auto map = LeafSpine(2, 2, 2);
  Planner planner(PlannerConfig{}, map);
  auto agents = AgentsOf(*map);
  agents.push_back(AgentInfo{"stray1", {{"198.18.200.1", 9000, ""}}});
  agents.push_back(AgentInfo{"stray2", {}});
  const PlanSet set = planner.PlanFor(agents);
  ASSERT_EQ(set.plans.count("stray1"), 1u);
  ASSERT_EQ(set.plans.at("stray2").peers.size(), 1u);  // stray2 probes stray1 ...
  EXPECT_EQ(set.plans.at("stray2").peers[0].port, 9000);
  EXPECT_TRUE(set.plans.at("stray1").peers.empty());  // ... but cannot be probed itself
  EXPECT_THAT(set.notes, ::testing::Contains(::testing::HasSubstr("not in the fabric map")));
  EXPECT_THAT(set.notes, ::testing::Contains(::testing::HasSubstr("no probe endpoint")));
}

TEST(PlannerTest, BudgetsLowerRatesAndStretchBandwidthIntervals) {
  const auto map = LeafSpine(16, 2, 40);  // 39 intra-leaf peers + 115 cross flows per leaf pair
  PlannerConfig cfg;
  cfg.budget_pps = 20;
  cfg.budget_bytes_per_s = 200'000;
  Planner planner(cfg, map);
  const PlanSet set = planner.PlanFor(AgentsOf(*map));
  bool lowered = false;
  for (const auto& [node, plan] : set.plans) {
    EXPECT_LE(plan.planned.pps, 20.0 + 1e-9) << node;
    EXPECT_LE(plan.planned.bytes_per_s, 200'000.0 + 1e-6) << node;
    for (const PlannedPeer& p : plan.peers) lowered = lowered || p.rate_pps < 1.0;
    // 39+ peers × 4 MiB within 100 kB/s: the interval stretches past 27 minutes.
    EXPECT_GE(plan.bw_interval_s, 39u * (4u << 20) / 100'000u) << node;
  }
  EXPECT_TRUE(lowered);
  EXPECT_FALSE(set.notes.empty());
}

TEST(PlannerTest, FleetCapSlowsInterLeafFlowsFirst) {
  const auto map = LeafSpine(8, 10, 8);  // 90 leaf pairs × 51 flows + 10 × 8 × 7 intra pairs
  PlannerConfig cfg;
  cfg.fleet_results_per_s = 2'000;
  Planner planner(cfg, map);
  const PlanSet set = planner.PlanFor(AgentsOf(*map));
  double intra = 0, inter = 0;
  for (const auto& [node, plan] : set.plans) {
    for (const PlannedPeer& p : plan.peers) {
      const double r = p.rate_pps * static_cast<double>(p.flows);
      (p.path_class == PathClass::kIntraLeaf ? intra : inter) += r;
    }
  }
  EXPECT_NEAR(intra, 560.0, 1e-6);  // 560 intra-leaf pairs keep 1/s: they fit beside the rest
  // Rates are rounded down to the 2^(1/8) grid: the total stays under the cap, within one step.
  EXPECT_LE(intra + inter, 2'000.0 + 1e-6);
  EXPECT_GE(intra + inter, 2'000.0 / std::exp2(1.0 / 8));
  EXPECT_THAT(set.notes, ::testing::Contains(::testing::HasSubstr("over the fleet cap")));
}

// Regression: the per-node budget used to reset every flow of an over-budget node to
// budget / flows, which raised inter-leaf flows the fleet cap had slowed and let the fleet send
// many times the cap (16,000 nodes x 1,000 probes/s instead of 400,000/s in total).
TEST(PlannerTest, PerNodeBudgetDoesNotUndoTheFleetCap) {
  const auto map = LeafSpine(16, 12, 8);  // 132 leaf pairs x 115 flows: ~240 flows per node
  PlannerConfig cfg;
  cfg.budget_pps = 100;             // below every node's flow count
  cfg.fleet_results_per_s = 3'000;  // below the fleet's sum of per-node budgets (9,600)
  Planner planner(cfg, map);
  const PlanSet set = planner.PlanFor(AgentsOf(*map));
  double total = 0;
  for (const auto& [node, plan] : set.plans) {
    double node_pps = 0, intra_rate = 0, inter_rate = 0;
    for (const PlannedPeer& p : plan.peers) {
      node_pps += p.rate_pps * static_cast<double>(p.flows);
      (p.path_class == PathClass::kIntraLeaf ? intra_rate : inter_rate) = p.rate_pps;
    }
    EXPECT_LE(node_pps, 100.0 + 1e-9) << node;
    EXPECT_NEAR(plan.planned.pps, node_pps, 1e-6) << node;
    // The fleet cap slowed inter-leaf flows more than intra-leaf ones; the budget keeps that.
    EXPECT_LT(inter_rate, intra_rate) << node;
    total += node_pps;
  }
  EXPECT_LE(total, 3'000.0 + 1e-6);
}

TEST(PlannerTest, RatesSitOnAGridSoSmallFleetChangesKeepPlansIdentical) {
  EXPECT_EQ(Planner::QuantizeRate(1.0), 1.0);
  EXPECT_EQ(Planner::QuantizeRate(0.5), 0.5);
  EXPECT_EQ(Planner::QuantizeRate(0.0), 0.0);
  EXPECT_EQ(Planner::QuantizeRate(-1.0), 0.0);
  for (double r : {0.003, 0.37, 0.99, 1.5, 7.0}) {
    const double q = Planner::QuantizeRate(r);
    EXPECT_LE(q, r);
    EXPECT_GT(q, r / std::exp2(1.0 / 8));
  }
  // One node fewer moves the fleet cap's factor by about 1%: the surviving nodes' rates stay put.
  const auto map = LeafSpine(8, 10, 8);
  PlannerConfig cfg;
  cfg.fleet_results_per_s = 2'000;
  Planner planner(cfg, map);
  std::vector<AgentInfo> agents = AgentsOf(*map);
  const PlanSet before = planner.PlanFor(agents);
  agents.pop_back();
  const PlanSet after = planner.PlanFor(agents);
  // Every peer kept across the change keeps its rate.
  size_t same = 0, total = 0;
  for (const auto& [node, plan] : after.plans) {
    std::map<std::string, double> old_rates;
    for (const PlannedPeer& p : before.plans.at(node).peers) old_rates[p.address] = p.rate_pps;
    for (const PlannedPeer& p : plan.peers) {
      auto it = old_rates.find(p.address);
      if (it == old_rates.end()) continue;
      ++total;
      same += it->second == p.rate_pps;
    }
  }
  EXPECT_GT(total, 0u);
  EXPECT_EQ(same, total);
}

// The streaming form hands over every live agent exactly once, and its plans are PlanFor's: the
// fleet cap's factors come from the counting pass and must match what the whole set asks for.
TEST(PlannerTest, PlanEachHandsEveryNodeOverOnceWithPlanForsPlans) {
  const auto map = LeafSpine(4, 5, 6);
  auto agents = AgentsOf(*map);
  for (int i = 0; i < 3; ++i) {  // outside the map: they get the map-less mesh
    agents.push_back(
        AgentInfo{"extra" + std::to_string(i), {{"198.18.9." + std::to_string(i + 1), 9753, ""}}});
  }
  PlannerConfig cfg;
  cfg.fleet_results_per_s = 300;  // the mesh asks for more: both factors are below 1
  Planner planner(cfg, map);
  const PlanSet whole = planner.PlanFor(agents);
  std::map<std::string, Plan> streamed;
  size_t calls = 0;
  const PlanSummary summary = planner.PlanEach(agents, [&](const std::string& node, Plan&& plan) {
    ++calls;
    EXPECT_TRUE(streamed.emplace(node, std::move(plan)).second) << node << " twice";
  });
  EXPECT_EQ(calls, agents.size());
  EXPECT_EQ(summary.plans, agents.size());
  EXPECT_EQ(summary.leaf_pairs_covered, 20u);  // 5 × 4 ordered leaf pairs
  EXPECT_EQ(summary.notes, whole.notes);
  EXPECT_THAT(summary.notes, ::testing::Contains(::testing::HasSubstr("over the fleet cap")));
  ASSERT_EQ(streamed.size(), whole.plans.size());
  double planned = 0;
  for (const auto& [node, plan] : whole.plans) {
    const Plan& other = streamed.at(node);
    ASSERT_EQ(plan.peers.size(), other.peers.size()) << node;
    for (size_t i = 0; i < plan.peers.size(); ++i) {
      EXPECT_EQ(plan.peers[i].node, other.peers[i].node);
      EXPECT_EQ(plan.peers[i].address, other.peers[i].address);
      EXPECT_EQ(plan.peers[i].src_address, other.peers[i].src_address);
      EXPECT_EQ(plan.peers[i].flows, other.peers[i].flows);
      EXPECT_DOUBLE_EQ(plan.peers[i].rate_pps, other.peers[i].rate_pps);
    }
    EXPECT_DOUBLE_EQ(plan.planned.pps, other.planned.pps) << node;
    planned += plan.planned.pps;
  }
  EXPECT_LE(planned, 300.0 + 1e-6);  // the cap holds across mapped and unmapped nodes
  EXPECT_GT(planned, 150.0);         // and is not wasted: the grid rounds down by < 9%
}

// A re-plan of some nodes (`only`) builds only their NICs' peers and skips the leaf pairs where
// none of them is a representative: each named live node still gets exactly PlanFor's plan, with
// several representatives per leaf pair (fewer and more than a leaf's hosts), an overlay, a node
// outside the map and a name that is not live.
TEST(PlannerTest, PlanEachOfSomeNodesGivesThemPlanForsPlans) {
  for (const uint32_t max_flows : {16u, 8u}) {
    const auto map = LeafSpine(8, 6, 5);
    auto agents = AgentsOf(*map);
    agents.push_back(AgentInfo{"extra", {{"198.18.9.1", 9753, ""}}});
    PlannerConfig cfg;
    cfg.max_flows_per_pair = max_flows;  // 50 flows for 8 paths: 4 or 7 representatives
    Planner planner(cfg, map);
    PlanOverlay o{"escalation:n1-2~n4-5", {"n1-2", "n4-5"}, 10, 1};
    o.trace_id = 3;
    planner.SetOverlay(o);
    const PlanSet whole = planner.PlanFor(agents);
    std::mt19937 rng(max_flows);
    for (int round = 0; round < 20; ++round) {
      std::unordered_set<std::string> only = {"gone"};
      const size_t n = 1 + rng() % 6;
      while (only.size() < n + 1) only.insert(agents[rng() % agents.size()].node);
      std::map<std::string, Plan> got;
      planner.PlanEach(
          agents, [&](const std::string& node, Plan&& plan) { got.emplace(node, std::move(plan)); },
          &only);
      ASSERT_EQ(got.size(), only.size() - 1) << "round " << round;
      for (const auto& [node, plan] : got) {
        const Plan& want = whole.plans.at(node);
        ASSERT_EQ(plan.peers.size(), want.peers.size()) << node;
        for (size_t i = 0; i < plan.peers.size(); ++i) {
          const PlannedPeer& a = plan.peers[i];
          const PlannedPeer& b = want.peers[i];
          EXPECT_EQ(std::tie(a.node, a.address, a.port, a.src_address, a.src_nic, a.dst_nic,
                             a.flows, a.transport, a.path_class, a.bandwidth, a.raised_flows),
                    std::tie(b.node, b.address, b.port, b.src_address, b.src_nic, b.dst_nic,
                             b.flows, b.transport, b.path_class, b.bandwidth, b.raised_flows))
              << node << " peer " << i;
          EXPECT_EQ(a.rate_pps, b.rate_pps) << node << " peer " << i;
        }
        EXPECT_EQ(plan.trace_requests.size(), want.trace_requests.size()) << node;
        EXPECT_EQ(plan.planned.pps, want.planned.pps) << node;
        EXPECT_EQ(plan.bw_interval_s, want.bw_interval_s) << node;
      }
    }
  }
}

// A node with NICs under two leaves is finished only after both: its one plan holds the peers of
// both NICs, intra-leaf on each side.
TEST(PlannerTest, PlanEachFinishesANodeOnTwoLeavesOnceWithBothNicsPeers) {
  std::string y = "switches:\n  - {name: spine1, tier: spine}\n";
  for (int l = 1; l <= 3; ++l) y += "  - {name: leaf" + std::to_string(l) + ", tier: leaf}\n";
  y += "links:\n";
  for (int l = 1; l <= 3; ++l) y += "  - {a: leaf" + std::to_string(l) + ", b: spine1}\n";
  y += "hosts:\n";
  for (int l = 1; l <= 3; ++l) {
    for (int h = 1; h <= 2; ++h) {
      y += "  - {node: n" + std::to_string(l) + "-" + std::to_string(h) +
           ", nic: mlx5_0, address: 10." + std::to_string(l) + ".0." + std::to_string(h) +
           ", switch: leaf" + std::to_string(l) + "}\n";
    }
  }
  y += "  - {node: dual, nic: mlx5_0, address: 10.1.0.9, switch: leaf1}\n";
  y += "  - {node: dual, nic: mlx5_1, address: 10.3.0.9, switch: leaf3}\n";
  auto m = FabricMap::Parse(y);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const auto map = std::make_shared<const FabricMap>(std::move(m).value());
  const auto agents = AgentsOf(*map);
  ASSERT_EQ(agents.size(), 7u);
  Planner planner(PlannerConfig{}, map);
  std::vector<std::string> order;
  Plan dual;
  planner.PlanEach(agents, [&](const std::string& node, Plan&& plan) {
    order.push_back(node);
    if (node == "dual") dual = std::move(plan);
  });
  ASSERT_EQ(order.size(), 7u);
  EXPECT_EQ(std::count(order.begin(), order.end(), "dual"), 1);
  // Leaf 3 is planned last, so dual comes after every node of leaves 1 and 2.
  const auto at = std::find(order.begin(), order.end(), "dual") - order.begin();
  for (const char* n : {"n1-1", "n1-2", "n2-1", "n2-2"}) {
    EXPECT_LT(std::find(order.begin(), order.end(), n) - order.begin(), at) << n;
  }
  std::set<std::string> intra_from_leaf1, intra_from_leaf3;
  for (const PlannedPeer& p : dual.peers) {
    if (p.path_class != PathClass::kIntraLeaf) continue;
    (p.src_address == "10.1.0.9" ? intra_from_leaf1 : intra_from_leaf3).insert(p.node);
  }
  EXPECT_EQ(intra_from_leaf1, (std::set<std::string>{"n1-1", "n1-2"}));
  EXPECT_EQ(intra_from_leaf3, (std::set<std::string>{"n3-1", "n3-2"}));
  EXPECT_TRUE(std::is_sorted(dual.peers.begin(), dual.peers.end(),
                             [](const PlannedPeer& a, const PlannedPeer& b) {
                               return std::tie(a.node, a.address, a.src_address) <
                                      std::tie(b.node, b.address, b.src_address);
                             }));
}

// Every NIC, every rail (issue 16): hosts with one NIC on each of two rails, each rail its own leaf
// set and spines. Each NIC probes from its own address, only toward NICs of its rail, in its leaf
// and across leaves; no flow is planned between rails.
TEST(PlannerTest, TwoRailsEveryNicProbesItsOwnRail) {
  std::string y = "routing: ecmp\nswitches:\n";
  for (int r = 0; r < 2; ++r) {
    for (int s = 0; s < 2; ++s) y += Fmt("  - {name: r%d-spine%d, tier: spine}\n", r, s);
    for (int l = 0; l < 2; ++l) y += Fmt("  - {name: r%d-leaf%d, tier: leaf}\n", r, l);
  }
  y += "links:\n";
  for (int r = 0; r < 2; ++r) {
    for (int l = 0; l < 2; ++l) {
      for (int s = 0; s < 2; ++s) y += Fmt("  - {a: r%d-leaf%d, b: r%d-spine%d}\n", r, l, r, s);
    }
  }
  y += "hosts:\n";
  std::vector<AgentInfo> agents;
  for (int h = 0; h < 4; ++h) {
    AgentInfo a{Fmt("n%d", h), {}};
    for (int r = 0; r < 2; ++r) {
      const std::string addr = Fmt("198.18.%d.%d", r, h + 1);
      y += Fmt("  - {node: n%d, nic: mlx5_%d, address: %s, switch: r%d-leaf%d}\n", h, r,
               addr.c_str(), r, h / 2);
      a.endpoints.push_back({addr, 9753, Fmt("mlx5_%d", r)});
    }
    agents.push_back(std::move(a));
  }
  auto m = FabricMap::Parse(y);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Planner planner(PlannerConfig{}, std::make_shared<const FabricMap>(std::move(m).value()));
  const PlanSet set = planner.PlanFor(agents);
  ASSERT_EQ(set.plans.size(), 4u);
  auto rail_of = [](const std::string& addr) { return addr.substr(0, 9); };  // "198.18.R."
  // Inter-leaf flows go from representatives (a few NICs per leaf pair); intra-leaf from all.
  std::map<std::string, size_t> inter_leaf_by_rail;
  for (const auto& [node, plan] : set.plans) {
    std::map<std::string, std::set<PathClass>> classes_by_rail;
    for (const PlannedPeer& p : plan.peers) {
      ASSERT_FALSE(p.src_address.empty()) << node << " -> " << p.node;
      EXPECT_EQ(rail_of(p.src_address), rail_of(p.address))
          << node << " probes " << p.node << " across rails";
      // The peer names both NICs (the agent probes from src_nic's socket; results name both).
      EXPECT_EQ(p.src_nic, "mlx5_" + p.src_address.substr(7, 1)) << node << " -> " << p.node;
      EXPECT_EQ(p.dst_nic, p.src_nic) << node << " -> " << p.node;
      classes_by_rail[rail_of(p.src_address)].insert(p.path_class);
      inter_leaf_by_rail[rail_of(p.src_address)] += p.path_class == PathClass::kInterLeaf;
    }
    ASSERT_EQ(classes_by_rail.size(), 2u) << node << ": both NICs probe";
    for (const auto& [rail, classes] : classes_by_rail) {
      EXPECT_TRUE(classes.contains(PathClass::kIntraLeaf)) << node << " rail " << rail;
    }
  }
  // Both leaf pairs of each rail, both ways.
  EXPECT_GE(inter_leaf_by_rail["198.18.0."], 2u);
  EXPECT_GE(inter_leaf_by_rail["198.18.1."], 2u);
}

// A leaf-per-host fabric (every NIC of a host on the host's one leaf): every NIC probes every
// NIC of the other hosts, each peer naming its two NICs.
TEST(PlannerTest, LeafPerHostEveryNicProbesEveryOtherHostsNics) {
  std::string y = "routing: ecmp\nswitches:\n  - {name: leaf1, tier: leaf}\nhosts:\n";
  std::vector<AgentInfo> agents;
  for (int h = 0; h < 2; ++h) {
    AgentInfo a{Fmt("n%d", h), {}};
    for (int n = 0; n < 2; ++n) {
      const std::string addr = Fmt("198.18.1.%d", 10 * h + n + 2);
      y += Fmt("  - {node: n%d, nic: eth%d, address: %s, switch: leaf1}\n", h, n, addr.c_str());
      a.endpoints.push_back({addr, 9753, Fmt("eth%d", n)});
    }
    agents.push_back(std::move(a));
  }
  auto m = FabricMap::Parse(y);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Planner planner(PlannerConfig{}, std::make_shared<const FabricMap>(std::move(m).value()));
  const PlanSet set = planner.PlanFor(agents);
  std::set<std::pair<std::string, std::string>> n0;
  for (const PlannedPeer& p : set.plans.at("n0").peers) {
    EXPECT_EQ(p.node, "n1");
    n0.emplace(p.src_nic, p.dst_nic);
  }
  EXPECT_EQ(n0, (std::set<std::pair<std::string, std::string>>{
                    {"eth0", "eth0"}, {"eth0", "eth1"}, {"eth1", "eth0"}, {"eth1", "eth1"}}));
}

// One note per node over its budget would be 16,000 log lines at scale: the list is bounded.
TEST(PlannerTest, PerNodeNotesAreBounded) {
  const auto map = LeafSpine(2, 4, 20);  // 80 nodes, each over a budget of 1 probe/s
  PlannerConfig cfg;
  cfg.budget_pps = 1;
  Planner planner(cfg, map);
  const PlanSet set = planner.PlanFor(AgentsOf(*map));
  ASSERT_EQ(set.notes.size(), 33u);
  EXPECT_THAT(set.notes.back(), ::testing::HasSubstr("more notes like these"));
}

}  // namespace
}  // namespace fw::aggregator
