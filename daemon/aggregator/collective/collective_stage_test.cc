// The stage at its wire edge: scheduled jobs leave as CollectiveJob messages to every member,
// rendezvous requests are answered as KvReply messages to the right nodes, members' results
// reach /metrics, and a paused node is held out of new jobs.
#include "daemon/aggregator/collective/collective_stage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "daemon/aggregator/collective/two_leaf_fleet_for_test.h"

namespace fw::aggregator::collective {
namespace {

namespace v1 = fabricwatch::v1;
constexpr int64_t kS = 1'000'000'000;

struct Fixture {
  metrics::Registry registry;
  Outbound sent;
  CollectiveStage stage;
  explicit Fixture(OrchestratorConfig c)
      : stage(c, registry, [this](Outbound out) {
          for (auto& m : out) sent.push_back(std::move(m));
        }) {}
  // Job id -> members, of the CollectiveJobs sent since the last call.
  std::map<std::string, std::vector<std::string>> TakeJobs() {
    std::map<std::string, std::vector<std::string>> jobs;
    for (const auto& [node, m] : sent) {
      if (m.has_collective_job()) jobs[m.collective_job().job_id()].push_back(node);
    }
    sent.clear();
    return jobs;
  }
};

OrchestratorConfig Config() {
  OrchestratorConfig c;
  c.schedule.interval_ns = 10 * kS;
  c.schedule.max_in_flight = 100;
  c.schedule.rotating_groups = false;
  return c;
}

TEST(CollectiveStage, JobsRendezvousAndResultsOnTheWire) {
  Fixture f(Config());
  f.stage.Tick([] { return testing::TwoLeafFleet(); }, 0);
  auto jobs = f.TakeJobs();
  ASSERT_EQ(jobs.size(), 4u);  // rails h0+h4, h1+h5, h2+h6, h3+h7
  const auto& [id, members] = *jobs.begin();
  ASSERT_EQ(members.size(), 2u);

  // A get before the set parks; the set acknowledges its sender and releases the waiter.
  v1::KvRequest get;
  get.set_key("collective/" + id + "/k");
  f.stage.OnKvRequest(members[1], get, 1 * kS);
  EXPECT_TRUE(f.sent.empty());
  v1::KvRequest set = get;
  set.set_value("v");
  f.stage.OnKvRequest(members[0], set, 1 * kS);
  std::map<std::string, v1::KvReply> replies;
  for (const auto& [node, m] : f.sent) replies[node] = m.kv_reply();
  f.sent.clear();
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_TRUE(replies[members[0]].found());
  EXPECT_EQ(replies[members[1]].value(), "v");
  // A non-member is refused.
  f.stage.OnKvRequest("h9", get, 1 * kS);
  ASSERT_EQ(f.sent.size(), 1u);
  EXPECT_FALSE(f.sent[0].second.kv_reply().found());

  for (const std::string& m : members) {
    v1::CollectiveResult r;
    r.set_job_id(id);
    r.set_bus_bandwidth_bps(40e9);
    r.set_latency_s(0.001);
    f.stage.OnResult(m, r);
  }
  const std::string metrics = f.registry.RenderToString();
  EXPECT_NE(metrics.find("fabricwatch_collective_busbw_gbps{group_kind=\"rail\"} 40"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("fabricwatch_collective_group_runs_total 1"), std::string::npos);
  EXPECT_NE(metrics.find("fabricwatch_collective_jobs_in_flight 3"), std::string::npos);
}

TEST(CollectiveStage, PausedNodeGetsNoNewJob) {
  Fixture f(Config());
  f.stage.pauses().Pause("h1");
  f.stage.Tick([] { return testing::TwoLeafFleet(); }, 0);
  std::set<std::string> nodes;
  for (const auto& [id, members] : f.TakeJobs()) nodes.insert(members.begin(), members.end());
  EXPECT_FALSE(nodes.contains("h1"));
  EXPECT_FALSE(nodes.contains("h5"));  // its rail partner: the group is held whole
  EXPECT_TRUE(nodes.contains("h0"));
  f.stage.pauses().Resume("h1");
  f.stage.Tick([] { return testing::TwoLeafFleet(); }, 1 * kS);
  nodes.clear();
  for (const auto& [id, members] : f.TakeJobs()) nodes.insert(members.begin(), members.end());
  EXPECT_EQ(nodes, (std::set<std::string>{"h1", "h5"}));
}

// Answers every job sent since the last call: each member reports the slowest member's rate.
void AnswerJobs(Fixture& f, const std::map<std::string, double>& slow) {
  for (const auto& [id, members] : f.TakeJobs()) {
    double rate = 80e9;
    for (const std::string& m : members) {
      if (slow.contains(m)) rate = std::min(rate, slow.at(m));
    }
    for (const std::string& m : members) {
      v1::CollectiveResult r;
      r.set_job_id(id);
      r.set_bus_bandwidth_bps(rate);
      r.set_latency_s(0.001);
      f.stage.OnResult(m, r);
    }
  }
}

TEST(CollectiveStage, BisectionFindingIsAnAnalysisFindingWhileHeld) {
  Fixture f(Config());
  int64_t t = 0;
  for (; t < 120 * kS && f.stage.recent_findings().empty(); t += kS) {
    f.stage.Tick([] { return testing::TwoLeafFleet(); }, t);
    AnswerJobs(f, {{"h5", 30e9}});
  }
  ASSERT_EQ(f.stage.recent_findings().size(), 1u);
  std::vector<Finding> active = f.stage.ActiveFindings(t);
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].kind, "collective_slow");
  EXPECT_EQ(active[0].location.type, "node");
  EXPECT_EQ(active[0].location.node, "h5");
  EXPECT_NEAR(active[0].evidence.at("busbw_gbps"), 30, 1e-6);
  EXPECT_NEAR(active[0].evidence.at("expected_busbw_gbps"), 80, 1e-6);
  EXPECT_NE(active[0].summary.find("rail/1"), std::string::npos) << active[0].summary;

