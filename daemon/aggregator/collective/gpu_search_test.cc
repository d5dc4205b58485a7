// The GPU pair search inside one node: a planted slow GPU, a slow link between two GPUs, a node
// slow only with all its GPUs together, failed pairs, and nodes too small to search.
#include "daemon/aggregator/collective/gpu_search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <utility>

namespace fw::aggregator::collective {
namespace {

// Runs every pending pair: 80 units, or 30 when the pair holds a slow GPU or is the slow link.
void RunAll(GpuSearch& s, const std::set<uint32_t>& slow_gpus,
            std::pair<uint32_t, uint32_t> slow_link = {99, 99}, bool fail_all = false) {
  const std::vector<GpuSearch::Run> runs = s.pending();
  for (const GpuSearch::Run& r : runs) {
    ASSERT_EQ(r.devices.size(), 2u);
    const bool slow = slow_gpus.contains(r.devices[0]) || slow_gpus.contains(r.devices[1]) ||
                      (std::min(r.devices[0], r.devices[1]) == slow_link.first &&
                       std::max(r.devices[0], r.devices[1]) == slow_link.second);
    s.OnResult(r.id, slow ? 30 : 80, fail_all);
  }
}

TEST(GpuSearch, SlowGpuIsNamed) {
  GpuSearch s(8, 30, 80);
  ASSERT_EQ(s.pending().size(), 8u);  // (0,1) .. (7,0)
  EXPECT_EQ(s.pending().back().devices, (std::vector<uint32_t>{7, 0}));
  RunAll(s, {3});
  ASSERT_TRUE(s.done());
  ASSERT_EQ(s.results().size(), 1u);
  EXPECT_EQ(s.results()[0].gpu, "GPU3");
  EXPECT_EQ(s.results()[0].cause, "slow GPU");
  EXPECT_EQ(s.results()[0].measured_busbw, 30);
  EXPECT_EQ(s.results()[0].expected_busbw, 80);
}

TEST(GpuSearch, SlowLinkBetweenTwoGpusIsNamed) {
  GpuSearch s(4, 30, 80);
  RunAll(s, {}, {1, 2});
  ASSERT_EQ(s.results().size(), 1u);
  EXPECT_EQ(s.results()[0].gpu, "GPU1-GPU2");
  EXPECT_EQ(s.results()[0].cause, "slow link between GPU1 and GPU2 (NVLink or PCIe)");
}

TEST(GpuSearch, WrapAroundGpuAndTwoSlowGpus) {
  GpuSearch s(8, 30, 80);
  RunAll(s, {0, 5});
  ASSERT_EQ(s.results().size(), 2u);
  EXPECT_EQ(s.results()[0].gpu, "GPU0");
  EXPECT_EQ(s.results()[1].gpu, "GPU5");
}

TEST(GpuSearch, NoSlowPairEndsAtTheNode) {
  GpuSearch s(8, 30, 80);
  RunAll(s, {});
  ASSERT_EQ(s.results().size(), 1u);
  EXPECT_EQ(s.results()[0].gpu, "");
  EXPECT_EQ(s.results()[0].measured_busbw, 30);
  EXPECT_NE(s.results()[0].cause.find("all its GPUs together"), std::string::npos);
}

TEST(GpuSearch, FailedPairsAndSmallNodesEndAtTheNode) {
  GpuSearch failing(4, 30, 80);
  RunAll(failing, {}, {99, 99}, true);
  ASSERT_EQ(failing.results().size(), 1u);
  EXPECT_EQ(failing.results()[0].gpu, "");
  EXPECT_EQ(failing.results()[0].cause, "most of its GPU pairs failed to run");
  GpuSearch two(2, 30, 80);  // the pair is the group: nothing to search
  EXPECT_TRUE(two.done());
  ASSERT_EQ(two.results().size(), 1u);
  EXPECT_EQ(two.results()[0].gpu, "");
  // Unknown and repeated run ids are ignored.
  GpuSearch s(3, 30, 80);
  s.OnResult(99, 1, false);
  EXPECT_EQ(s.pending().size(), 3u);
}

}  // namespace
}  // namespace fw::aggregator::collective
