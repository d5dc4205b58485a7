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

// A host whose low bursts were set aside, one by its busy share and two by its CPU pressure: the
// finding quotes both figures with their counts, and its evidence holds both means.
TEST(BlameHostLevel, BurstsSetAsideByBusyAndByPressureAreBothQuoted) {
  testing::BlameFixture t(testing::TwoLeafMap());
  HostStats& a = t.ev.hosts[t.Id("a")];
  a.bursts = 6;
  a.cpu_saturated_bursts = 3;
  a.cpu_busy_sum = 0.95;  // the one set aside by the busy rule
  a.cpu_peak_max = 1.0;
  a.cpu_pressure_bursts = 2;
  a.cpu_pressure_sum = 0.8 + 0.9;
  a.cpu_bw_ratio_sum = 3 * 0.4;
  t.MakeBlamer().HostLevel();
  const Observation* o = t.Find("node:a");
  ASSERT_NE(o, nullptr);
  const Finding& f = o->finding;
  EXPECT_EQ(f.kind, "host_network");
  EXPECT_DOUBLE_EQ(f.evidence.at("cpu_saturated_bursts"), 3);
  EXPECT_DOUBLE_EQ(f.evidence.at("cpu_busy"), 0.95);
  EXPECT_DOUBLE_EQ(f.evidence.at("cpu_pressure_bursts"), 2);
  EXPECT_DOUBLE_EQ(f.evidence.at("cpu_pressure"), 0.85);
  EXPECT_NE(f.summary.find("a's CPUs were 95% busy on average (its busiest CPU 100%) during 1, "
                           "and its CPU pressure was 85% on average"),
            std::string::npos)
      << f.summary;
  EXPECT_NE(f.summary.find("during 2, of its 6 bandwidth bursts"), std::string::npos) << f.summary;
  EXPECT_NE(f.summary.find("reached 0.40 of the expected goodput"), std::string::npos) << f.summary;
}

TEST(BlameHostLevel, QuietHostsGiveNothing) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.MakeBlamer().HostLevel();
  EXPECT_TRUE(t.ev.observations.empty());
}

}  // namespace
}  // namespace fw::analysis