  // Healthy from now on: the finding stays for the hold time after it was found, then goes.
  EXPECT_EQ(f.stage.hold_ns(), CollectiveStage::kMinHoldNs);  // 3 x 10 s is below the minimum
  const int64_t found_at = t - kS;
  EXPECT_EQ(f.stage.ActiveFindings(found_at + f.stage.hold_ns() - kS).size(), 1u);
  EXPECT_TRUE(f.stage.ActiveFindings(found_at + f.stage.hold_ns()).empty());
}

TEST(CollectiveStage, ZeroIntervalStartsNothing) {
  OrchestratorConfig c = Config();
  c.schedule.interval_ns = 0;
  Fixture f(c);
  bool asked = false;
  f.stage.Tick(
      [&] {
        asked = true;
        return testing::TwoLeafFleet();
      },
      0);
  EXPECT_FALSE(asked);
  EXPECT_TRUE(f.TakeJobs().empty());
}

TEST(CollectiveNodesOf, ConnectedNodesOnTheirLeaf) {
  auto map = FabricMap::Parse(R"(routing: ecmp
switches:
  - {name: leaf1, tier: leaf}
  - {name: leaf2, tier: leaf}
  - {name: spine1, tier: spine}
links:
  - {a: leaf1, b: spine1}
  - {a: leaf2, b: spine1}
hosts:
  - {node: a, nic: eth0, address: 198.18.1.2, switch: leaf1}
  - {node: b, nic: eth0, address: 198.18.2.2, switch: leaf2}
)");
  ASSERT_TRUE(map.ok()) << map.status().message();
  std::vector<NodeView> views(4);
  views[0].name = "a";
  views[1].name = "b";
  views[2].name = "c";  // not in the map
  views[3].name = "d";  // down
  for (int i = 0; i < 3; ++i) views[i].connected = views[i].up = true;
  views[0].inventory.add_gpus();
  views[0].inventory.add_gpus();
  const auto nodes = CollectiveNodesOf(views, &*map);
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0].leaf, "leaf1");
  EXPECT_EQ(nodes[0].gpus, 2);
  EXPECT_EQ(nodes[1].leaf, "leaf2");
  EXPECT_EQ(nodes[2].leaf, "");
  EXPECT_EQ(CollectiveNodesOf(views, nullptr)[0].leaf, "");
}

}  // namespace
}  // namespace fw::aggregator::collective
