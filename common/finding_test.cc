// Finding verdicts, ordering and JSON form.
#include "common/finding.h"

#include <gtest/gtest.h>

#include "common/finding_json.h"

namespace fw {
namespace {

TEST(Finding, ExitCodeFollowsNagios) {
  std::vector<Finding> f;
  EXPECT_EQ(ExitCodeForFindings(f), 0);
  f.push_back({"port_errors", Severity::kWarning, {}, "", {}, 1});
  EXPECT_EQ(ExitCodeForFindings(f), 1);
  f.push_back({"nic_down", Severity::kCritical, {}, "", {}, 1});
  EXPECT_EQ(ExitCodeForFindings(f), 2);
  SortFindings(f);
  EXPECT_EQ(f[0].kind, "nic_down");
}

TEST(Finding, JsonFollowsDesignSchema) {
  Finding f{"port_errors",
            Severity::kWarning,
            {"nic", "n1/mlx5_1/1", "n1", "mlx5_1", 1},
            "mlx5_1 port 1: link_downed saturated at 255",
            {{"link_downed", 255}},
            0.9};
  const auto j = FindingToJson(f);
  EXPECT_EQ(j["kind"], "port_errors");
  EXPECT_EQ(j["severity"], "warning");
  EXPECT_EQ(j["location"]["type"], "nic");
  EXPECT_EQ(j["location"]["port"], 1);
  EXPECT_EQ(j["location"]["device"], "mlx5_1");
  EXPECT_EQ(j["evidence"]["link_downed"], 255.0);
  EXPECT_DOUBLE_EQ(j["confidence"].get<double>(), 0.9);
  Finding node_level{
      "topology_mismatch", Severity::kCritical, {"node", "n1", "n1", "", 0}, "x", {}, 1};
  const auto j2 = FindingToJson(node_level);
  EXPECT_FALSE(j2["location"].contains("port"));
  EXPECT_TRUE(j2["evidence"].is_object());
}

}  // namespace
}  // namespace fw
