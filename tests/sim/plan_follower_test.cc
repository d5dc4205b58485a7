// The simulated agents probe at their plans' rates: the fleet cap's scaled rates are the baseline,
// and only a raised peer (an escalation) adds results.
#include "tests/sim/plan_follower.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

namespace fw::sim {
namespace {

namespace v1 = fabricwatch::v1;

// The rates the planner gives a 16,000-node fleet under the fleet cap (docs/planner.md).
constexpr double kIntra = 0.40;
constexpr double kInter = 0.0069;

// A 2-spine, 4-leaf, 8-host-per-leaf fat-tree and agent 9's flows: 7 peers in its leaf, 24 outside.
class PlanFollowerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = FatTree::Build({.spines = 2, .leaves = 4, .hosts_per_leaf = 8});
    ASSERT_TRUE(t.ok());
    tree = std::make_unique<FatTree>(std::move(*t));
    flows = BuildFlowPlan(*tree, {.inter_leaf_flows = 4})[kAgent];
  }

  // A plan for agent 9 naming every other host, in its leaf at `intra`, outside at `inter`, and
  // `raised_host` (if not -1) at `raised`.
  v1::ProbePlan Plan(double intra, double inter, int raised_host = -1, double raised = 0) const {
    v1::ProbePlan plan;
    for (int h = 0; h < tree->hosts(); ++h) {
      if (h == kAgent) continue;
      v1::PlannedPeer* p = plan.add_peers();
      p->set_node(tree->NodeName(h));
      p->set_transport(v1::TRANSPORT_UDP);
      const bool same_leaf = tree->LeafGroup(h) == tree->LeafGroup(kAgent);
      p->set_rate_pps(h == raised_host ? raised : same_leaf ? intra : inter);
    }
    return plan;
  }

  // The results per second the plan asks of the agent's flows.
  double Planned(const FollowedRates& r) const {
    double sum = 0;
    for (const Flow& f : flows) sum += r.RateOf(f);
    return sum;
  }

  // Results sent in kSeconds seconds at `r` (draws seeded with `seed`); adds to base and extra.
  double Send(const FollowedRates& r, uint64_t seed, double* base, double* extra) const {
    Rng rng(seed);
    std::vector<Flow> out;
    uint64_t sent = 0;
    for (int s = 0; s < kSeconds; ++s) {
      ExpandFlows(flows, r, rng, out, base, extra);
      sent += out.size();
    }
    return static_cast<double>(sent);
  }

  static constexpr int kAgent = 9;
  static constexpr int kSeconds = 20'000;
  std::unique_ptr<FatTree> tree;
  std::vector<Flow> flows;
};

TEST_F(PlanFollowerTest, ScaledPlanIsTheBaselineAndSendsWhatItPlans) {
  const FollowedRates r = RatesFromPlan(*tree, kAgent, Plan(kIntra, kInter));
  EXPECT_DOUBLE_EQ(r.base_intra, kIntra);
  EXPECT_DOUBLE_EQ(r.base_inter, kInter);
  int intra = 0, inter = 0;
  for (const Flow& f : flows) {
    EXPECT_FALSE(r.Raised(f)) << "flow to host " << f.dst_host;
    EXPECT_DOUBLE_EQ(r.RateOf(f), f.inter_leaf ? kInter : kIntra);
    (f.inter_leaf ? inter : intra)++;
  }
  ASSERT_GT(intra, 0);
  ASSERT_GT(inter, 0);
  const double planned = Planned(r);
  EXPECT_NEAR(planned, intra * kIntra + inter * kInter, 1e-9);

  // Sent over many seconds: the planned rate, none of it escalation. (Reading the scaled
  // inter-leaf rate, the plan's median, as the baseline made every in-leaf flow an escalation of
  // 0.40 / 0.0069 = 58 times.)
  double base = 0, extra = 0;
  const double sent = Send(r, 7, &base, &extra);
  EXPECT_NEAR(sent / kSeconds, planned, 0.03 * planned);
  EXPECT_EQ(extra, 0);
  EXPECT_DOUBLE_EQ(base, sent);
}

