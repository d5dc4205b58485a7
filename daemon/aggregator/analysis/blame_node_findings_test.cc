// Node-finding level: an agent's own check findings become observations keyed by node and kind.
#include <gtest/gtest.h>

#include "daemon/aggregator/analysis/testing/blame_fixture.h"

namespace fw::analysis {
namespace {

TEST(BlameNodeFindingLevel, CheckFindingsArePassedOnPerNodeAndKind) {
  testing::BlameFixture t(testing::TwoLeafMap());
  Finding f;
  f.kind = "pcie_degraded";
  f.severity = Severity::kWarning;
  f.location = FindingLocation{"pcie", "0000:17:00.0", "b", "", 0};
  t.ev.node_findings["b"] = {f};
  t.MakeBlamer().NodeFindingLevel();
  ASSERT_EQ(t.ev.observations.size(), 1u);
  const Observation* o = t.Find("check:b/pcie_degraded/0000:17:00.0");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->finding.kind, "pcie_degraded");
  EXPECT_EQ(o->finding.location.node, "b");
  EXPECT_FALSE(o->can_flap);
}

}  // namespace
}  // namespace fw::analysis
