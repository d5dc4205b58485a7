// Pair level: without a map a lossy pair is named as a pair, an unreachable one as unreachable,
// and a host bad toward most of its peers as the host.
#include <gtest/gtest.h>

#include "daemon/aggregator/analysis/testing/blame_fixture.h"

namespace fw::analysis {
namespace {

PairAgg LossyPair(NodeId a, NodeId b, uint32_t lost) {
  PairAgg p;
  p.a = std::min(a, b);
  p.b = std::max(a, b);
  p.flows = p.bad_flows = p.loss_flows = 4;
  p.probes = 1000;
  p.lost = lost;
  p.recent_probes = 20;
  return p;
}

TEST(BlamePairLevel, LossyPairWithoutAMapIsThatPair) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.ev.pairs[1] = LossyPair(t.Id("a"), t.Id("c"), 80);
  t.MakeBlamer(/*with_map=*/false).PairLevel();
  ASSERT_EQ(t.ev.observations.size(), 1u);
  const Observation* o = t.Find("pair:a~c");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->finding.kind, "link_degraded");
  EXPECT_EQ(o->finding.severity, Severity::kCritical);  // 8% >= 5%
  EXPECT_DOUBLE_EQ(o->finding.evidence.at("loss_ratio"), 0.08);
  EXPECT_NE(o->finding.summary.find("without a fabric map"), std::string::npos);
}

// The demo's false finding: one burst at 0.23 of the expected goodput on a briefly busy host,
// whose UDP flows had a few slow samples. One low burst is not evidence, and slow samples do not
// confirm a bandwidth or loss verdict.
PairAgg BusyHostPairWithOneLowBurst(NodeId a, NodeId b) {
  PairAgg p;
  p.a = std::min(a, b);
  p.b = std::max(a, b);
  p.flows = 5;
  p.bad_flows = 4;  // three flows with a slow sample, one low burst
  p.slow_flows = 3;
  p.probes = 40;
  p.rtt = 38;
  p.slow = 3;
  p.ratio_sum = 38 * 1.2;
  p.bw = 1;
  p.bw_bad = 1;
  p.bw_ratio_sum = 0.23;
  return p;
}

TEST(BlamePairLevel, OneLowBurstIsNotAFinding) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.ev.pairs[1] = BusyHostPairWithOneLowBurst(t.Id("a"), t.Id("c"));
  t.MakeBlamer(/*with_map=*/false).PairLevel();
  EXPECT_TRUE(t.ev.observations.empty());
}

TEST(BlamePairLevel, TwoLowBurstsFireAndTheSummarySaysBandwidth) {
  testing::BlameFixture t(testing::TwoLeafMap());
  PairAgg p = BusyHostPairWithOneLowBurst(t.Id("a"), t.Id("c"));
  p.bw = 2;  // the other direction's burst was low too
  p.bw_bad = 2;
  p.bw_ratio_sum = 0.23 + 0.25;
  t.ev.pairs[1] = p;
  t.MakeBlamer(false).PairLevel();
  const Observation* o = t.Find("pair:a~c");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->finding.kind, "link_degraded");
  EXPECT_EQ(o->finding.severity, Severity::kWarning);
  EXPECT_NE(o->finding.summary.find("delivers 24% of the expected bandwidth on average (2 of 2 "
                                    "bursts low)"),
            std::string::npos)
      << o->finding.summary;
  EXPECT_EQ(o->finding.summary.find("loses"), std::string::npos) << o->finding.summary;
  EXPECT_DOUBLE_EQ(o->finding.evidence.at("bandwidth_low_bursts"), 2);
}

TEST(BlamePairLevel, HalfTheBurstsLowIsNotConfirmed) {
  testing::BlameFixture t(testing::TwoLeafMap());
  PairAgg p = BusyHostPairWithOneLowBurst(t.Id("a"), t.Id("c"));
  p.bw = 4;
  p.bw_bad = 2;
  p.bw_ratio_sum = 0.23 + 0.25 + 0.95 + 0.97;
  t.ev.pairs[1] = p;
  t.MakeBlamer(false).PairLevel();
  EXPECT_TRUE(t.ev.observations.empty());
}

