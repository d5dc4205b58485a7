// Scoring: matching findings to ground truth, time parsing, /proc and metric text.
#include "tests/sim/scorer.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace fw::sim {
namespace {

class ScorerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = ParseScenario(R"(
topology: {spines: 2, leaves: 4, hosts_per_leaf: 8}
duration: 100s
faults:
  - {kind: link_loss, link: leaf001~spine01, loss: 0.05, start: 20s, end: 60s}
  - {kind: nic_degraded, node: node00003, nic: mlx5_0, loss: 0.05, start: 20s}
)",
                           "s.yaml");
    ASSERT_TRUE(s.ok()) << s.status().message();
    scenario_ = *s;
    tree_.emplace(*FatTree::Build(scenario_.topology));
    truths_ = GroundTruth(scenario_, *tree_, /*run_start=*/1000, /*time_scale=*/1);
  }
  // Polls that see finding "a" on leaf001~spine01 as link_degraded at 1023, link_down at 1025.
  static std::vector<ObservedFinding> Escalating() {
    FindingsTracker tracker;
    ObservedFinding f = F("a", "link_degraded", "link", "leaf001~spine01", 1023);
    tracker.Update({f});
    f.kind = "link_down";
    f.observed_unix_s = 1025;
    tracker.Update({f});
    return tracker.All();
  }
  static ObservedFinding F(std::string id, std::string kind, std::string type, std::string loc,
                           double at, std::string node = "", std::string device = "") {
    ObservedFinding f;
    f.id = std::move(id);
    f.kind = std::move(kind);
    f.type = std::move(type);
    f.loc_id = std::move(loc);
    f.node = std::move(node);
    f.device = std::move(device);
    f.first_seen_unix_s = f.observed_unix_s = at;
    return f;
  }
  Scenario scenario_;
  std::optional<FatTree> tree_;
  std::vector<Truth> truths_;
};

TEST_F(ScorerTest, GroundTruthNamesTheExactElement) {
  ASSERT_EQ(truths_.size(), 2u);
  EXPECT_EQ(truths_[0].type, "link");
  EXPECT_EQ(truths_[0].id, "leaf001~spine01");
  EXPECT_TRUE(truths_[0].related.count("spine01"));
  EXPECT_DOUBLE_EQ(truths_[0].start_unix_s, 1020);
  EXPECT_DOUBLE_EQ(truths_[0].end_unix_s, 1060);
  EXPECT_EQ(truths_[1].type, "nic");
  EXPECT_EQ(truths_[1].node, "node00003");
  EXPECT_TRUE(truths_[1].related.count("node00003:mlx5_0~leaf000"));
}

TEST_F(ScorerTest, PerfectRun) {
  Score s = ComputeScore(truths_,
                         {F("a", "link_degraded", "link", "leaf001~spine01", 1026),
                          F("b", "nic_degraded", "nic", "", 1030, "node00003", "mlx5_0")},
                         30);
  EXPECT_EQ(s.true_positives, 2u);
  EXPECT_EQ(s.false_positives, 0u);
  EXPECT_DOUBLE_EQ(s.precision, 1);
  EXPECT_DOUBLE_EQ(s.recall, 1);
  EXPECT_DOUBLE_EQ(s.localization, 1);
  EXPECT_DOUBLE_EQ(s.faults[0].ttd_s, 6);
  EXPECT_DOUBLE_EQ(s.ttd_median_s, 8);
}

TEST_F(ScorerTest, RelatedButInexactCountsAsDetectedNotLocalized) {
  Score s = ComputeScore(truths_,
                         {F("a", "switch_degraded", "switch", "spine01", 1030),
                          F("b", "link_degraded", "link", "node00003:mlx5_0~leaf000", 1031)},
                         30);
  EXPECT_DOUBLE_EQ(s.precision, 1);
  EXPECT_DOUBLE_EQ(s.recall, 1);
  EXPECT_DOUBLE_EQ(s.localization, 0);
}

TEST_F(ScorerTest, WrongPlaceWrongTimeAndWrongKindAreHandled) {
  Score s = ComputeScore(truths_,
                         {F("early", "link_degraded", "link", "leaf001~spine01", 1005),
                          F("elsewhere", "link_degraded", "link", "leaf002~spine00", 1030),
                          F("kind", "link_down", "link", "leaf001~spine01", 1040),
                          F("late", "link_degraded", "link", "leaf001~spine01", 1095)},
                         30);
  EXPECT_EQ(s.false_positives, 3u);  // early, elsewhere, and after the grace period
  EXPECT_EQ(s.true_positives, 1u);   // the right link, though with the wrong kind
  EXPECT_TRUE(s.faults[0].detected);
  EXPECT_FALSE(s.faults[0].localized);
  EXPECT_FALSE(s.faults[1].detected);
  EXPECT_DOUBLE_EQ(s.recall, 0.5);
  EXPECT_DOUBLE_EQ(s.precision, 0.25);
}