TEST_F(PlanFollowerTest, AnEscalatedPeerAddsOnlyWhatItsRaisedRateAdds) {
  // An escalation overlay raises a pair to 10x the unscaled base rate (1/s): 10 probes/s a flow.
  const int peer = static_cast<int>(flows.front().dst_host);
  const FollowedRates r = RatesFromPlan(*tree, kAgent, Plan(kIntra, kInter, peer, 10.0));
  int raised_flows = 0;
  for (const Flow& f : flows) {
    EXPECT_EQ(r.Raised(f), static_cast<int>(f.dst_host) == peer);
    raised_flows += r.Raised(f);
  }
  ASSERT_GT(raised_flows, 0);
  const double base_rate = flows.front().inter_leaf ? kInter : kIntra;
  double base = 0, extra = 0;
  const double sent = Send(r, 8, &base, &extra);
  EXPECT_NEAR(extra / kSeconds, raised_flows * (10.0 - base_rate), 1e-6);
  EXPECT_NEAR(sent / kSeconds, Planned(r), 0.03 * Planned(r));
  EXPECT_NEAR(base + extra, sent, 1e-6);
}

// An escalation of some flows of a pair (PlannedPeer.raised_flows): the listed flows toward the
// peer at the raised rate, its other flows at the entry's unraised rate, and only those listed
// count as raised.
TEST_F(PlanFollowerTest, AnEntrysRaisedFlowsAloneGoFaster) {
  // Agent 9 has one flow toward each host: the entry lists another id first, then that flow's.
  const Flow& target = flows.front();
  const int peer = static_cast<int>(target.dst_host);
  v1::ProbePlan plan = Plan(kIntra, kInter, peer, 10.0);
  for (v1::PlannedPeer& p : *plan.mutable_peers()) {
    if (p.node() != tree->NodeName(peer)) continue;
    p.add_raised_flows(target.flow_id + 1);  // not this flow
    p.set_unraised_rate_pps(kIntra);
  }
  FollowedRates r = RatesFromPlan(*tree, kAgent, plan);
  EXPECT_DOUBLE_EQ(r.RateOf(target), kIntra);
  EXPECT_FALSE(r.Raised(target));
  for (v1::PlannedPeer& p : *plan.mutable_peers()) {
    if (p.node() == tree->NodeName(peer)) p.add_raised_flows(target.flow_id);
  }
  r = RatesFromPlan(*tree, kAgent, plan);
  EXPECT_DOUBLE_EQ(r.RateOf(target), 10.0);
  EXPECT_TRUE(r.Raised(target));
  int raised = 0;
  for (const Flow& f : flows) raised += r.Raised(f);
  EXPECT_EQ(raised, 1);
  // The unraised rate 0 is the agent's default, 1 probe/s.
  for (v1::PlannedPeer& p : *plan.mutable_peers()) {
    if (p.node() == tree->NodeName(peer)) {
      p.clear_raised_flows();
      p.add_raised_flows(target.flow_id + 1);
      p.set_unraised_rate_pps(0);
    }
  }
  EXPECT_DOUBLE_EQ(RatesFromPlan(*tree, kAgent, plan).RateOf(target), 1.0);
}

TEST_F(PlanFollowerTest, UnscaledPlanSendsOneProbeAFlowAndDrawsOnlyForRaisedFlows) {
  // The suite's fleets are below the fleet cap: every rate is 1/s and a raised flow draws once,
  // as before plans were followed literally, so their random streams are unchanged.
  const int peer = static_cast<int>(flows.back().dst_host);
  const FollowedRates r = RatesFromPlan(*tree, kAgent, Plan(1.0, 1.0, peer, 10.0));
  Rng rng(9), expected(9);
  std::vector<Flow> out;
  double base = 0, extra = 0;
  ExpandFlows(flows, r, rng, out, &base, &extra);
  size_t want = 0;
  for (const Flow& f : flows) {
    const bool raised = static_cast<int>(f.dst_host) == peer;
    want += raised ? 10 : 1;
    if (raised) expected.Uniform();
  }
  EXPECT_EQ(out.size(), want);
  EXPECT_EQ(rng.Next(), expected.Next());
  EXPECT_DOUBLE_EQ(base + extra, static_cast<double>(want));

  // Before any plan: one probe a flow, no draw.
  Rng untouched(10), reference(10);
  ExpandFlows(flows, FollowedRates{}, untouched, out, &base, &extra);
  EXPECT_EQ(out.size(), flows.size());
  EXPECT_EQ(untouched.Next(), reference.Next());
}

