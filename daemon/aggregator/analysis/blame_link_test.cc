// Link level: a blamed fabric link is that link, down or degraded by its recent loss.
#include <gtest/gtest.h>

#include <algorithm>

#include "daemon/aggregator/analysis/element_tracker.h"
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

// The first second of an outage: the two-second figure still holds the second before it (55 %),
// but the last complete second alone lost everything of enough probes, which is down. Too few
// probes in that second, or a second that lost less than the down ratio, is still degraded.
TEST(BlameLinkLevel, LastSecondLosingEverythingIsDown) {
  auto kind = [](double last_loss, double last_probes) {
    testing::BlameFixture t(testing::TwoLeafMap());
    LinkBlame b = testing::LossBlame(t.LinkOf("l2", "s1"), 0.3, 0.55);
    b.last_loss = last_loss;
    b.last_probes = last_probes;
    t.ev.blames[static_cast<int>(Signal::kLoss)].push_back(b);
    t.MakeBlamer().LinkLevel();
    EXPECT_EQ(t.ev.observations.size(), 1u);
    return t.ev.observations.empty() ? std::string()
                                     : t.ev.observations.front().second.finding.kind;
  };
  EXPECT_EQ(kind(1.0, 80), "link_down");  // an escalated link's first dark second
  EXPECT_EQ(kind(0.95, 20), "link_down");
  EXPECT_EQ(kind(1.0, 10), "link_degraded");  // too few probes to call it down
  EXPECT_EQ(kind(0.6, 80), "link_degraded");  // lossy, not down
}

// The first seconds of an outage read by flows: the seconds still mix answers from before it with
// losses after it (30 % in the last two, 50 % in the last one), but 19 of the 20 flows across the
// link lost every probe since their last answer, 60 probes in all: down. Fewer flows than 90 %, a
// few flows only, or short runs (a lossy link's flows each lose their newest probe now and then)
// stay degraded.
TEST(BlameLinkLevel, FlowsLosingEveryProbeSinceTheirLastAnswerAreDown) {
  auto kind = [](uint32_t sure, uint32_t dead, uint32_t run) {
    testing::BlameFixture t(testing::TwoLeafMap());
    LinkBlame b = testing::LossBlame(t.LinkOf("l2", "s1"), 0.2, 0.3);
    b.last_loss = 0.5;
    b.last_probes = 40;
    b.sure_flows = sure;
    b.dead_flows = dead;
    b.dead_run = run;
    t.ev.blames[static_cast<int>(Signal::kLoss)].push_back(b);
    t.MakeBlamer().LinkLevel();
    EXPECT_EQ(t.ev.observations.size(), 1u);
    if (t.ev.observations.empty()) return std::string();
    const Finding& f = t.ev.observations.front().second.finding;
    EXPECT_EQ(f.evidence.at("flows_losing_every_probe"), dead);
    EXPECT_EQ(f.evidence.at("flows_with_fresh_probes"), sure);
    if (f.kind == "link_down") {
      EXPECT_NE(f.summary.find(std::to_string(dead) + " of the " + std::to_string(sure) +
                               " flows across it with fresh probes lose every probe now"),
                std::string::npos)
          << f.summary;
    }
    return f.kind;
  };
  EXPECT_EQ(kind(20, 19, 60), "link_down");
  EXPECT_EQ(kind(4, 4, 30), "link_down");
  EXPECT_EQ(kind(20, 17, 60), "link_degraded");  // three flows still answered last
  EXPECT_EQ(kind(3, 3, 60), "link_degraded");    // too few flows to tell
  EXPECT_EQ(kind(20, 20, 25), "link_degraded");  // runs too short: not enough probes yet
}