// A link that goes down is first seen as degraded (its window holds a second of partial loss),
// then escalates in place; the scorer froze the first kind and called it unlocalized.
TEST_F(ScorerTest, FindingThatEscalatesToAnAcceptedKindLocalizesFromThen) {
  truths_[0].kinds = {"link_down"};
  const std::vector<ObservedFinding> all = Escalating();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].kind, "link_down");
  EXPECT_DOUBLE_EQ(all[0].observed_unix_s, 1023);
  Score s = ComputeScore(truths_, all, 30);
  EXPECT_EQ(s.true_positives, 1u);
  EXPECT_TRUE(s.faults[0].localized);
  EXPECT_DOUBLE_EQ(s.faults[0].ttd_s, 5);  // when link_down first showed, not 3
}

TEST_F(ScorerTest, FindingThatNeverTakesAnAcceptedKindIsNotLocalized) {
  truths_[0].kinds = {"link_flapping"};
  Score s = ComputeScore(truths_, Escalating(), 30);
  EXPECT_TRUE(s.faults[0].detected);
  EXPECT_FALSE(s.faults[0].localized);
  EXPECT_DOUBLE_EQ(s.faults[0].ttd_s, 3);
}

TEST_F(ScorerTest, CandidateListNamingTheFaultIsRelatedNotExact) {
  Score s = ComputeScore(truths_,
                         {F("a", "link_degraded", "switch", "spine00,spine01", 1030),
                          F("b", "link_degraded", "switch", "spine00,spine02", 1030)},
                         30);
  EXPECT_TRUE(s.faults[0].detected);  // leaf001~spine01 is a link of spine01
  EXPECT_FALSE(s.faults[0].localized);
  EXPECT_EQ(s.true_positives, 1u);
  EXPECT_EQ(s.false_positives, 1u);
}

TEST(ScorerParseTest, Rfc3339) {
  EXPECT_EQ(ParseRfc3339("1970-01-01T00:00:03Z"), 3.0);
  EXPECT_DOUBLE_EQ(*ParseRfc3339("2024-05-01T12:00:00.250Z"), 1714564800.25);
  EXPECT_DOUBLE_EQ(*ParseRfc3339("2024-05-01T14:00:00+02:00"), 1714564800);
  EXPECT_FALSE(ParseRfc3339("2024-05-01 12:00:00").has_value());
  EXPECT_FALSE(ParseRfc3339("2024-05-01T12:00:00").has_value());
  EXPECT_FALSE(ParseRfc3339("").has_value());
}

TEST(ScorerParseTest, FindingsBodies) {
  int malformed = 0;
  auto f = ParseFindings(R"([{"id":"x","kind":"link_down","active":true,
      "location":{"type":"link","id":"leaf000~spine00"},"first_seen":"1970-01-01T00:00:07Z"},
      {"kind":"no id"}, 5])",
                         100, &malformed);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->size(), 1u);
  EXPECT_EQ((*f)[0].loc_id, "leaf000~spine00");
  EXPECT_TRUE((*f)[0].active);
  EXPECT_DOUBLE_EQ((*f)[0].first_seen_unix_s, 7);
  EXPECT_EQ(malformed, 2);
  EXPECT_FALSE(ParseFindings("{\"findings\":[]}", 0, &malformed).ok());
  EXPECT_FALSE(ParseFindings("<html>", 0, &malformed).ok());
}

TEST(ScorerParseTest, TrackerKeepsFirstSighting) {
  FindingsTracker t;
  ObservedFinding a;
  a.id = "a";
  a.kind = "link_down";
  a.observed_unix_s = 10;
  a.active = true;
  t.Update({a});
  a.observed_unix_s = 20;
  a.active = false;
  t.Update({a});
  auto all = t.All();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_DOUBLE_EQ(all[0].observed_unix_s, 10);
  EXPECT_FALSE(all[0].active);
}

TEST(ScorerParseTest, SumMetric) {
  const char* text =
      "# HELP fabricwatch_probe_results_received_total x\n"
      "fabricwatch_probe_results_received_total{transport=\"udp\"} 10\n"
      "fabricwatch_probe_results_received_total{transport=\"a b}\"} 5.5\n"
      "fabricwatch_probe_results_received_totalx 100\n"
      "fabricwatch_agents_connected 3\n";
  EXPECT_EQ(SumMetric(text, "fabricwatch_probe_results_received_total"), 15.5);
  EXPECT_EQ(SumMetric(text, "fabricwatch_agents_connected"), 3);
  EXPECT_FALSE(SumMetric(text, "fabricwatch_nope").has_value());
}

TEST(ScorerParseTest, ReadsOwnProc) {
  auto p = ReadProc(getpid());
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_GT(p->rss_bytes, 0u);
  EXPECT_GE(p->hwm_bytes, p->rss_bytes);
  EXPECT_FALSE(ReadProc(-5).ok());
}

}  // namespace
}  // namespace fw::sim
