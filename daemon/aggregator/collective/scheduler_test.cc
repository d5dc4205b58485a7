// Collective schedule: the three kinds of group, the fleet budget, and pause/resume holding back
// every new job on a paused node until it is resumed.
#include "daemon/aggregator/collective/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

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

// h0..h7 with `gpus` GPUs each, every one announcing NCCL ready on them.
std::vector<CollectiveNode> GpuFleet(int gpus) {
  std::vector<CollectiveNode> nodes = testing::TwoLeafFleet();
  for (CollectiveNode& n : nodes) n.gpus = n.nccl_gpus = gpus;
  return nodes;
}

TEST(CollectiveScheduler, GroupsAcrossNodesRunNcclWhenEveryMemberAnnouncedIt) {
  PauseSet pauses;
  CollectiveScheduler s({.max_in_flight = 100, .rotating_group_size = 4}, pauses);
  std::vector<CollectiveNode> nodes = GpuFleet(4);
  nodes[5].nccl_gpus = 2;  // h5 drives 2 with NCCL: its groups give every member 2 ranks
  std::map<std::string, int> kinds;
  for (const JobSpec& j : s.Due(nodes, 0)) {
    ++kinds[j.kind];
    if (j.kind == "intra_node") continue;
    EXPECT_EQ(j.backend, "nccl") << j.group;
    EXPECT_TRUE(j.kind == "nccl_rail" || j.kind == "nccl_rotating") << j.kind;
    EXPECT_TRUE(j.group.starts_with(j.kind + "/")) << j.group;
    const uint32_t g = Has(j, "h5") ? 2 : 4;
    EXPECT_EQ(j.member_gpus, std::vector<uint32_t>(j.members.size(), g)) << j.group;
    EXPECT_EQ(j.shape, j.kind + "/" + std::to_string(j.members.size()) + "x" + std::to_string(g));
  }
  EXPECT_EQ(kinds["intra_node"], 8);
  EXPECT_EQ(kinds["nccl_rail"], 4);
  EXPECT_EQ(kinds["nccl_rotating"], 2);
  EXPECT_EQ(kinds["rail"] + kinds["rotating"], 0);
}

TEST(CollectiveScheduler, AGroupWithAMemberWithoutNcclRunsGloo) {
  // h1 announced no usable NCCL (no driver): its rail group (h1, h5) and its rotating group run
  // Gloo under the Gloo names, so the histories of the two backends never mix; the rest NCCL.
  PauseSet pauses;
  CollectiveScheduler s({.max_in_flight = 100, .rotating_group_size = 4}, pauses);
  std::vector<CollectiveNode> nodes = GpuFleet(2);
  nodes[1].nccl_gpus = 0;
  for (const JobSpec& j : s.Due(nodes, 0)) {
    if (j.kind == "intra_node") continue;
    if (Has(j, "h1")) {
      EXPECT_EQ(j.backend, "gloo") << j.group;
      EXPECT_TRUE(j.member_gpus.empty());
      EXPECT_TRUE(j.kind == "rail" || j.kind == "rotating") << j.kind;
      EXPECT_EQ(j.shape, j.kind + "/" + std::to_string(j.members.size()));
      if (j.kind == "rail") EXPECT_EQ(j.group, "rail/1");
    } else {
      EXPECT_EQ(j.backend, "nccl") << j.group;
      EXPECT_TRUE(j.group.starts_with("nccl_")) << j.group;
    }
  }
  // Off by configuration: every group across nodes is Gloo.
  CollectiveScheduler off({.max_in_flight = 100, .nccl_across_nodes = false}, pauses);
  for (const JobSpec& j : off.Due(GpuFleet(2), 0)) {
    if (j.kind != "intra_node") EXPECT_EQ(j.backend, "gloo") << j.group;
  }
}

TEST(CollectiveScheduler, NcclGroupsKeepTheBudgetAndThePause) {
  PauseSet pauses;
  pauses.Pause("h6");
  CollectiveScheduler s({.max_in_flight = 3, .intra_node = false}, pauses);
  auto jobs = s.Due(GpuFleet(2), 0);
  ASSERT_EQ(jobs.size(), 3u);  // the fleet budget
  for (const JobSpec& j : jobs) {
    EXPECT_EQ(j.backend, "nccl");
    EXPECT_FALSE(Has(j, "h6")) << j.group;
  }
  for (const JobSpec& j : jobs) s.OnJobDone(j.job_id);
  for (const JobSpec& j : s.Due(GpuFleet(2), kS)) EXPECT_FALSE(Has(j, "h6")) << j.group;
  // A bisection run of an NCCL group: NCCL with the same ranks per member.
  const JobSpec run = s.Adhoc({"h0", "h4"}, "bisection", "nccl", 2);
  EXPECT_EQ(run.backend, "nccl");
  EXPECT_EQ(run.member_gpus, (std::vector<uint32_t>{2, 2}));
  EXPECT_TRUE(s.Adhoc({"h0", "h4"}, "bisection").member_gpus.empty());
}

}  // namespace
}  // namespace fw::aggregator::collective
