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
  // Every job carries its operation and the agent's bound on rendezvous and each operation.
  ASSERT_FALSE(f.sent.empty());
  EXPECT_EQ(f.sent[0].second.collective_job().op(), "all_reduce");
  EXPECT_DOUBLE_EQ(f.sent[0].second.collective_job().timeout_s(), 10);
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

// Every member of job `id` reports `rate`.
void Answer(Fixture& f, const std::string& id, const std::vector<std::string>& members,
            double rate) {
  for (const std::string& m : members) {
    v1::CollectiveResult r;
    r.set_job_id(id);
    r.set_bus_bandwidth_bps(rate);
    r.set_latency_s(0.001);
    f.stage.OnResult(m, r);
  }
}

// Answers every job sent since the last call: each member reports the slowest member's rate.
void AnswerJobs(Fixture& f, const std::map<std::string, double>& slow) {
  for (const auto& [id, members] : f.TakeJobs()) {
    double rate = 80e9;
    for (const std::string& m : members) {
      if (slow.contains(m)) rate = std::min(rate, slow.at(m));
    }
    Answer(f, id, members, rate);
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

// Answers every job sent since the last call: a job whose members sit on both leaves (h0-h3 on
// leaf0, h4-h7 on leaf1) crosses the slow leaf-to-leaf path.
void AnswerJobsAcrossSlowLeaves(Fixture& f, double cross_rate) {
  for (const auto& [id, members] : f.TakeJobs()) {
    std::set<char> leaves;
    for (const std::string& m : members) leaves.insert(m[1] < '4' ? 'a' : 'b');
    Answer(f, id, members, leaves.size() > 1 ? cross_rate : 80e9);
  }
}

MeshLink Uplink(const std::string& leaf, const std::string& spine, const std::string& state) {
  return MeshLink{leaf + "~" + spine, leaf, spine, "leaf", "spine", state, 0.05, 1.0, 0, 1};
}

// Healthy runs first (every group's expected rate comes from its own history and its peers'),
// then the leaf-to-leaf path slows down until a bisection ends.
int64_t RunUntilFound(Fixture& f, int64_t t, double cross_rate) {
  for (const int64_t healthy_until = t + 100 * kS; t < healthy_until; t += kS) {
    f.stage.Tick([] { return testing::TwoLeafFleet(); }, t);
    AnswerJobsAcrossSlowLeaves(f, 80e9);
  }
  for (; t < 400 * kS && f.stage.recent_findings().empty(); t += kS) {
    f.stage.Tick([] { return testing::TwoLeafFleet(); }, t);
    AnswerJobsAcrossSlowLeaves(f, cross_rate);
  }
  return t;
}

TEST(CollectiveStage, LinkCulpritWithoutMeshEvidenceStaysAtTheLeafPair) {
  Fixture f(Config());
  const int64_t t = RunUntilFound(f, 0, 30e9);
  ASSERT_FALSE(f.stage.recent_findings().empty());
  EXPECT_EQ(f.stage.recent_findings()[0].location, "link leaf0-leaf1");
  const std::vector<MeshLink> healthy = {Uplink("leaf0", "spine1", "ok"),
                                         Uplink("leaf1", "spine1", "ok")};
  std::vector<Finding> active = f.stage.ActiveFindings(t, [&] { return healthy; });
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].location.type, "pair");
  EXPECT_EQ(active[0].location.id, "leaf0~leaf1");
  EXPECT_EQ(active[0].evidence.at("mesh_corroborated"), 0);
  EXPECT_DOUBLE_EQ(active[0].confidence, 0.5);
  EXPECT_NE(active[0].summary.find("sees no fault"), std::string::npos) << active[0].summary;
}

TEST(CollectiveStage, MeshCorroboratedLinkCulpritIsOnTheMapLinkAndSticks) {
  Fixture f(Config());
  const int64_t t = RunUntilFound(f, 0, 30e9);
  ASSERT_FALSE(f.stage.recent_findings().empty());
  std::vector<MeshLink> mesh = {Uplink("leaf0", "spine1", "ok"),
                                Uplink("leaf1", "spine1", "degraded"),
                                Uplink("leaf1", "spine2", "ok")};
  int asked = 0;
  auto provider = [&] {
    ++asked;
    return mesh;
  };
  std::vector<Finding> active = f.stage.ActiveFindings(t, provider);
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].location.type, "link");
  EXPECT_EQ(active[0].location.id, "leaf1~spine1");
  EXPECT_EQ(active[0].evidence.at("mesh_corroborated"), 1);
  EXPECT_DOUBLE_EQ(active[0].evidence.at("mesh_loss_ratio"), 0.05);
  EXPECT_NE(active[0].summary.find("corroborates it: leaf1~spine1 is degraded"), std::string::npos)
      << active[0].summary;
  EXPECT_EQ(asked, 1);
  // The mesh's link turns ok (its own finding resolved): the collective finding keeps its place.
  mesh[1].state = "ok";
  active = f.stage.ActiveFindings(t + kS, provider);
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].location.id, "leaf1~spine1");
}