TEST_F(PlanFollowerTest, AClassWhoseEveryPeerIsEscalatedKeepsTheBaseline) {
  // An escalated host: every peer outside its leaf raised to 3/s, each named in a trace request.
  v1::ProbePlan plan = Plan(1.0, 3.0);
  for (int h = 0; h < tree->hosts(); ++h) {
    if (tree->LeafGroup(h) == tree->LeafGroup(kAgent)) continue;
    v1::TraceRequest* t = plan.add_trace_requests();
    t->set_peer(tree->NodeName(h));
    t->set_id(5);
  }
  const FollowedRates r = RatesFromPlan(*tree, kAgent, plan);
  EXPECT_DOUBLE_EQ(r.base_intra, 1.0);
  EXPECT_DOUBLE_EQ(r.base_inter, 1.0);
  for (const Flow& f : flows) EXPECT_EQ(r.Raised(f), f.inter_leaf) << "flow to " << f.dst_host;
}

// A per-NIC plan (two rails) has one entry per rail toward a peer, at that rail's address. An
// escalation of a rail-1 element raises the rail-1 entry: the agent's rail-1 flows to the peer
// run at the raised rate and its rail-0 flows stay at the base rate (they cross no rail-1 link).
// Agent kSelf's per-NIC plan on a two-rail tree: one entry per rail toward every other host, at
// 1/s, and the entry toward kPeer on rail 1 escalated (10/s, with `escalated_timeout_ms`).
constexpr int kSelf = 0, kPeer = 1;  // the same leaf on both rails
v1::ProbePlan RailPlan(const FatTree& tree, uint32_t escalated_timeout_ms = 0) {
  v1::ProbePlan plan;
  for (int h = 0; h < tree.hosts(); ++h) {
    if (h == kSelf) continue;
    for (int rail = 0; rail < 2; ++rail) {
      v1::PlannedPeer* p = plan.add_peers();
      p->set_node(tree.NodeName(h));
      p->set_address(tree.Address(h, rail));
      p->set_transport(v1::TRANSPORT_UDP);
      const bool escalated = h == kPeer && rail == 1;
      p->set_rate_pps(escalated ? 10.0 : 1.0);
      if (escalated) p->set_timeout_ms(escalated_timeout_ms);
    }
  }
  return plan;
}

TEST(PlanFollowerRails, ARaisedEntryRaisesOnlyItsRailsFlows) {
  auto t = FatTree::Build({.spines = 2, .leaves = 2, .hosts_per_leaf = 2, .rails = 2});
  ASSERT_TRUE(t.ok());
  const FatTree& tree = *t;
  const FollowedRates r = RatesFromPlan(tree, kSelf, RailPlan(tree));
  int seen[2] = {0, 0};
  const std::vector<std::vector<Flow>> flows = BuildFlowPlan(tree, {.inter_leaf_flows = 2});
  for (const Flow& f : flows[kSelf]) {
    if (f.dst_host != kPeer) continue;
    ++seen[f.rail];
    EXPECT_DOUBLE_EQ(r.RateOf(f), f.rail == 1 ? 10.0 : 1.0) << "rail " << f.rail;
  }
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
}

// Each flow's timeout follows its plan entry: the escalated rail's own (250 ms), the other rail's
// the plan's probe_timeout_ms, and without either the agent's default.
TEST(PlanFollowerRails, EachFlowTimesOutAsItsEntrySays) {
  auto t = FatTree::Build({.spines = 2, .leaves = 2, .hosts_per_leaf = 2, .rails = 2});
  ASSERT_TRUE(t.ok());
  const FatTree& tree = *t;
  v1::ProbePlan plan = RailPlan(tree, 250);
  const std::vector<std::vector<Flow>> flows = BuildFlowPlan(tree, {.inter_leaf_flows = 2});
  for (uint32_t plan_ms : {0u, 2000u}) {
    plan.set_probe_timeout_ms(plan_ms);
    const FollowedRates r = RatesFromPlan(tree, kSelf, plan);
    const double plan_s = plan_ms == 0 ? kProbeTimeoutS : 2.0;
    int seen = 0;
    for (const Flow& f : flows[kSelf]) {
      const bool escalated = f.dst_host == kPeer && f.rail == 1;
      EXPECT_DOUBLE_EQ(r.TimeoutOf(f), escalated ? 0.25 : plan_s)
          << "host " << f.dst_host << " rail " << f.rail << " plan " << plan_ms;
      seen += escalated;
    }
    EXPECT_GT(seen, 0);
  }
  EXPECT_DOUBLE_EQ(FollowedRates{}.TimeoutOf(flows[kSelf].front()), kProbeTimeoutS);
}

}  // namespace
}  // namespace fw::sim