TEST(BlamePairLevel, SlowFlowsDoNotConfirmLoss) {
  testing::BlameFixture t(testing::TwoLeafMap());
  PairAgg p = LossyPair(t.Id("a"), t.Id("c"), 80);
  p.loss_flows = 1;  // one flow lost 80 probes; the others were only slow
  p.slow_flows = 3;
  t.ev.pairs[1] = p;
  t.MakeBlamer(false).PairLevel();
  EXPECT_TRUE(t.ev.observations.empty());
}

TEST(BlamePairLevel, LossSummaryGivesTheLossFigure) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.ev.pairs[1] = LossyPair(t.Id("a"), t.Id("c"), 80);
  t.MakeBlamer(false).PairLevel();
  const Observation* o = t.Find("pair:a~c");
  ASSERT_NE(o, nullptr);
  EXPECT_NE(o->finding.summary.find("loses 8.0% of probes (80 of 1000, across 4 flows)"),
            std::string::npos)
      << o->finding.summary;
  EXPECT_EQ(o->finding.summary.find("bandwidth"), std::string::npos);
}

TEST(BlamePairLevel, LatencySummaryGivesTheInflation) {
  testing::BlameFixture t(testing::TwoLeafMap());
  PairAgg p;
  p.a = t.Id("a");
  p.b = t.Id("c");
  p.flows = p.bad_flows = p.slow_flows = 4;
  p.probes = p.rtt = 400;
  p.slow = 300;
  p.ratio_sum = 400 * 3.5;
  t.ev.pairs[1] = p;
  t.MakeBlamer(false).PairLevel();
  const Observation* o = t.Find("pair:a~c");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->finding.kind, "congestion");
  EXPECT_NE(o->finding.summary.find("75% of samples slow, 3.5x the baseline"), std::string::npos)
      << o->finding.summary;
  EXPECT_EQ(o->finding.summary.find("loses"), std::string::npos);
}

TEST(BlamePairLevel, PairLosingEverythingRecentlyIsUnreachable) {
  testing::BlameFixture t(testing::TwoLeafMap());
  PairAgg p = LossyPair(t.Id("b"), t.Id("d"), 300);
  p.recent_lost = p.recent_probes;
  t.ev.pairs[7] = p;
  t.MakeBlamer(false).PairLevel();
  const Observation* o = t.Find("pair:b~d");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->finding.kind, "probe_unreachable");
  EXPECT_EQ(o->finding.severity, Severity::kCritical);
}

TEST(BlamePairLevel, HostBadTowardItsPeersIsTheHost) {
  testing::BlameFixture t(testing::TwoLeafMap());
  const NodeId a = t.Id("a");
  uint64_t k = 0;
  for (const char* peer : {"b", "c", "d"}) t.ev.pairs[++k] = LossyPair(a, t.Id(peer), 80);
  t.MakeBlamer(false).PairLevel();
  const Observation* o = t.Find("node:a");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->finding.kind, "host_network");
  EXPECT_DOUBLE_EQ(o->finding.evidence.at("bad_peers"), 3);
  EXPECT_EQ(t.Find("pair:a~b"), nullptr);  // subsumed by the host
  EXPECT_EQ(t.ev.superseded.size(), 3u);
}

TEST(BlamePairLevel, NoisyHostsPairsAreNotJudged) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.ev.hosts[t.Id("a")].noisy_out = true;
  t.ev.hosts[t.Id("a")].noisy_out_by[static_cast<int>(Signal::kLoss)] = true;
  t.ev.pairs[1] = LossyPair(t.Id("a"), t.Id("c"), 80);
  blame::Blamer blamer = t.MakeBlamer(false);
  blamer.HostLevel();
  blamer.PairLevel();
  EXPECT_NE(t.Find("node:a"), nullptr);
  EXPECT_EQ(t.Find("pair:a~c"), nullptr);
}

}  // namespace
}  // namespace fw::analysis
