// JSON views and metrics of the analyzer, on a synthetic fleet with one bad link.
#include "daemon/aggregator/api/analysis_json.h"

#include <gtest/gtest.h>

#include "daemon/aggregator/api/analysis_metrics.h"
#include "daemon/aggregator/analysis/testing/synthetic_fleet.h"

namespace fw::analysis {
namespace {

TEST(FindingsQuery, ParsesActive) {
  EXPECT_TRUE(ParseFindingsQuery("active=true")->active_only);
  EXPECT_TRUE(ParseFindingsQuery("x=1&active=1")->active_only);
  EXPECT_FALSE(ParseFindingsQuery("active=false")->active_only);
  EXPECT_FALSE(ParseFindingsQuery("")->active_only);
  const auto bad = ParseFindingsQuery("active=maybe");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'active'"), std::string::npos);
}

class WithBadLink : public ::testing::Test {
 protected:
  void SetUp() override {
    fleet_.Run(60);
    fleet_.SetLinkFault("leaf1~spine2", testing::LinkFault{0.1});
    fleet_.Run(15);
  }
  testing::SyntheticFleet fleet_{testing::FleetShape{}};
};

TEST_F(WithBadLink, FindingsJsonFollowsTheSchema) {
  const nlohmann::json j = RenderFindings(fleet_.analyzer(), FindingsQuery{true});
  ASSERT_EQ(j.size(), 1u) << j.dump(2);
  const nlohmann::json& f = j[0];
  EXPECT_EQ(f["kind"], "link_degraded");
  EXPECT_EQ(f["severity"], "critical");
  EXPECT_EQ(f["active"], true);
  EXPECT_EQ(f["location"]["type"], "link");
  EXPECT_EQ(f["location"]["id"], "leaf1~spine2");
  EXPECT_TRUE(f["id"].get<std::string>().starts_with("link:leaf1~spine2@"));
  EXPECT_GT(f["confidence"].get<double>(), 0.5);
  EXPECT_NEAR(f["evidence"]["loss_ratio"].get<double>(), 0.1, 0.05);
  EXPECT_NE(f["summary"].get<std::string>().find("leaf1~spine2"), std::string::npos);
  EXPECT_EQ(f["first_seen"].get<std::string>().size(), 20u);  // 2023-11-14T22:13:20Z
  EXPECT_EQ(f["last_seen"].get<std::string>().back(), 'Z');
}

TEST_F(WithBadLink, LinksJsonShowsStatesAndRatios) {
  const nlohmann::json j = RenderLinks(fleet_.analyzer().Links());
  ASSERT_EQ(j.size(), fleet_.map()->links().size());
  int degraded = 0;
  for (const auto& row : j) {
    for (const char* key : {"id", "a", "b", "a_tier", "b_tier", "state", "loss_ratio",
                            "latency_inflation", "bandwidth_ratio", "probes", "confidence"}) {
      EXPECT_TRUE(row.contains(key)) << key;
    }
    if (row["id"] == "leaf1~spine2") {
      EXPECT_EQ(row["state"], "degraded");
      EXPECT_EQ(row["a"], "leaf1");
      EXPECT_EQ(row["b"], "spine2");
      EXPECT_EQ(row["a_tier"], "leaf");
      EXPECT_EQ(row["b_tier"], "spine");
      EXPECT_NEAR(row["loss_ratio"].get<double>(), 0.1, 0.05);
      EXPECT_GT(row["probes"].get<double>(), 0);
    }
    if (row["id"].get<std::string>().find(':') != std::string::npos) {
      EXPECT_EQ(row["a_tier"], "host") << row["id"];  // a host NIC's access link
      EXPECT_EQ(row["b_tier"], "leaf") << row["id"];
    }
    degraded += row["state"] == "degraded";
    if (row["state"] == "ok") {
      EXPECT_NEAR(row["latency_inflation"].get<double>(), 1.0, 0.2);
    }
  }
  EXPECT_EQ(degraded, 1);
}

TEST_F(WithBadLink, MetricsExportLinkStateAndFindings) {
  metrics::Registry registry;
  AnalysisMetrics m(registry);
  m.Update(fleet_.analyzer());
  const std::string text = registry.RenderToString();
  EXPECT_NE(text.find("fabricwatch_link_state{link=\"leaf1~spine2\",state=\"degraded\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("fabricwatch_link_state{link=\"leaf1~spine2\",state=\"ok\"} 0"),
            std::string::npos);
  EXPECT_NE(text.find("fabricwatch_link_state{link=\"leaf0~spine0\",state=\"ok\"} 1"),
            std::string::npos);
  EXPECT_NE(
      text.find("fabricwatch_findings_active{kind=\"link_degraded\",severity=\"critical\"} 1"),
      std::string::npos);
  EXPECT_NE(text.find("fabricwatch_finding_active{kind=\"link_degraded\",severity=\"critical\","
                      "location=\"leaf1~spine2\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("fabricwatch_link_loss_ratio{link=\"leaf1~spine2\"}"), std::string::npos);

  // Resolved: the per-finding series disappears and the count drops to 0.
  fleet_.ClearFaults();
  fleet_.Run(60);
  m.Update(fleet_.analyzer());
  const std::string after = registry.RenderToString();
  EXPECT_EQ(after.find("fabricwatch_finding_active{"), std::string::npos);
  EXPECT_NE(
      after.find("fabricwatch_findings_active{kind=\"link_degraded\",severity=\"critical\"} 0"),
      std::string::npos);
  EXPECT_NE(after.find("fabricwatch_link_state{link=\"leaf1~spine2\",state=\"ok\"} 1"),
            std::string::npos);
}

TEST(NodeFindings, PassThroughWhileReported) {
  testing::SyntheticFleet fleet{testing::FleetShape{}};
  Finding f;
  f.kind = "pcie_downtrained";
  f.severity = Severity::kWarning;
  f.location = FindingLocation{"nic", "l0h1/0000:44:00.0", "l0h1", "0000:44:00.0", 0};
  f.summary = "PCIe link of mlx5_0 trained at x8 instead of x16.";
  fleet.analyzer().SetNodeFindings("l0h1", {f});
  fleet.Run(5);
  auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].finding.kind, "pcie_downtrained");
  fleet.analyzer().SetNodeFindings("l0h1", {});
  fleet.Run(35);
  EXPECT_TRUE(fleet.Active().empty());
}

}  // namespace
}  // namespace fw::analysis
