// Link level: a blamed fabric link is that link, down or degraded by its recent loss.
#include <gtest/gtest.h>

#include "daemon/aggregator/analysis/testing/blame_fixture.h"

namespace fw::analysis {
namespace {

TEST(BlameLinkLevel, LossyFabricLinkIsThatLink) {
  testing::BlameFixture t(testing::TwoLeafMap());
  const LinkIndex l = t.LinkOf("l1", "s1");
  t.ev.blames[static_cast<int>(Signal::kLoss)].push_back(testing::LossBlame(l, 0.05, 0.05));
  t.MakeBlamer().LinkLevel();
  ASSERT_EQ(t.ev.observations.size(), 1u);
  const auto& [key, o] = t.ev.observations.front();
  EXPECT_EQ(key.rfind("link:", 0), 0u) << key;
  EXPECT_EQ(o.finding.kind, "link_degraded");
  EXPECT_EQ(o.finding.location.type, "link");
  EXPECT_TRUE(o.can_flap);
  EXPECT_DOUBLE_EQ(o.finding.evidence.at("loss_ratio"), 0.05);
  ASSERT_TRUE(t.ev.link_elements.contains(l));
  EXPECT_EQ(t.ev.link_elements.at(l).first, key);
}

TEST(BlameLinkLevel, LinkLosingEverythingRecentlyIsDown) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.ev.blames[static_cast<int>(Signal::kLoss)].push_back(
      testing::LossBlame(t.LinkOf("l2", "s1"), 0.6, 1.0));
  t.MakeBlamer().LinkLevel();
  ASSERT_EQ(t.ev.observations.size(), 1u);
  EXPECT_EQ(t.ev.observations.front().second.finding.kind, "link_down");
  EXPECT_EQ(t.ev.observations.front().second.finding.severity, Severity::kCritical);
}

TEST(BlameLinkLevel, NothingBlamedGivesNothing) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.MakeBlamer().LinkLevel();
  EXPECT_TRUE(t.ev.observations.empty());
}

}  // namespace
}  // namespace fw::analysis
