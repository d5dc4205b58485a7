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
  p.flows = p.bad_flows = 4;
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
