// The collective stage end to end against a simulated two-leaf fabric: rail groups run each
// interval, one host's link is slow, its group turns slow against its peers, and the bisection
// ends in one collective_slow finding at that host. Also: job timeouts and paused nodes.
#include "daemon/aggregator/collective/orchestrator.h"

#include <gtest/gtest.h>

#include <set>

#include "daemon/aggregator/collective/two_leaf_fleet_for_test.h"

namespace fw::aggregator::collective {
namespace {

constexpr int64_t kS = 1'000'000'000;

std::vector<CollectiveNode> Nodes() { return testing::TwoLeafFleet(); }

OrchestratorConfig Config() {
  OrchestratorConfig c;
  c.schedule.interval_ns = 10 * kS;
  c.schedule.max_in_flight = 100;
  c.schedule.rotating_groups = false;
  return c;
}

// Every member reports the group's rate: the slowest host link among the members.
std::vector<CollectiveSlowFinding> Answer(CollectiveOrchestrator& o,
                                          const std::vector<OutboundJob>& jobs,
                                          const std::map<std::string, double>& slow,
                                          std::set<std::string>* silent = nullptr) {
  std::vector<CollectiveSlowFinding> findings;
  std::map<std::string, JobSpec> by_id;
  for (const OutboundJob& j : jobs) by_id[j.job.job_id] = j.job;
  for (const auto& [id, spec] : by_id) {
    double rate = 80e9;  // bit/s
    for (const std::string& m : spec.members) {
      if (slow.contains(m)) rate = std::min(rate, slow.at(m));
    }
    for (const std::string& m : spec.members) {
      if (silent && silent->contains(m)) continue;
      auto f = o.OnResult(m, id, rate, 0.001, "");
      findings.insert(findings.end(), f.begin(), f.end());
    }
  }
  return findings;
}

TEST(CollectiveOrchestrator, SlowHostLinkBecomesOneFindingAtThatHost) {
  CollectiveOrchestrator o(Config());
  const std::map<std::string, double> slow = {{"h5", 30e9}};
  std::vector<CollectiveSlowFinding> findings;
  for (int64_t t = 0; t < 120 && findings.empty(); ++t) {
    auto out = o.Tick(Nodes(), t * kS);
    auto f = Answer(o, out.jobs, slow);
    findings.insert(findings.end(), f.begin(), f.end());
  }
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].location, "node h5");
  EXPECT_EQ(findings[0].group, "rail/1");
  EXPECT_NEAR(findings[0].measured_bps, 30e9, 1);
  EXPECT_NEAR(findings[0].expected_bps, 80e9, 1);
  EXPECT_EQ(o.counters().bisections, 1u);
  EXPECT_EQ(o.counters().findings, 1u);
  EXPECT_EQ(o.active_bisections(), 0u);
  EXPECT_DOUBLE_EQ(o.counters().busbw_bps_by_kind.at("rail"), 80e9);  // the last rail group
}

TEST(CollectiveOrchestrator, HealthyFleetNeverBisects) {
  CollectiveOrchestrator o(Config());
  for (int64_t t = 0; t < 100; ++t) {
    auto out = o.Tick(Nodes(), t * kS);
    EXPECT_TRUE(Answer(o, out.jobs, {}).empty());
  }
  EXPECT_EQ(o.counters().bisections, 0u);
  EXPECT_EQ(o.counters().runs, 40u);  // 4 rail groups x 10 intervals
  EXPECT_EQ(o.counters().failures, 0u);
}

TEST(CollectiveOrchestrator, SilentMemberTimesTheJobOut) {
  OrchestratorConfig c = Config();
  c.job_timeout_ns = 5 * kS;
  CollectiveOrchestrator o(c);
  std::set<std::string> silent = {"h6"};
  auto out = o.Tick(Nodes(), 0);
  Answer(o, out.jobs, {}, &silent);
  EXPECT_EQ(o.counters().runs, 3u);
  o.Tick(Nodes(), 5 * kS);
  EXPECT_EQ(o.counters().runs, 4u);
  EXPECT_EQ(o.counters().failures, 1u);
}

TEST(CollectiveOrchestrator, PausedNodeGetsNoJobsUntilResumed) {
  CollectiveOrchestrator o(Config());
  o.pauses().Pause("h2");
  for (int64_t t = 0; t < 30; ++t) {
    auto out = o.Tick(Nodes(), t * kS);
    for (const OutboundJob& j : out.jobs) EXPECT_NE(j.node, "h2");
    Answer(o, out.jobs, {});
  }
  o.pauses().Resume("h2");
  bool h2 = false;
  for (int64_t t = 30; t < 32; ++t) {
    auto out = o.Tick(Nodes(), t * kS);
    for (const OutboundJob& j : out.jobs) h2 |= j.node == "h2";
    Answer(o, out.jobs, {});
  }
  EXPECT_TRUE(h2);
}

TEST(CollectiveOrchestrator, RendezvousIsOpenOnlyToAJobsMembers) {
  CollectiveOrchestrator o(Config());
  auto out = o.Tick(Nodes(), 0);
  ASSERT_FALSE(out.jobs.empty());
  const JobSpec& job = out.jobs[0].job;
  const std::string key = "collective/" + job.job_id + "/gloo/0";
  EXPECT_TRUE(o.OnKvRequest(job.members[0], key, "addr", kS)[0].found);
  const std::string outsider = job.members[0] == "h7" ? "h6" : "h7";
  EXPECT_FALSE(o.OnKvRequest(outsider, key, "", kS)[0].found);
}

}  // namespace
}  // namespace fw::aggregator::collective