// The freshest probes alone (the last two complete seconds and the tick's own second so far) show
// the loss at a finding's significance: the freshest (escalated) data confirms the suspicion, and
// the link may fire after two evaluations. A loss that is all in the older part of the 10 s
// window, or fresh probes too few to tell, do not.
TEST(BlameLinkLevel, LossOnTheFreshestSecondsAloneConfirmsDensely) {
  auto fresh = [](double fresh_loss, double fresh_probes) {
    testing::BlameFixture t(testing::TwoLeafMap());
    LinkBlame b = testing::LossBlame(t.LinkOf("l1", "s1"), 0.05, fresh_loss);
    b.recent_probes = b.fresh_probes = fresh_probes;
    t.ev.blames[static_cast<int>(Signal::kLoss)].push_back(b);
    t.MakeBlamer().LinkLevel();
    EXPECT_EQ(t.ev.observations.size(), 1u);
    if (t.ev.observations.empty()) return false;
    const Observation& o = t.ev.observations.front().second;
    EXPECT_EQ(o.finding.evidence.at("fresh_loss_confirmed"), o.dense_confirmed ? 1 : 0);
    return o.dense_confirmed;
  };
  EXPECT_TRUE(fresh(0.1, 100));    // 10 of 100 fresh probes lost
  EXPECT_FALSE(fresh(0.0, 100));   // a past burst: the fresh seconds are clean
  EXPECT_FALSE(fresh(0.01, 100));  // 1 lost: not significant on its own
  EXPECT_FALSE(fresh(0.2, 20));    // too few fresh probes to tell
}

// A lossy link waits longer than the usual confirmation, and not the dense one, while a link beside
// it under the same switch loses probes too (blamed, or only weakly lossy): a lossy spine's first
// escalated links must not be named alone before the roll-up can name the spine. A link held down
// is not held: it fires as it would.
TEST(BlameLinkLevel, ALossyLinkWaitsWhileALinkBesideItLosesProbes) {
  struct Result {
    bool dense = false;
    double held = 0;
    int confirm = 0;
  };
  auto run = [](bool sibling_weak, double recent_loss) {
    testing::BlameFixture t(testing::TwoLeafMap());
    LinkBlame b = testing::LossBlame(t.LinkOf("l1", "s1"), 0.05, recent_loss);
    b.recent_probes = b.fresh_probes = 100;
    t.ev.blames[static_cast<int>(Signal::kLoss)].push_back(b);
    t.ev.weak_loss.push_back(b);  // the link itself is weakly lossy too: it does not count
    if (sibling_weak)
      t.ev.weak_loss.push_back(testing::LossBlame(t.LinkOf("l2", "s1"), 0.02, 0.02));
    t.MakeBlamer().LinkLevel();
    const Observation* o = t.Find("link:l1~s1");
    EXPECT_NE(o, nullptr);
    if (!o) return Result{};
    auto it = o->finding.evidence.find("held_for_switch");
    return Result{o->dense_confirmed, it == o->finding.evidence.end() ? 0.0 : it->second,
                  o->confirm_ticks};
  };
  const AnalysisConfig c;
  EXPECT_TRUE(run(false, 0.1).dense);
  EXPECT_EQ(run(false, 0.1).confirm, 0);  // the usual
  EXPECT_EQ(run(false, 0.1).held, 0);
  EXPECT_FALSE(run(true, 0.1).dense);
  EXPECT_EQ(run(true, 0.1).held, 1);
  EXPECT_EQ(run(true, 0.1).confirm, c.confirm_ticks + c.switch_wait_ticks);
  EXPECT_TRUE(run(true, 1.0).dense);  // down: not held
  EXPECT_EQ(run(true, 1.0).confirm, 0);
}

TEST(BlameLinkLevel, NothingBlamedGivesNothing) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.MakeBlamer().LinkLevel();
  EXPECT_TRUE(t.ev.observations.empty());
}

// A bad flow in the fixture's tomography; returns its index for a blame's `explained`.
uint32_t AddBadFlow(testing::BlameFixture& t, PathSource source, bool slow) {
  FlowObs o;
  o.probes = o.rtt = 10;
  o.slow = slow ? 5 : 0;
  o.ratio_sum = 30;
  o.bw_ratio = slow ? -1.0f : 0.6f;
  o.bw_bad = !slow;
  o.path_source = source;
  t.tomography().Add(o);
  return static_cast<uint32_t>(t.tomography().bad_flows().size() - 1);
}

