// Collective schedule: the three kinds of group, the fleet budget, and pause/resume holding back
// every new job on a paused node until it is resumed.
#include "daemon/aggregator/collective/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "daemon/aggregator/collective/two_leaf_fleet_for_test.h"

namespace fw::aggregator::collective {
namespace {

constexpr int64_t kS = 1'000'000'000;

std::vector<CollectiveNode> Fleet() { return testing::TwoLeafFleet(8); }

bool Has(const JobSpec& j, const std::string& node) {
  return std::find(j.members.begin(), j.members.end(), node) != j.members.end();
}

TEST(CollectiveScheduler, BuildsIntraNodeRailAndRotatingGroups) {
  PauseSet pauses;
  CollectiveScheduler s({.max_in_flight = 100, .rotating_group_size = 4}, pauses);
  auto jobs = s.Due(Fleet(), 0);
  std::map<std::string, int> kinds;
  for (const JobSpec& j : jobs) ++kinds[j.kind];
  EXPECT_EQ(kinds["intra_node"], 1);  // h0 has 8 GPUs
  EXPECT_EQ(kinds["rail"], 4);        // four positions, each across both leaves
  EXPECT_EQ(kinds["rotating"], 2);    // 8 nodes in groups of 4
  for (const JobSpec& j : jobs) {
    EXPECT_LE(j.bytes, 8u << 20);
    if (j.kind == "intra_node") {
      EXPECT_EQ(j.backend, "nccl");
      EXPECT_EQ(j.shape, "intra_node/8");
    }
    if (j.kind == "rail") {
      EXPECT_EQ(j.members.size(), 2u);
    }
    if (j.kind == "rotating") {
      // Interleaved: every rotating group spans both leaves.
      EXPECT_TRUE(Has(j, "h0") || Has(j, "h1") || Has(j, "h2") || Has(j, "h3"));
      EXPECT_TRUE(Has(j, "h4") || Has(j, "h5") || Has(j, "h6") || Has(j, "h7"));
    }
  }
}

TEST(CollectiveScheduler, BudgetBoundsJobsInFlight) {
  PauseSet pauses;
  CollectiveScheduler s({.max_in_flight = 2}, pauses);
  auto first = s.Due(Fleet(), 0);
  EXPECT_EQ(first.size(), 2u);
  EXPECT_TRUE(s.Due(Fleet(), kS).empty());
  s.OnJobDone(first[0].job_id);
  EXPECT_EQ(s.Due(Fleet(), 2 * kS).size(), 1u);
}

TEST(CollectiveScheduler, GroupsTheBudgetLeftOutGoFirstNextInterval) {
  // One job at a time and a new interval at every call: each call starts one group. Every group
  // of the fleet starts within as many intervals as there are groups (none starves).
  PauseSet pauses;
  CollectiveScheduler s({.interval_ns = kS, .max_in_flight = 1}, pauses);
  CollectiveScheduler all({.max_in_flight = 100}, pauses);
  std::set<std::string> want;
  for (const JobSpec& j : all.Due(Fleet(), 0)) {
    want.insert(j.kind == "rotating" ? "rotating" : j.group);  // rotating groups change names
  }
  const size_t groups = want.size();
  ASSERT_GT(groups, 2u);
  std::set<std::string> started;
  for (size_t i = 0; i < groups; ++i) {
    auto jobs = s.Due(Fleet(), static_cast<int64_t>(i) * kS);
    ASSERT_EQ(jobs.size(), 1u) << i;
    started.insert(jobs[0].kind == "rotating" ? "rotating" : jobs[0].group);
    s.OnJobDone(jobs[0].job_id);
  }
  EXPECT_EQ(started, want);
}

TEST(CollectiveScheduler, PausedNodeStartsNothingUntilResumed) {
  PauseSet pauses;
  EXPECT_TRUE(pauses.Pause("h5"));
  EXPECT_FALSE(pauses.Pause("h5"));
  CollectiveScheduler s({.max_in_flight = 100}, pauses);
  auto jobs = s.Due(Fleet(), 0);
  for (const JobSpec& j : jobs) EXPECT_FALSE(Has(j, "h5")) << j.group;
  for (const JobSpec& j : jobs) s.OnJobDone(j.job_id);
  EXPECT_TRUE(s.Due(Fleet(), kS).empty());  // h5's groups are held, not dropped
  EXPECT_TRUE(pauses.Resume("h5"));
  auto held = s.Due(Fleet(), 2 * kS);
  ASSERT_FALSE(held.empty());
  for (const JobSpec& j : held) EXPECT_TRUE(Has(j, "h5")) << j.group;
  EXPECT_EQ(pauses.list().size(), 0u);
}

}  // namespace
}  // namespace fw::aggregator::collective
