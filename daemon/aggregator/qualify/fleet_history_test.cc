// The fleet's history per path class on synthetic histories: the baseline, its minimum and its
// window, and stored histories that are empty, partly corrupt or not a history at all.
#include "daemon/aggregator/qualify/fleet_history.h"

#include <gtest/gtest.h>

namespace fw::qualify {
namespace {

using nlohmann::json;

json Report(const std::string& cls, json value) {
  return {{"id", "q"}, {"path_classes", {{cls, {{"rtt_p99_s", std::move(value)}}}}}};
}

TEST(FleetHistory, BaselineIsTheMedianOfRecentRunsPerClass) {
  FleetHistory h;
  h.Add("inter_leaf", 0.0004);
  h.Add("inter_leaf", 0.0005);
  EXPECT_FALSE(h.Baseline("inter_leaf").has_value());  // two runs say little
  h.Add("inter_leaf", 0.0041);                         // one bad run does not move the median
  auto b = h.Baseline("inter_leaf");
  ASSERT_TRUE(b.has_value());
  EXPECT_DOUBLE_EQ(b->rtt_p99_s, 0.0005);
  EXPECT_EQ(b->runs, 3u);
  EXPECT_FALSE(h.Baseline("intra_leaf").has_value());  // classes are apart
  EXPECT_EQ(h.Baselines().size(), 1u);
}

TEST(FleetHistory, KeepsOnlyTheRecentRuns) {
  FleetHistory h;
  for (size_t i = 0; i < FleetHistory::kMaxRuns; ++i) h.Add("intra_leaf", 0.001);
  for (size_t i = 0; i < FleetHistory::kMaxRuns / 2 + 1; ++i) h.Add("intra_leaf", 0.0001);
  EXPECT_DOUBLE_EQ(h.Baseline("intra_leaf")->rtt_p99_s, 0.0001);  // the newer half rules
  EXPECT_EQ(h.Baseline("intra_leaf")->runs, FleetHistory::kMaxRuns);
}

TEST(FleetHistory, LoadsStoredReportsAndSkipsWhatItCannotRead) {
  json reports = json::array();  // newest first, as the store lists them
  for (int i = 0; i < 4; ++i) reports.push_back(Report("inter_leaf", 0.0004));
  reports.push_back(json{{"id", "older aggregator"}});      // no field: skipped silently
  reports.push_back(Report("inter_leaf", "fast"));          // not a number
  reports.push_back(Report("inter_leaf", -1));              // not positive
  reports.push_back(Report("over_the_rainbow", 0.0004));    // not a class
  reports.push_back(json{{"path_classes", "inter_leaf"}});  // not an object
  reports.push_back(json::array());                         // not a report
  FleetHistory h;
  EXPECT_EQ(h.Load(reports), 5u);
  EXPECT_EQ(h.skipped(), 5u);
  auto b = h.Baseline("inter_leaf");
  ASSERT_TRUE(b.has_value());
  EXPECT_DOUBLE_EQ(b->rtt_p99_s, 0.0004);
  EXPECT_EQ(b->runs, 4u);
}

TEST(FleetHistory, EmptyOrForeignHistoryFallsBackToNoBaseline) {
  FleetHistory empty;
  EXPECT_EQ(empty.Load(json::array()), 0u);
  EXPECT_TRUE(empty.Baselines().empty());
  FleetHistory foreign;
  EXPECT_EQ(foreign.Load(json{{"not", "a list"}}), 1u);
  EXPECT_EQ(foreign.skipped(), 1u);
  EXPECT_TRUE(foreign.Baselines().empty());
  foreign.Add("inter_leaf", NAN);
  EXPECT_EQ(foreign.skipped(), 2u);
}

TEST(FleetHistory, DescribesClassesForReasons) {
  EXPECT_EQ(FleetHistory::Describe("intra_leaf"), "same-leaf");
  EXPECT_EQ(FleetHistory::Describe("inter_leaf"), "cross-leaf");
  EXPECT_EQ(FleetHistory::Describe("unknown"), "unmapped");
}

}  // namespace
}  // namespace fw::qualify