LinkBlame BandwidthGroupBlame(LinkIndex l, LinkIndex tied, uint32_t flow) {
  LinkBlame b;
  b.link = l;
  b.tied = {tied};
  b.signal = Signal::kBandwidth;
  b.estimate = 1;
  b.expected = 4;
  b.bad = 4;
  b.bad_flows = 4;
  b.bandwidth_ratio = 0.6;
  b.explained = {flow};
  return b;
}

// A flow from `src` to `dst` on the first of its map paths, as if traced; no observations yet.
FlowObs TracedFlow(testing::BlameFixture& t, const FabricMap& map, const char* src,
                   const char* dst) {
  const aggregator::PathSet paths = map.PathsBetweenNodes(src, dst);
  FlowObs o;
  o.src = t.Id(src);
  o.dst = t.Id(dst);
  o.src_access = paths.src_access;
  o.dst_access = paths.dst_access;
  o.core = paths.core.get();
  o.path = o.core && !o.core->paths.empty() ? 0 : -1;
  o.path_source = PathSource::kTraced;
  return o;
}

// Adds a traced flow from `src` to `dst` with `lost` of `probes` lost to the fixture's tomography.
void AddLossFlow(testing::BlameFixture& t, const FabricMap& map, const char* src, const char* dst,
                 uint32_t probes, uint32_t lost) {
  FlowObs o = TracedFlow(t, map, src, dst);
  o.probes = probes;
  o.lost = lost;
  t.tomography().Add(o);
}

// Traced loss flows over `map` (one call each, as AddLossFlow) and the loss blame of their
// tomography at the default SignalSpec (0.5 %, 3 flows, 20 probes, significance 9 over 1e-4).
struct LossFlows {
  explicit LossFlows(std::shared_ptr<const FabricMap> m) : map(std::move(m)), t(map) {}
  void operator()(const char* src, const char* dst, uint32_t probes, uint32_t lost) {
    AddLossFlow(t, *map, src, dst, probes, lost);
  }
  std::vector<LinkBlame> Localize() { return t.tomography().Localize(Signal::kLoss, SignalSpec{}); }
  std::shared_ptr<const FabricMap> map;
  testing::BlameFixture t;
};

LinkBlame LatencyBlame(LinkIndex l, uint32_t flow, double inflation) {
  LinkBlame b;
  b.link = l;
  b.signal = Signal::kLatency;
  b.estimate = 0.6;
  b.expected = 100;
  b.bad = 60;
  b.bad_flows = 6;
  b.inflation = inflation;
  b.explained = {flow};
  return b;
}

// Congested spine under ECMP: untraced TCP bursts are low on one uplink of every leaf, which
// tomography can only call "one of the leaf's uplinks"; traced UDP flows name the congested link.
// The group is that finding's, not one of its own.
TEST(BlameLinkLevel, BandwidthGroupIsExplainedByTracedLatencyOnAMember) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.ev.traced_flows = 8;
  const uint32_t burst = AddBadFlow(t, PathSource::kCandidates, false);
  const uint32_t traced = AddBadFlow(t, PathSource::kTraced, true);
  const LinkIndex l1 = t.LinkOf("l1", "s1"), l2 = t.LinkOf("l2", "s1");
  t.ev.blames[static_cast<int>(Signal::kBandwidth)].push_back(BandwidthGroupBlame(l1, l2, burst));
  t.ev.blames[static_cast<int>(Signal::kLatency)].push_back(LatencyBlame(l2, traced, 4));
  t.MakeBlamer().LinkLevel();
  for (const auto& [key, o] : t.ev.observations) {
    EXPECT_NE(key.rfind("links:", 0), 0u) << "the bandwidth group fired: " << o.finding.summary;
  }
  EXPECT_NE(std::find(t.ev.superseded.begin(), t.ev.superseded.end(), "links:l1~s1,l2~s1"),
            t.ev.superseded.end());
  EXPECT_NE(t.Find("link:l2~s1"), nullptr);
}

