// Host level: a host bad in one role only is named as a noisy host, latency alone more slowly.
#include <gtest/gtest.h>

#include "daemon/aggregator/analysis/testing/blame_fixture.h"

namespace fw::analysis {
namespace {

TEST(BlameHostLevel, HostWhoseOwnProbesAreBadIsNamedNotTheFabric) {
  testing::BlameFixture t(testing::TwoLeafMap());
  HostStats& a = t.ev.hosts[t.Id("a")];
  a.out_bad = 16;  // 80% of the flows it probes look bad, none of those that probe it
  a.noisy_out = true;
  a.noisy_out_by[static_cast<int>(Signal::kLoss)] = true;
  t.MakeBlamer().HostLevel();
  ASSERT_EQ(t.ev.observations.size(), 1u);
  const Observation* o = t.Find("node:a");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->finding.kind, "host_network");
  EXPECT_EQ(o->finding.location.type, "node");
  EXPECT_DOUBLE_EQ(o->finding.evidence.at("bad_fraction_as_prober"), 0.8);
  EXPECT_DOUBLE_EQ(o->finding.evidence.at("noisy_loss"), 1);
  EXPECT_NE(o->finding.summary.find("own probes are noisy"), std::string::npos);
  EXPECT_EQ(o->confirm_ticks, 0);  // loss is quick
}

TEST(BlameHostLevel, LatencyAloneWaitsTheLatencyConfirmation) {
  testing::BlameFixture t(testing::TwoLeafMap());
  HostStats& c = t.ev.hosts[t.Id("c")];
  c.in_bad = 10;
  c.noisy_in = true;
  c.noisy_in_by[static_cast<int>(Signal::kLatency)] = true;
  t.MakeBlamer().HostLevel();
  const Observation* o = t.Find("node:c");
  ASSERT_NE(o, nullptr);
  EXPECT_NE(o->finding.summary.find("answers probes badly"), std::string::npos);
  EXPECT_EQ(o->confirm_ticks, t.config.latency_confirm_ticks);
}

TEST(BlameHostLevel, QuietHostsGiveNothing) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.MakeBlamer().HostLevel();
  EXPECT_TRUE(t.ev.observations.empty());
}

}  // namespace
}  // namespace fw::analysis
