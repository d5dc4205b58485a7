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

TEST(CollectiveOrchestrator, SlowIntraNodeGroupIsSearchedDownToAGpu) {
  // h0's 8 GPUs run their own NCCL group; after 4 healthy runs GPU 5 slows every collective it
  // is in to 30 of 80 Gbit/s. The group turns slow and its GPU pairs name GPU 5.
  OrchestratorConfig c = Config();
  c.schedule.rail_groups = false;
  CollectiveOrchestrator o(c);
  std::vector<CollectiveSlowFinding> findings;
  std::set<std::vector<uint32_t>> pairs;
  for (int64_t t = 0; t < 200 && findings.empty(); ++t) {
    auto out = o.Tick(testing::TwoLeafFleet(8), t * kS);
    for (const OutboundJob& j : out.jobs) {
      ASSERT_EQ(j.node, "h0");
      EXPECT_EQ(j.job.backend, "nccl");
      EXPECT_TRUE(j.job.member_gpus.empty());
      const bool pair = j.job.kind == "gpu_search";
      if (pair) pairs.insert(j.job.devices);
      const bool with_5 =
          pair ? std::count(j.job.devices.begin(), j.job.devices.end(), 5u) > 0 : t >= 40;
      auto f = o.OnResult("h0", j.job.job_id, with_5 ? 30e9 : 80e9, 0.001, "");
      findings.insert(findings.end(), f.begin(), f.end());
    }
  }
  EXPECT_EQ(pairs.size(), 8u);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].location, "gpu h0/GPU5");
  EXPECT_EQ(findings[0].node, "h0");
  EXPECT_EQ(findings[0].gpu, "GPU5");
  EXPECT_EQ(findings[0].group, "node/h0");
  EXPECT_EQ(findings[0].cause, "slow GPU");
  EXPECT_NEAR(findings[0].measured_bps, 30e9, 1);
  EXPECT_NEAR(findings[0].expected_bps, 80e9, 1);
  EXPECT_EQ(o.counters().bisections, 1u);
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

TEST(CollectiveOrchestrator, ArrivalsFromOperationTimesNameTheLateRank) {
  // Rank 1 arrives 30 ms late each iteration: its own operation is short, the others' hold the
  // wait (an agent that sends no timestamps).
  const Arrivals a = AlignArrivals({{.op_seconds = {0.035, 0.036, 0.034}},
                                    {.op_seconds = {0.005, 0.006, 0.004}},
                                    {.op_seconds = {0.034, 0.035, 0.036}}});
  ASSERT_EQ(a.iterations, 3u);
  EXPECT_NEAR(a.median_late_s[1], 0.030, 1e-9);
  EXPECT_NEAR(a.median_late_s[0], 0.0, 1e-9);
  EXPECT_NEAR(a.median_late_s[2], 0.001, 1e-9);
  EXPECT_NEAR(a.group_seconds, 0.036, 1e-9);
  // A member without times: no iteration is usable.
  EXPECT_EQ(AlignArrivals({{.op_seconds = {0.1}}, {}}).iterations, 0u);
}