// Without traced evidence on any member the group waits as long as latency alone does: low
// bursts on candidate paths are not confirmed by where they went.
TEST(BlameLinkLevel, BandwidthGroupOverCandidatesWaitsOnATracedFabric) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.ev.traced_flows = 8;
  const uint32_t burst = AddBadFlow(t, PathSource::kCandidates, false);
  t.ev.blames[static_cast<int>(Signal::kBandwidth)].push_back(
      BandwidthGroupBlame(t.LinkOf("l1", "s1"), t.LinkOf("l2", "s1"), burst));
  t.MakeBlamer().LinkLevel();
  ASSERT_EQ(t.ev.observations.size(), 1u);
  const Observation& o = t.ev.observations.front().second;
  EXPECT_EQ(o.confirm_ticks, t.config.latency_confirm_ticks);
  EXPECT_NE(o.finding.summary.find("delivers 60% of the expected bandwidth"), std::string::npos)
      << o.finding.summary;
  EXPECT_EQ(o.finding.summary.find("drops"), std::string::npos) << o.finding.summary;
}

// No traced flow anywhere: nothing else can localize, and the group keeps the usual confirmation.
TEST(BlameLinkLevel, BandwidthGroupWithoutTracingKeepsTheUsualConfirmation) {
  testing::BlameFixture t(testing::TwoLeafMap());
  const uint32_t burst = AddBadFlow(t, PathSource::kCandidates, false);
  t.ev.blames[static_cast<int>(Signal::kBandwidth)].push_back(
      BandwidthGroupBlame(t.LinkOf("l1", "s1"), t.LinkOf("l2", "s1"), burst));
  t.MakeBlamer().LinkLevel();
  ASSERT_EQ(t.ev.observations.size(), 1u);
  EXPECT_EQ(t.ev.observations.front().second.confirm_ticks, 0);
}

// Queueing on three links of one switch at once is the switch (background episodes are
// independent per link): it confirms in correlated_latency_confirm_ticks, and the summary quotes
// the worst link's figures.
TEST(BlameLinkLevel, CorrelatedQueueingOnASwitchConfirmsQuicklyAndSaysHowMuch) {
  testing::BlameFixture t(testing::ThreeLeafMap());
  std::vector<LinkBlame>& lat = t.ev.blames[static_cast<int>(Signal::kLatency)];
  for (const char* leaf : {"l1", "l2", "l3"}) {
    lat.push_back(LatencyBlame(t.LinkOf(leaf, "s1"), AddBadFlow(t, PathSource::kTraced, true), 4));
  }
  lat.back().bad_flows = 9;
  lat.back().inflation = 5.5;
  t.MakeBlamer().LinkLevel();
  const Observation* o = t.Find("switch:s1");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->finding.kind, "congestion");
  EXPECT_EQ(o->confirm_ticks, t.config.correlated_latency_confirm_ticks);
  EXPECT_NE(o->finding.summary.find("Worst: l3~s1, which inflates RTT"), std::string::npos)
      << o->finding.summary;
  EXPECT_NE(o->finding.summary.find("5.5x the baseline"), std::string::npos) << o->finding.summary;
  EXPECT_DOUBLE_EQ(o->finding.evidence.at("latency_inflation"), 5.5);
}

