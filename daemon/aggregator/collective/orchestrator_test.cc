// The collective stage end to end against a simulated two-leaf fabric: rail groups run each
// interval, one host's link is slow, its group turns slow against its peers, and the bisection
// ends in one collective_slow finding at that host. Also: job timeouts and paused nodes.
#include "daemon/aggregator/collective/orchestrator.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// A qualification's all-reduce: sent to its members at once, kept out of the slow-group
// tracking, its outcome taken once; a member's error and a silent member are named.
TEST(CollectiveOrchestrator, OnDemandJobReportsItsOutcomeOnce) {
  OrchestratorConfig c = Config();
  c.job_timeout_ns = 5 * kS;
  c.schedule.interval_ns = 1000 * kS;
  CollectiveOrchestrator o(c);
  auto out = o.StartOnDemand({"h1", "h2", "h3"}, 1 << 20, 5, 0);
  ASSERT_EQ(out.jobs.size(), 3u);
  const std::string id = out.jobs[0].job.job_id;
  EXPECT_EQ(out.jobs[2].node, "h3");
  EXPECT_EQ(out.jobs[0].job.backend, "gloo");
  EXPECT_EQ(out.jobs[0].job.iterations, 5u);
  o.OnResult("h1", id, 9e9, 0.001, "");
  EXPECT_FALSE(o.TakeOnDemand(id).has_value());
  o.OnResult("h2", id, 8e9, 0.001, "");
  o.OnResult("h3", id, 7e9, 0.001, "");
  auto done = o.TakeOnDemand(id);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->busbw_bps, 7e9);
  EXPECT_TRUE(done->errors.empty());
  EXPECT_FALSE(o.TakeOnDemand(id).has_value());  // once

  out = o.StartOnDemand({"h1", "h2", "h3"}, 1 << 20, 5, 10 * kS);
  const std::string id2 = out.jobs[0].job.job_id;
  EXPECT_NE(id2, id);
  o.OnResult("h1", id2, 0, 0, "gloo: connect refused");
  o.Tick({}, 16 * kS);  // h2 and h3 never answer: the job times out
  done = o.TakeOnDemand(id2);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->errors.at("h1"), "gloo: connect refused");
  EXPECT_EQ(done->missing, (std::vector<std::string>{"h2", "h3"}));
  EXPECT_EQ(done->busbw_bps, 0);

  out = o.StartOnDemand({"h1", "h2"}, 1 << 20, 5, 20 * kS);
  EXPECT_EQ(o.jobs_in_flight(), 1u);
  o.Abandon(out.jobs[0].job.job_id);
  EXPECT_EQ(o.jobs_in_flight(), 0u);
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

TEST(CollectiveOrchestrator, ExitAlignedLatenessNamesTheLateRank) {
  // Rank 1 arrives 30 ms late each iteration: its own operation is short, the others' hold the
  // wait.
  const Lateness l =
      ExitAlignedLateness({{0.035, 0.036, 0.034}, {0.005, 0.006, 0.004}, {0.034, 0.035, 0.036}});
  ASSERT_EQ(l.lateness_s.size(), 3u);
  EXPECT_NEAR(l.lateness_s[1], 0.030, 1e-9);
  EXPECT_NEAR(l.lateness_s[0], 0.0, 1e-9);
  EXPECT_NEAR(l.lateness_s[2], 0.001, 1e-9);
  EXPECT_NEAR(l.group_seconds, 0.036, 1e-9);
  // A member without times gets 0 and no iteration is usable.
  EXPECT_EQ(ExitAlignedLateness({{0.1}, {}}).group_seconds, 0);
}

// Every member reports its own operation times: a late host's are short (it waits least), the
// others' hold its delay, and every member's busbw reflects the group time.
std::vector<CollectiveSlowFinding> AnswerWithTimes(CollectiveOrchestrator& o,
                                                   const std::vector<OutboundJob>& jobs,
                                                   const std::string& late_host) {
  std::vector<CollectiveSlowFinding> findings;
  std::map<std::string, JobSpec> by_id;
  for (const OutboundJob& j : jobs) by_id[j.job.job_id] = j.job;
  for (const auto& [id, spec] : by_id) {
    const bool late =
        std::find(spec.members.begin(), spec.members.end(), late_host) != spec.members.end();
    const double group_s = late ? 0.040 : 0.010;
    for (const std::string& m : spec.members) {
      const double own = m == late_host ? 0.010 : group_s;
      auto f = o.OnResult(m, id, 80e9 * 0.010 / group_s, own, "", std::vector<double>(10, own));
      findings.insert(findings.end(), f.begin(), f.end());
    }
  }
  return findings;
}

TEST(CollectiveOrchestrator, LateHostIsNamedFromWireTimes) {
  CollectiveOrchestrator o(Config());
  std::vector<CollectiveSlowFinding> findings;
  for (int64_t t = 0; t < 200 && findings.empty(); ++t) {
    auto out = o.Tick(Nodes(), t * kS);
    // The fault starts after every group has a history of healthy runs.
    auto f = AnswerWithTimes(o, out.jobs, t >= 40 ? "h6" : "");
    findings.insert(findings.end(), f.begin(), f.end());
  }
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].location, "node h6");
  EXPECT_EQ(findings[0].node, "h6");
  EXPECT_EQ(findings[0].cause, "late host");
}

}  // namespace
}  // namespace fw::aggregator::collective
