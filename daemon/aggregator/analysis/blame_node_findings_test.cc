// Node-finding level: an agent's own check findings become observations keyed by node and kind,
// and other stages' findings keyed by source, kind and location.
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

TEST(BlameNodeFindingLevel, SourceFindingsArePassedOnPerSourceKindAndLocation) {
  testing::BlameFixture t(testing::TwoLeafMap());
  Finding f;
  f.kind = "collective_slow";
  f.location = FindingLocation{"node", "b", "b", "", 0};
  Finding link = f;
  link.location = FindingLocation{"link", "leaf1-spine", "", "", 0};
  t.ev.source_findings["collective"] = {f, link};
  t.MakeBlamer().NodeFindingLevel();
  ASSERT_EQ(t.ev.observations.size(), 2u);
  const Observation* o = t.Find("collective:collective_slow/b");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->finding.location.node, "b");
  EXPECT_FALSE(o->can_flap);
  EXPECT_NE(t.Find("collective:collective_slow/leaf1-spine"), nullptr);
}

}  // namespace
}  // namespace fw::analysis