// Two of a switch's three links lossy is under its share (0.75) and names the links; once the
// switch is suspect (it was rolled up in an earlier evaluation), half that share keeps the
// roll-up: escalation makes a lossy spine's first links dense, and explain-away then leaves its
// other links blamed in one evaluation and not the next.
TEST(BlameLinkLevel, ASuspectSwitchKeepsItsRollUpAtHalfTheShare) {
  auto elements = [](bool switch_suspect) {
    testing::BlameFixture t(testing::ThreeLeafMap());
    t.AddFlow("a", "b", 100, 10);  // l1~s1, l2~s1
    t.AddFlow("a", "c", 100, 0);   // l1~s1, l3~s1
    t.AddFlow("b", "c", 100, 0);   // l2~s1, l3~s1: l3~s1 is clean, not like the blamed
    std::vector<LinkBlame>& loss = t.ev.blames[static_cast<int>(Signal::kLoss)];
    loss.push_back(testing::LossBlame(t.LinkOf("l1", "s1"), 0.05, 0.05));
    loss.push_back(testing::LossBlame(t.LinkOf("l2", "s1"), 0.05, 0.05));
    ElementTracker tracker(t.config);
    if (switch_suspect) {
      tracker.Observe("switch:s1", Observation{});
      tracker.EndTick(1, 1);
      EXPECT_EQ(tracker.HealthOf("switch:s1"), ElementHealth::kSuspect);
    }
    t.MakeBlamer(true, &tracker).LinkLevel();
    std::vector<std::string> out;
    for (const auto& [key, o] : t.ev.observations) out.push_back(key);
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(elements(false), (std::vector<std::string>{"link:l1~s1", "link:l2~s1"}));
  EXPECT_EQ(elements(true), (std::vector<std::string>{"switch:s1"}));
}

// Queueing on three links of one switch that the last two complete seconds show on their own (at
// least min_rtt_samples samples per link, slow_fraction slow, significant against the background)
// confirms in correlated_fresh_latency_confirm_ticks, and densely (correlated_fresh_latency_dense:
// the observation is dense_confirmed, its evidence fresh_latency_confirmed 1); fewer fresh links
// than correlated_latency_links, fresh seconds too thin to tell, or a queue that is over (fresh
// samples fast) keep correlated_latency_confirm_ticks and are not densely confirmed.
TEST(BlameLinkLevel, CorrelatedQueueingOnTheFreshestSecondsConfirmsInTheUsualEvaluations) {
  struct Fresh {
    double slow;
    double rtt;
  };
  bool dense = false;
  auto confirm = [&dense](std::vector<Fresh> links, double* fresh_links,
                          const AnalysisConfig& config = AnalysisConfig{}) {
    testing::BlameFixture t(testing::ThreeLeafMap());
    t.config = config;
    t.ev.specs[static_cast<int>(Signal::kLatency)] = SignalSpec{
        static_cast<double>(t.config.min_rtt_samples), t.config.min_flows, t.config.slow_fraction,
        t.config.slow_significance, t.config.background_slow_floor};
    std::vector<LinkBlame>& lat = t.ev.blames[static_cast<int>(Signal::kLatency)];
    const char* leaves[] = {"l1", "l2", "l3"};
    for (size_t i = 0; i < links.size(); ++i) {
      lat.push_back(
          LatencyBlame(t.LinkOf(leaves[i], "s1"), AddBadFlow(t, PathSource::kTraced, true), 4));
      lat.back().recent_slow = links[i].slow;
      lat.back().recent_rtt = links[i].rtt;
    }
    t.MakeBlamer().LinkLevel();
    const Observation* o = t.Find("switch:s1");
    EXPECT_NE(o, nullptr);
    if (!o) return -1;
    *fresh_links = o->finding.evidence.at("fresh_latency_links");
    dense = o->dense_confirmed;
    EXPECT_EQ(o->finding.evidence.at("fresh_latency_confirmed"), dense ? 1 : 0);
    return o->confirm_ticks;
  };
  const AnalysisConfig c;
  double fresh = -1;
  EXPECT_EQ(confirm({{0.8, 60}, {0.9, 40}, {0.5, 30}}, &fresh),
            c.correlated_fresh_latency_confirm_ticks);
  EXPECT_EQ(fresh, 3);
  EXPECT_TRUE(dense);
  EXPECT_EQ(confirm({{0.8, 60}, {0.9, 40}, {0.0, 30}}, &fresh),
            c.correlated_latency_confirm_ticks);  // one link's queue is over
  EXPECT_EQ(fresh, 2);
  EXPECT_FALSE(dense);
  EXPECT_EQ(confirm({{0.8, 60}, {0.9, 40}, {0.9, 10}}, &fresh),
            c.correlated_latency_confirm_ticks);  // too few fresh samples on one link
  EXPECT_FALSE(dense);
  EXPECT_EQ(confirm({{0.8, 60}, {0.9, 40}, {0.2, 60}}, &fresh),
            c.correlated_latency_confirm_ticks);  // below slow_fraction
  EXPECT_FALSE(dense);
  EXPECT_EQ(confirm({{0, 0}, {0, 0}, {0, 0}}, &fresh), c.correlated_latency_confirm_ticks);
  EXPECT_EQ(fresh, 0);
  EXPECT_FALSE(dense);
  AnalysisConfig off;
  off.correlated_fresh_latency_dense = false;
  EXPECT_EQ(confirm({{0.8, 60}, {0.9, 40}, {0.5, 30}}, &fresh, off),
            c.correlated_fresh_latency_confirm_ticks);
  EXPECT_FALSE(dense);
  EXPECT_LT(c.correlated_fresh_latency_confirm_ticks, c.correlated_latency_confirm_ticks);
  EXPECT_GE(c.correlated_fresh_latency_confirm_ticks, c.confirm_ticks);
}

// Adds a traced flow from `src` to `dst` with 20 RTT samples in the window, `slow` of them slow,
// 4 in the freshest seconds (complete and the tick's own alike), `fresh_slow` of those slow.
void AddLatencyFlow(testing::BlameFixture& t, const FabricMap& map, const char* src,
                    const char* dst, uint32_t slow, uint32_t fresh_slow) {
  FlowObs o = TracedFlow(t, map, src, dst);
  o.probes = o.rtt = 20;
  o.slow = slow;
  o.recent_probes = o.recent_rtt = o.fresh_probes = o.fresh_rtt = 4;
  o.recent_slow = o.fresh_slow = fresh_slow;
  o.ratio_sum = 20 + 3.0f * slow;
  t.tomography().Add(o);
}

// The fresh figures of a latency blame are its explained flows' slow samples of the last two
// complete seconds over every RTT sample of those seconds that crossed the link.
TEST(TomographyLatency, RecentSlowFractionIsTheFreshSecondsOfTheExplainedFlows) {
  const std::shared_ptr<const FabricMap> map = testing::ThreeLeafMap();
  testing::BlameFixture t(map);
  Tomography& tomo = t.tomography();
  auto flow = [&](const char* src, const char* dst, uint32_t slow, uint32_t recent_slow) {
    AddLatencyFlow(t, *map, src, dst, slow, recent_slow);
  };
  // l1~s1 carries a->b, a->c, b->a, c->a; the first three queue, the last does not.
  flow("a", "b", 10, 4);
  flow("a", "c", 10, 3);
  flow("b", "a", 10, 4);
  flow("c", "a", 0, 0);
  flow("b", "c", 0, 0);
  flow("c", "b", 0, 0);
  SignalSpec spec{20, 3, 0.3, 9, 0.01};
  const std::vector<LinkBlame> blames = tomo.Localize(Signal::kLatency, spec);
  ASSERT_FALSE(blames.empty());
  const LinkBlame& b = blames.front();
  EXPECT_EQ(b.link, t.LinkOf("l1", "s1")) << map->links()[b.link].id;
  EXPECT_DOUBLE_EQ(b.recent_rtt, 16);          // four flows' 4 fresh samples cross l1~s1
  EXPECT_DOUBLE_EQ(b.recent_slow, 11.0 / 16);  // 4 + 3 + 4 of them slow
}

// The fresh pass judges the freshest seconds alone: a link whose flows began to queue
// in them is blamed there while its window is still under slow_fraction, and the window's own
// latency pass (and what it explained) is untouched.
TEST(TomographyLatency, TheFreshPassBlamesQueueingTheWindowDoesNotShowYet) {
  const std::shared_ptr<const FabricMap> map = testing::ThreeLeafMap();
  testing::BlameFixture t(map);
  Tomography& tomo = t.tomography();
  // Slow only in the freshest seconds: 4 of 20 in the window.
  auto flow = [&](const char* src, const char* dst, uint32_t recent_slow) {
    AddLatencyFlow(t, *map, src, dst, recent_slow, recent_slow);
  };
  flow("a", "b", 4);
  flow("a", "c", 4);
  flow("b", "a", 4);
  flow("c", "a", 0);
  flow("b", "c", 0);
  flow("c", "b", 0);
  SignalSpec spec{10, 3, 0.3, 9, 0.01};
  EXPECT_TRUE(tomo.Localize(Signal::kLatency, spec).empty());  // the window: 12 of 80 slow
  const std::vector<LinkBlame> fresh = tomo.LocalizeFreshLatency(spec);
  ASSERT_EQ(fresh.size(), 1u);
  EXPECT_EQ(fresh.front().link, t.LinkOf("l1", "s1")) << map->links()[fresh.front().link].id;
  EXPECT_DOUBLE_EQ(fresh.front().estimate, 12.0 / 16);
  for (uint32_t i = 0; i < tomo.bad_flows().size(); ++i) {
    EXPECT_FALSE(tomo.Explained(Signal::kLatency, i)) << i;  // the window's pass explained none
  }
}

// A switch most of whose links queue on the freshest seconds, correlated, is a fresh latency lead
// while its windows do not show it yet; a leaf with one such uplink is not.
TEST(BlameLinkLevel, ASwitchWhoseLinksQueueOnTheFreshestSecondsIsALead) {
  testing::BlameFixture t(testing::ThreeLeafMap());
  for (const char* leaf : {"l1", "l2", "l3"}) {
    t.ev.fresh_latency.push_back(
        LatencyBlame(t.LinkOf(leaf, "s1"), AddBadFlow(t, PathSource::kTraced, true), 4));
  }
  t.MakeBlamer().LinkLevel();
  EXPECT_EQ(t.ev.fresh_latency_leads, std::vector<std::string>{"switch:s1"});
  EXPECT_EQ(t.Find("switch:s1"), nullptr);  // a lead, not an observation

  testing::BlameFixture off(testing::ThreeLeafMap());
  off.config.correlated_fresh_latency_lead = false;
  for (const char* leaf : {"l1", "l2", "l3"}) {
    off.ev.fresh_latency.push_back(
        LatencyBlame(off.LinkOf(leaf, "s1"), AddBadFlow(off, PathSource::kTraced, true), 4));
  }
  off.MakeBlamer().LinkLevel();
  EXPECT_TRUE(off.ev.fresh_latency_leads.empty());
}

// Two links of a two-link switch are not enough correlation: the usual latency wait.
TEST(BlameLinkLevel, QueueingOnTwoLinksWaitsTheUsualLatencyConfirmation) {
  testing::BlameFixture t(testing::TwoLeafMap());
  std::vector<LinkBlame>& lat = t.ev.blames[static_cast<int>(Signal::kLatency)];
  for (const char* leaf : {"l1", "l2"}) {
    lat.push_back(LatencyBlame(t.LinkOf(leaf, "s1"), AddBadFlow(t, PathSource::kTraced, true), 4));
  }
  t.MakeBlamer().LinkLevel();
  const Observation* o = t.Find("switch:s1");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->confirm_ticks, t.config.latency_confirm_ticks);
}

