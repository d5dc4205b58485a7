// The inversion of a plan set into the responders' allow lists: by hand, and over a sampled mesh
// (asymmetric plans) from the real planner.
#include "daemon/aggregator/plan/prober_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace fw::aggregator {
namespace {

AgentInfo Agent(const std::string& name, std::vector<std::string> addresses) {
  AgentInfo a;
  a.node = name;
  for (std::string& addr : addresses) a.endpoints.push_back({std::move(addr), 9753, ""});
  return a;
}

PlannedPeer Peer(const std::string& node, const std::string& src_address = "") {
  PlannedPeer p;
  p.node = node;
  p.src_address = src_address;
  return p;
}

using Addresses = std::vector<std::string>;

TEST(ProberIndexTest, EachNodeAllowsTheAddressesOfTheNodesWhosePlansNameIt) {
  // a probes b and c; b probes c; nobody probes a. Plans are not symmetric.
  ProberIndex index({Agent("a", {"10.0.0.1", "10.0.1.1", "10.0.0.1"}), Agent("b", {"10.0.0.2"}),
                     Agent("c", {"10.0.0.3"})});
  index.AddPlan("a", {Peer("b"), Peer("c"), Peer("c")});  // c twice (two transports)
  index.AddPlan("b", {Peer("c", "192.168.0.2")});         // a plan that probes from another address
  index.AddPlan("c", {});
  EXPECT_EQ(index.AllowedFor("b"), (Addresses{"10.0.0.1", "10.0.1.1"}));
  EXPECT_EQ(index.AllowedFor("c"), (Addresses{"10.0.0.1", "10.0.0.2", "10.0.1.1", "192.168.0.2"}));
  EXPECT_TRUE(index.AllowedFor("a").empty());        // nobody probes it: no list, answers all
  EXPECT_TRUE(index.AllowedFor("unknown").empty());  // not in this plan set
}

TEST(ProberIndexTest, AProberWithoutAnAddressLeavesItsTargetsOpen) {
  ProberIndex index({Agent("a", {"10.0.0.1"}), Agent("nameless", {}), Agent("t", {"10.0.0.3"}),
                     Agent("u", {"10.0.0.4"})});
  index.AddPlan("a", {Peer("t"), Peer("u")});
  index.AddPlan("nameless", {Peer("t")});
  index.AddPlan("stranger", {Peer("u")});  // not live: ignored
  index.AddPlan("u", {Peer("u")});         // itself: not a prober of itself
  EXPECT_TRUE(index.AllowedFor("t").empty());
  EXPECT_EQ(index.AllowedFor("u"), (Addresses{"10.0.0.1"}));
}

// Without a fabric map, beyond full_mesh_max_nodes each node samples its own peers, so who probes
// a node is not what its own plan names: the index must follow the plans, not the node's view.
TEST(ProberIndexTest, SampledMeshEveryPlannedProbeIsAllowedAndNoOther) {
  std::vector<AgentInfo> live;
  for (int i = 0; i < 80; ++i) {
    live.push_back(Agent("n" + std::to_string(i), {"10.1." + std::to_string(i) + ".1"}));
  }
  PlannerConfig config;
  config.full_mesh_max_nodes = 8;
  config.sampled_peers = 4;
  const Planner planner(config, nullptr);
  ProberIndex index(live);
  std::map<std::string, std::set<std::string>> probed_by;  // target -> prober addresses
  planner.PlanEach(live, [&](const std::string& node, Plan&& plan) {
    index.AddPlan(node, plan.peers);
    const std::string address = "10.1." + node.substr(1) + ".1";
    for (const PlannedPeer& p : plan.peers) probed_by[p.node].insert(address);
  });
  size_t asymmetric = 0;
  for (const AgentInfo& a : live) {
    const Addresses allowed = index.AllowedFor(a.node);
    const std::set<std::string>& want = probed_by[a.node];
    EXPECT_EQ(std::set<std::string>(allowed.begin(), allowed.end()), want) << a.node;
    EXPECT_TRUE(std::is_sorted(allowed.begin(), allowed.end()));
    if (allowed.size() != 4) ++asymmetric;  // probed by more or fewer than it probes
  }
  EXPECT_GT(asymmetric, 0u);
}

// A partial re-plan re-checks only the lists ReplacePlans returns: every list that changed must be
// among them, over random plans, re-plans and address changes.
TEST(ProberIndexTest, ReplacePlansReturnsEveryListThatChanged) {
  std::vector<AgentInfo> live;
  for (int i = 0; i < 40; ++i) {
    live.push_back(Agent("n" + std::to_string(i), {"10.2." + std::to_string(i) + ".1"}));
  }
  live.push_back(Agent("nameless", {}));
  std::mt19937 rng(5);
  auto random_plan = [&] {
    std::vector<PlannedPeer> peers;
    const size_t n = rng() % 6;
    for (size_t k = 0; k < n; ++k) {
      // Now and then a local address of its own, and now and then a node that is not live.
      const std::string src = rng() % 5 == 0 ? "192.168.0." + std::to_string(rng() % 3) : "";
      peers.push_back(Peer(rng() % 20 == 0 ? "gone" : live[rng() % live.size()].node, src));
    }
    return peers;
  };
  ProberIndex index(live);
  for (const AgentInfo& a : live) index.AddPlan(a.node, random_plan());
  auto lists = [&] {
    std::map<std::string, Addresses> out;
    for (const AgentInfo& a : live) out[a.node] = index.AllowedFor(a.node);
    return out;
  };
  size_t changed_lists = 0, returned = 0;
  for (int step = 0; step < 300; ++step) {
    const auto before = lists();
    const std::string& prober = live[rng() % live.size()].node;
    const std::vector<std::string> may = index.ReplacePlans(prober, random_plan(), random_plan());
    returned += may.size();
    const std::set<std::string> may_set(may.begin(), may.end());
    EXPECT_EQ(may_set.size(), may.size());
    const auto after = lists();
    for (const auto& [node, list] : after) {
      if (list == before.at(node)) continue;
      ++changed_lists;
      EXPECT_TRUE(may_set.contains(node)) << "step " << step << ": " << node << " after " << prober;
    }
  }
  EXPECT_GT(changed_lists, 100u);
  // Unchanged targets are not returned: far fewer than every node each old or new plan names.
  EXPECT_LT(returned, 300u * 8);

  // The same plans through ReplacePlans read as a fresh index built from them.
  ProberIndex fresh(live);
  std::map<std::string, std::vector<PlannedPeer>> plans;
  ProberIndex replaced(live);
  for (const AgentInfo& a : live) replaced.AddPlan(a.node, random_plan());
  for (const AgentInfo& a : live) {
    plans[a.node] = random_plan();
    fresh.AddPlan(a.node, plans[a.node]);
    replaced.ReplacePlans(a.node, plans[a.node], {});
  }
  for (const AgentInfo& a : live) {
    EXPECT_EQ(replaced.AllowedFor(a.node), fresh.AllowedFor(a.node)) << a.node;
  }
}

}  // namespace
}  // namespace fw::aggregator
