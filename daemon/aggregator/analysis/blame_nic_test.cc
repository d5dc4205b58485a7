// NIC level: a blamed access link is its NIC; every NIC of a node bad is the host.
#include <gtest/gtest.h>

#include "daemon/aggregator/analysis/testing/blame_fixture.h"

namespace fw::analysis {
namespace {

TEST(BlameNicLevel, LossyAccessLinkIsItsNic) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.ev.blames[static_cast<int>(Signal::kLoss)].push_back(
      testing::LossBlame(t.LinkOf("a/e0"), 0.03, 0.03));
  t.MakeBlamer().LinkLevel();
  const Observation* o = t.Find("nic:a/e0");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->finding.kind, "nic_degraded");
  EXPECT_EQ(o->finding.location.type, "nic");
  EXPECT_EQ(o->finding.location.node, "a");
  EXPECT_EQ(o->finding.location.device, "e0");
  EXPECT_EQ(o->finding.severity, Severity::kWarning);  // 3% < 5%
  EXPECT_TRUE(o->can_flap);
}

TEST(BlameNicLevel, NicLosingEverythingRecentlyIsDown) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.ev.blames[static_cast<int>(Signal::kLoss)].push_back(
      testing::LossBlame(t.LinkOf("c/e0"), 0.03, 1.0));
  t.MakeBlamer().LinkLevel();
  const Observation* o = t.Find("nic:c/e0");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->finding.kind, "nic_down");
}

TEST(BlameNicLevel, EveryNicOfANodeBadIsTheHost) {
  testing::BlameFixture t(testing::TwoLeafMap());
  auto& loss = t.ev.blames[static_cast<int>(Signal::kLoss)];
  loss.push_back(testing::LossBlame(t.LinkOf("d/e0"), 0.03, 0.03));
  loss.push_back(testing::LossBlame(t.LinkOf("d/e1"), 0.03, 0.03));
  t.MakeBlamer().LinkLevel();
  const Observation* o = t.Find("node:d");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->finding.kind, "host_network");
  EXPECT_DOUBLE_EQ(o->finding.evidence.at("bad_nics"), 2);
  EXPECT_EQ(t.Find("nic:d/e0"), nullptr);
}

}  // namespace
}  // namespace fw::analysis