// The two-rail simulator run's false nic_degraded: one host's pairs over a lossy uplink were
// escalated (10x the probes), so its access link's loss estimate (lost probes of its flows over
// its flows' probes) rose to the uplink's own, above it in some ticks, and its access link was
// blamed first. Its bad flows all cross that uplink, so they cannot tell its NIC from the uplink:
// the uplink, which other hosts' flows cross too, is blamed and the NIC is not.
TEST(TomographyAccessLinks, EscalatedFlowsOverALossyUplinkDoNotBlameTheHostsNic) {
  LossFlows flow(testing::TwoLeafMap());
  flow("a", "c", 100, 6);  // escalated, over l1~s1
  flow("c", "a", 100, 6);  // escalated, over l1~s1
  flow("a", "d", 10, 1);
  flow("a", "b", 10, 0);  // intra-leaf: a's NIC only
  flow("b", "a", 10, 0);
  flow("b", "c", 10, 0);  // b's flows over l1~s1, not escalated, happen to lose nothing yet
  flow("b", "d", 10, 0);
  flow("c", "b", 10, 0);
  flow("d", "b", 10, 0);
  const std::vector<LinkBlame> blames = flow.Localize();
  ASSERT_EQ(blames.size(), 1u);
  EXPECT_EQ(blames[0].link, flow.t.LinkOf("l1", "s1")) << flow.map->links()[blames[0].link].id;
  EXPECT_EQ(blames[0].bad_flows, 3u);
}

