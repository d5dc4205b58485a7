// Slow-group detection: noise and short dips never trigger, a sustained shift does, recovery needs
// a clear return (hysteresis), and a group slow from its first run is caught by its peers.
#include "daemon/aggregator/collective/slow_group.h"

#include <gtest/gtest.h>

namespace fw::aggregator::collective {
namespace {

TEST(SlowGroupTracker, NoiseAndShortDipsNeverTrigger) {
  SlowGroupTracker t;
  const double noise[] = {1.0, 0.95, 1.04, 0.97, 1.02, 0.96, 1.05, 0.94};
  for (int round = 0; round < 5; ++round) {
    for (double x : noise) EXPECT_FALSE(t.OnRun("g", "s", 10e9 * x).slow);
  }
  // Two runs 30% down, then back: below the three-run gate.
  EXPECT_FALSE(t.OnRun("g", "s", 7e9).slow);
  EXPECT_FALSE(t.OnRun("g", "s", 7e9).slow);
  EXPECT_FALSE(t.OnRun("g", "s", 10e9).slow);
  EXPECT_FALSE(t.OnRun("g", "s", 7e9).slow);
}

TEST(SlowGroupTracker, SustainedShiftEntersAndClearReturnExits) {
  SlowGroupTracker t;
  for (int i = 0; i < 5; ++i) t.OnRun("g", "s", 10e9);
  EXPECT_FALSE(t.OnRun("g", "s", 8e9).slow);
  EXPECT_FALSE(t.OnRun("g", "s", 8e9).slow);
  GroupVerdict v = t.OnRun("g", "s", 8e9);
  EXPECT_TRUE(v.slow);
  EXPECT_TRUE(v.became_slow);
  EXPECT_EQ(v.basis, "history");
  EXPECT_DOUBLE_EQ(v.expected, 10e9);
  // 92%: no longer "slow" by the entry gate, but not a clear return either: stays slow.
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(t.OnRun("g", "s", 9.2e9).slow);
  EXPECT_TRUE(t.OnRun("g", "s", 9.8e9).slow);
  EXPECT_TRUE(t.OnRun("g", "s", 9.8e9).slow);
  v = t.OnRun("g", "s", 9.8e9);
  EXPECT_FALSE(v.slow);
  EXPECT_TRUE(v.recovered);
}

TEST(SlowGroupTracker, SlowHistoryDoesNotBecomeTheBaseline) {
  SlowGroupTracker t;
  for (int i = 0; i < 3; ++i) t.OnRun("g", "s", 10e9);
  for (int i = 0; i < 30; ++i) t.OnRun("g", "s", 6e9);
  EXPECT_TRUE(t.slow("g"));  // still judged against 10 GB/s, not the slow runs
}

TEST(SlowGroupTracker, PeersCatchAGroupSlowFromTheStart) {
  SlowGroupTracker t;
  for (int i = 0; i < 4; ++i) {
    t.OnRun("rail0", "inter_leaf/8", 10e9);
    t.OnRun("rail1", "inter_leaf/8", 10.2e9);
    t.OnRun("rail2", "inter_leaf/8", 9.9e9);
  }
  GroupVerdict v;
  for (int i = 0; i < 3; ++i) v = t.OnRun("rail3", "inter_leaf/8", 6e9);
  EXPECT_TRUE(v.became_slow);
  EXPECT_EQ(v.basis, "peers");
  EXPECT_NEAR(v.expected, 10e9, 1e6);
  // A group of another shape is not held to these peers.
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(t.OnRun("node7", "intra_node/8", 6e9).slow);
}

TEST(SlowGroupTracker, ProfileExpectation) {
  SlowGroupTracker t;
  GroupVerdict v;
  for (int i = 0; i < 3; ++i) v = t.OnRun("g", "s", 40e9, 100e9);
  EXPECT_TRUE(v.became_slow);
  EXPECT_EQ(v.basis, "profile");
  t.Forget("g");
  EXPECT_EQ(t.size(), 0u);
}

}  // namespace
}  // namespace fw::aggregator::collective