TEST(CollectiveStage, FindingResolvesWhenTheSlowGroupsRunAtTheirRateAgain) {
  Fixture f(Config());
  int64_t t = RunUntilFound(f, 0, 30e9);
  ASSERT_FALSE(f.stage.recent_findings().empty());
  // Let every group that turns slow finish its bisection, then heal the path.
  for (const int64_t until = t + 60 * kS; t < until; t += kS) {
    f.stage.Tick([] { return testing::TwoLeafFleet(); }, t);
    AnswerJobsAcrossSlowLeaves(f, 30e9);
  }
  ASSERT_EQ(f.stage.ActiveFindings(t).size(), 1u);
  const int64_t healed_at = t;
  for (; t < healed_at + 120 * kS && !f.stage.ActiveFindings(t).empty(); t += kS) {
    f.stage.Tick([] { return testing::TwoLeafFleet(); }, t);
    AnswerJobsAcrossSlowLeaves(f, 80e9);
  }
  EXPECT_TRUE(f.stage.ActiveFindings(t).empty());
  EXPECT_LT(t - healed_at, f.stage.hold_ns());  // resolved by recovery, not by the hold time
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

TEST(MemberTimesOf, ANodeOfSeveralRanksSpansItsFirstArrivalToItsLastExit) {
  v1::CollectiveResult r;
  r.add_op_seconds(0.01);
  for (int k = 0; k < 2; ++k) {
    v1::CollectiveRankTimes* t = r.add_rank_times();
    t->set_rank(static_cast<uint32_t>(k));
    t->add_arrive_ns(100 + k * 5);
    t->add_exit_ns(1000 + k * 7);
  }
  MemberTimes m = MemberTimesOf(r);
  EXPECT_EQ(m.arrive_ns, std::vector<int64_t>{100});
  EXPECT_EQ(m.exit_ns, std::vector<int64_t>{1007});
  EXPECT_EQ(m.op_seconds, std::vector<double>{0.01});
  // Ranks of different lengths: no timestamps, the operation times stay.
  r.mutable_rank_times(1)->add_arrive_ns(5);
  r.mutable_rank_times(1)->add_exit_ns(6);
  m = MemberTimesOf(r);
  EXPECT_TRUE(m.arrive_ns.empty());
  EXPECT_EQ(m.op_seconds.size(), 1u);
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
  EXPECT_EQ(nodes[0].nccl_gpus, 0);  // no NCCL announced

  // NCCL as the Hello announced it: ready with its GPUs, anything else none.
  views[0].collective.set_nccl_state("ready");
  views[0].collective.set_nccl_gpus(2);
  views[0].ingest.session_id = 7;
  views[1].collective.set_nccl_state("no_driver");
  views[1].collective.set_nccl_gpus(4);
  const auto announced = CollectiveNodesOf(views, &*map);
  EXPECT_EQ(announced[0].nccl_gpus, 2);
  EXPECT_EQ(announced[0].session, 7u);
  EXPECT_EQ(announced[1].nccl_gpus, 0);
}

TEST(CollectiveStage, NcclGroupAcrossNodesOnTheWireAndInMetrics) {
  OrchestratorConfig c = Config();
  c.schedule.intra_node = false;
  Fixture f(c);
  f.stage.Tick(
      [] {
        std::vector<CollectiveNode> nodes = testing::TwoLeafFleet();
        for (CollectiveNode& n : nodes) n.gpus = n.nccl_gpus = 4;
        return nodes;
      },
      0);
  ASSERT_FALSE(f.sent.empty());
  std::map<std::string, std::vector<std::string>> jobs;
  for (const auto& [node, m] : f.sent) {
    const v1::CollectiveJob& j = m.collective_job();
    EXPECT_EQ(j.backend(), "nccl");
    ASSERT_EQ(j.member_gpus_size(), 2);  // rails of two members, 4 GPU ranks each
    EXPECT_EQ(j.member_gpus(0), 4u);
    EXPECT_EQ(j.member_gpus(1), 4u);
    jobs[j.job_id()].push_back(node);
  }
  f.sent.clear();
  const auto& [id, members] = *jobs.begin();
  Answer(f, id, members, 300e9);
  const std::string metrics = f.registry.RenderToString();
  EXPECT_NE(metrics.find("fabricwatch_collective_busbw_gbps{group_kind=\"nccl_rail\"} 300"),
            std::string::npos)
      << metrics;
}

}  // namespace
}  // namespace fw::aggregator::collective