// The namespace fabric's ECMP run that named a second link: 5 % drop on l1~s1, three flows of the
// pair a-b escalated (10x the probes) over l1~s1 and l2~s1, and l2~s1's other flows sparse and
// clean. l2~s1's loss estimate (the escalated flows' losses over its probes) then tops l1~s1's,
// whose own sparse flows to l3 lose less by chance, and the greedy vote blamed l2~s1 first. Every
// bad flow of l2~s1 crosses l1~s1, which has lossy flows of its own: l1~s1 is blamed, alone.
TEST(TomographyCoreLinks, ALinkWhoseBadFlowsAllCrossALossierSetIsNotBlamedBesideIt) {
  LossFlows flow(testing::ThreeLeafMap());
  flow("a", "b", 100, 8);  // escalated, over l1~s1 and l2~s1
  flow("a", "b", 100, 8);
  flow("b", "a", 100, 8);
  flow("a", "c", 20, 1);  // l1~s1 and l3~s1, not escalated
  flow("c", "a", 20, 0);
  flow("a", "d", 20, 1);
  flow("d", "a", 20, 0);
  flow("b", "c", 10, 0);  // l2~s1 and l3~s1: clean
  flow("c", "b", 10, 0);
  const double l2_estimate = 24.0 / 320, l1_estimate = 26.0 / 380;
  ASSERT_GT(l2_estimate, l1_estimate);  // the greedy vote alone would pick l2~s1
  const std::vector<LinkBlame> blames = flow.Localize();
  ASSERT_EQ(blames.size(), 1u);
  EXPECT_EQ(blames[0].link, flow.t.LinkOf("l1", "s1")) << flow.map->links()[blames[0].link].id;
  EXPECT_EQ(blames[0].bad_flows, 5u);
}

// The same flows with the fault on l2~s1: its flows to l3 lose too, so they are not all on l1~s1's
// paths, and l2~s1 is blamed, alone.
TEST(TomographyCoreLinks, ALinkWithBadFlowsOfItsOwnIsBlamed) {
  LossFlows flow(testing::ThreeLeafMap());
  flow("a", "b", 100, 8);
  flow("a", "b", 100, 8);
  flow("b", "a", 100, 8);
  flow("a", "c", 20, 0);
  flow("c", "a", 20, 0);
  flow("b", "c", 10, 1);
  flow("c", "b", 10, 1);
  const std::vector<LinkBlame> blames = flow.Localize();
  ASSERT_EQ(blames.size(), 1u);
  EXPECT_EQ(blames[0].link, flow.t.LinkOf("l2", "s1")) << flow.map->links()[blames[0].link].id;
  EXPECT_EQ(blames[0].bad_flows, 5u);
}

}  // namespace
}  // namespace fw::analysis