TEST(CollectiveOrchestrator, ArrivalsFromTimestampsAlignHostClocksOnExits) {
  // Three hosts with unrelated clock origins; host 2 arrives 5 ms after the others each
  // iteration (4 ms in the third); host 1 leaves 0.1 ms after the others once (the median offset
  // over iterations ignores it).
  const int64_t ms = 1'000'000;
  auto member = [&](int64_t origin, std::vector<int64_t> arrive, std::vector<int64_t> exit) {
    MemberTimes m;
    for (int64_t a : arrive) m.arrive_ns.push_back(origin + a);
    for (int64_t e : exit) m.exit_ns.push_back(origin + e);
    return m;
  };
  const Arrivals a = AlignArrivals({
      member(0, {0, 20 * ms, 40 * ms}, {15 * ms, 35 * ms, 55 * ms}),
      member(7'000'000'000'000, {0, 20 * ms, 40 * ms}, {15 * ms, 35 * ms + ms / 10, 55 * ms}),
      member(-3'000'000'000, {5 * ms, 25 * ms, 44 * ms}, {15 * ms, 35 * ms, 55 * ms}),
  });
  ASSERT_EQ(a.iterations, 3u);
  EXPECT_NEAR(a.late_s[2][0], 0.005, 1e-6);
  EXPECT_NEAR(a.late_s[2][2], 0.004, 1e-6);
  EXPECT_NEAR(a.median_late_s[2], 0.005, 1e-6);
  EXPECT_NEAR(a.median_late_s[0], 0.0, 1e-6);
  EXPECT_NEAR(a.median_late_s[1], 0.0, 1e-6);
  EXPECT_NEAR(a.group_seconds, 0.015, 1e-6);
}

// Every member reports its arrivals and exits on its own clock (each host's origin differs): a late
// host arrives 3 ms after the others in every iteration of a 10 ms operation (a 23% longer group
// time), and every member's busbw reflects the group time.
std::vector<CollectiveSlowFinding> AnswerWithTimes(CollectiveOrchestrator& o,
                                                   const std::vector<OutboundJob>& jobs,
                                                   const std::string& late_host) {
  constexpr int64_t kMs = 1'000'000;
  std::vector<CollectiveSlowFinding> findings;
  std::map<std::string, JobSpec> by_id;
  for (const OutboundJob& j : jobs) by_id[j.job.job_id] = j.job;
  for (const auto& [id, spec] : by_id) {
    const bool late =
        std::find(spec.members.begin(), spec.members.end(), late_host) != spec.members.end();
    const int64_t group_ns = late ? 13 * kMs : 10 * kMs;
    for (const std::string& m : spec.members) {
      const int64_t origin = static_cast<int64_t>(std::hash<std::string>{}(m) % 1000) * 1000 * kMs;
      const int64_t wait = m == late_host ? 3 * kMs : 0;
      MemberTimes t;
      for (int64_t i = 0; i < 10; ++i) {
        t.arrive_ns.push_back(origin + i * 20 * kMs + wait);
        t.exit_ns.push_back(origin + i * 20 * kMs + group_ns);
        t.op_seconds.push_back(static_cast<double>(group_ns - wait) * 1e-9);
      }
      const double own_s = t.op_seconds[0];
      auto f = o.OnResult(m, id, 80e9 * 10 * kMs / static_cast<double>(group_ns), own_s, "",
                          std::move(t));
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
  EXPECT_EQ(findings[0].detail, "arrives 3.0 ms late in 10 of 10 iterations");
  EXPECT_EQ(findings[0].late_iterations, 10);
}

// The two-leaf fleet with 2 GPUs per node and NCCL ready on them, except on `without`.
std::vector<CollectiveNode> GpuNodes(const std::set<std::string>& without = {}) {
  std::vector<CollectiveNode> nodes = Nodes();
  for (CollectiveNode& n : nodes) {
    n.gpus = 2;
    n.nccl_gpus = without.contains(n.name) ? 0 : 2;
  }
  return nodes;
}

TEST(CollectiveOrchestrator, SlowNcclGroupIsBisectedWithNcclRunsToTheHost) {
  // h4 has no usable NCCL: its rail group (h0, h4) runs Gloo and reads healthy, yet h4 is never a
  // partner in the NCCL bisection of h5's slow NCCL rail group.
  OrchestratorConfig c = Config();
  c.schedule.intra_node = false;
  CollectiveOrchestrator o(c);
  const std::map<std::string, double> slow = {{"h5", 30e9}};
  std::vector<CollectiveSlowFinding> findings;
  size_t bisection_runs = 0;
  for (int64_t t = 0; t < 120 && findings.empty(); ++t) {
    auto out = o.Tick(GpuNodes({"h4"}), t * kS);
    for (const OutboundJob& j : out.jobs) {
      const bool with_h4 =
          std::find(j.job.members.begin(), j.job.members.end(), "h4") != j.job.members.end();
      if (with_h4) {
        EXPECT_EQ(j.job.backend, "gloo") << j.job.kind;
        continue;
      }
      EXPECT_EQ(j.job.backend, "nccl") << j.job.kind;
      EXPECT_EQ(j.job.member_gpus, std::vector<uint32_t>(j.job.members.size(), 2));
      if (j.job.kind == "bisection") ++bisection_runs;
    }
    auto f = Answer(o, out.jobs, slow);
    findings.insert(findings.end(), f.begin(), f.end());
  }
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].location, "node h5");
  EXPECT_EQ(findings[0].group, "nccl_rail/1");
  EXPECT_NEAR(findings[0].measured_bps, 30e9, 1);
  EXPECT_NEAR(findings[0].expected_bps, 80e9, 1);
  EXPECT_GT(bisection_runs, 0u);
  // The NCCL rail groups' busbw is kept apart from the Gloo ones' (and from the history a
  // qualification compares with, which is Gloo's).
  EXPECT_DOUBLE_EQ(o.counters().busbw_bps_by_kind.at("nccl_rail"), 80e9);
  EXPECT_DOUBLE_EQ(o.counters().busbw_bps_by_kind.at("rail"), 80e9);  // (h0, h4) on Gloo
  EXPECT_EQ(o.LastAcrossNodesBusbw(1 << 20), 0);
}

TEST(CollectiveOrchestrator, NodeWhoseNcclFailsRunsGlooUntilItsAgentRestarts) {
  OrchestratorConfig c = Config();
  c.schedule.intra_node = false;
  CollectiveOrchestrator o(c);
  std::vector<CollectiveNode> nodes = GpuNodes();
  for (CollectiveNode& n : nodes) n.session = 1;
  auto out = o.Tick(nodes, 0);
  std::map<std::string, JobSpec> jobs;
  for (const OutboundJob& j : out.jobs) jobs[j.job.job_id] = j.job;
  for (const auto& [id, spec] : jobs) {
    EXPECT_EQ(spec.backend, "nccl");
    for (const std::string& m : spec.members) {
      o.OnResult(m, id, m == "h5" ? 0 : 80e9, 0.001,
                 m == "h5" ? "nccl: no driver (cudaGetDeviceCount: CUDA error 35)" : "");
    }
  }
  EXPECT_EQ(o.counters().failures, 1u);
  auto backend_of = [](const std::vector<OutboundJob>& js, const std::string& node) {
    for (const OutboundJob& j : js) {
      if (j.node == node) return j.job.backend;
    }
    return std::string();
  };
  out = o.Tick(nodes, 10 * kS);  // the next interval
  EXPECT_EQ(backend_of(out.jobs, "h5"), "gloo");
  EXPECT_EQ(backend_of(out.jobs, "h1"), "gloo");  // its rail partner
  EXPECT_EQ(backend_of(out.jobs, "h6"), "nccl");
  Answer(o, out.jobs, {});
  nodes[5].session = 2;  // h5's agent restarted: its new Hello is believed again
  out = o.Tick(nodes, 20 * kS);
  EXPECT_EQ(backend_of(out.jobs, "h5"), "nccl");
}

TEST(CollectiveOrchestrator, JobAMemberSkippedForBusyGpusIsNotAFailure) {
  OrchestratorConfig c = Config();
  c.schedule.intra_node = false;
  CollectiveOrchestrator o(c);
  auto out = o.Tick(GpuNodes(), 0);
  const JobSpec job = out.jobs[0].job;
  o.OnResult(job.members[0], job.job_id, 0, 0, "skipped: GPUs busy: gpu1 (utilization 87%)");
  o.OnResult(job.members[1], job.job_id, 0, 0, "UNAVAILABLE: nccl init timed out");
  EXPECT_EQ(o.counters().skipped, 1u);
  EXPECT_EQ(o.counters().failures, 0u);
}

}  // namespace
}  // namespace fw::aggregator::collective
