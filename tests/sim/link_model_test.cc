// Link and host models: faults change exactly the flows whose true path they touch.
#include "tests/sim/link_model.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace fw::sim {
namespace {

class LinkModelTest : public ::testing::Test {
 protected:
  void Build(std::vector<Fault> faults) {
    scenario_.topology = {.spines = 2, .leaves = 4, .hosts_per_leaf = 8};
    scenario_.noise.episode_prob = 0;  // deterministic baselines for these tests
    scenario_.faults = std::move(faults);
    tree_.emplace(*FatTree::Build(scenario_.topology));
    plan_ = BuildFlowPlan(*tree_, {.inter_leaf_flows = 4});
    model_.emplace(*tree_, scenario_);
  }
  bool Crosses(const Flow& f, int link) {
    return std::find(f.links, f.links + f.traversal_count, link) != f.links + f.traversal_count;
  }
  // Loss ratio over `n` probes of every flow crossing (or not crossing) `link`.
  double LossRatio(int link, bool crossing, int n = 2000) {
    Rng rng(7);
    int lost = 0, total = 0;
    for (const auto& flows : plan_) {
      for (const Flow& f : flows) {
        if (Crosses(f, link) != crossing) continue;
        for (int i = 0; i < n; ++i) lost += model_->SampleLatency(f, rng).lost;
        total += n;
      }
    }
    return total ? static_cast<double>(lost) / total : -1;
  }
  Fault LinkFault(FaultKind k, const char* id) {
    Fault f;
    f.kind = k;
    f.target = id;
    f.link = *tree_->FindLink(id);
    f.end_s = 1000;
    return f;
  }

  Scenario scenario_;
  std::optional<FatTree> tree_;
  std::vector<std::vector<Flow>> plan_;
  std::optional<FabricModel> model_;
};

TEST_F(LinkModelTest, HealthyFabricHasBaseLatencyAndAlmostNoLoss) {
  Build({});
  model_->Advance(0);
  Rng rng(1);
  const Flow& f = plan_[0][0];
  uint64_t max_rtt = 0;
  for (int i = 0; i < 1000; ++i) {
    LatencySample s = model_->SampleLatency(f, rng);
    if (s.lost) continue;
    EXPECT_GE(s.rtt_ns, f.base_rtt_ns);
    max_rtt = std::max(max_rtt, s.rtt_ns);
  }
  EXPECT_LT(max_rtt, f.base_rtt_ns + 10'000'000u);  // rare hiccups, never seconds
  EXPECT_LT(LossRatio(0, true, 200) + LossRatio(0, false, 200), 0.001);
}

TEST_F(LinkModelTest, LossyLinkHitsOnlyFlowsThroughIt) {
  Build({});
  Fault f = LinkFault(FaultKind::kLinkLoss, "leaf001~spine01");
  f.loss = 0.05;
  f.start_s = 10;
  Build({f});
  model_->Advance(5);
  EXPECT_LT(LossRatio(f.link, true), 0.002);  // not yet active
  model_->Advance(10);
  double through = LossRatio(f.link, true), elsewhere = LossRatio(f.link, false);
  // A flow crosses the link once or twice per round trip (the echo may hash elsewhere).
  EXPECT_GT(through, 0.045);
  EXPECT_LT(through, 0.10);
  EXPECT_LT(elsewhere, 0.002);
}

TEST_F(LinkModelTest, DownAndFlappingLinks) {
  Build({});
  Fault down = LinkFault(FaultKind::kLinkDown, "leaf002~spine00");
  Fault flap = LinkFault(FaultKind::kLinkFlap, "leaf003~spine01");
  flap.start_s = 20;
  flap.period_s = 10;
  flap.down_s = 3;
  Build({down, flap});
  model_->Advance(0);
  EXPECT_DOUBLE_EQ(LossRatio(down.link, true, 10), 1.0);
  std::vector<bool> state;
  for (int t = 18; t < 42; ++t) {
    model_->Advance(t);
    state.push_back(model_->link(flap.link).down);
  }
  // Down at 20,21,22 and 30,31,32 and 40,41.
  std::vector<bool> want = {false, false, true,  true,  true,  false, false, false,
                            false, false, false, false, true,  true,  true,  false,
                            false, false, false, false, false, false, true,  true};
  EXPECT_EQ(state, want);
}

// The namespace fabric's routing around a down link: the leaf end sends its packets up another
// spine, the spine end keeps its route to the leaf and drops them. A round trip is lost exactly
// when either way still reaches the down link from the spine; one that left the leaf over it now
// crosses the other spine.
TEST_F(LinkModelTest, RerouteMovesTheWayUpFromTheLeafAndLosesTheWayDown) {
  scenario_.noise.background_loss = 0;
  Build({});
  Fault down = LinkFault(FaultKind::kLinkDown, "leaf001~spine00");
  down.reroute = true;
  Build({down});
  model_->Advance(0);
  const int detour_up = tree_->FabricLink(0, 1, 1);  // leaf001~spine01
  int moved = 0, lost = 0, answered = 0;
  Rng rng(3);
  Flow scratch;
  for (const auto& flows : plan_) {
    for (const Flow& f : flows) {
      if (!f.inter_leaf || !Crosses(f, down.link)) continue;
      // links[1] / links[fc + 1]: a way up from its leaf; links[2] / links[fc + 2]: down to one.
      const int fc = f.forward_count;
      const bool up_over_it = f.links[1] == down.link || f.links[fc + 1] == down.link;
      const bool down_over_it = f.links[2] == down.link || f.links[fc + 2] == down.link;
      const Flow& r = model_->Routed(f, &scratch);
      EXPECT_EQ(&r != &f, up_over_it);
      if (&r != &f) {
        ++moved;
        EXPECT_NE(r.links[1], down.link);
        EXPECT_NE(r.links[fc + 1], down.link);
        EXPECT_TRUE(Crosses(r, detour_up));
      }
      // Lost exactly when a way still reaches the down link from the spine end.
      const bool sample_lost = model_->SampleLatency(f, rng).lost;
      EXPECT_EQ(sample_lost, down_over_it) << f.src_host << "->" << f.dst_host;
      lost += sample_lost;
      answered += !sample_lost;
    }
  }
  EXPECT_GT(moved, 0);
  EXPECT_GT(lost, 0);
  EXPECT_GT(answered, 0);  // a way up moved and an echo back over the other spine: answered
  // Without `reroute` nothing moves, and every flow over the link is lost.
  down.reroute = false;
  Build({down});
  model_->Advance(0);
  for (const auto& flows : plan_) {
    for (const Flow& f : flows) EXPECT_EQ(&model_->Routed(f, &scratch), &f);
  }
  EXPECT_DOUBLE_EQ(LossRatio(down.link, true, 10), 1.0);
}

TEST_F(LinkModelTest, HalvedLinkHalvesGoodput) {
  Build({});
  Fault f = LinkFault(FaultKind::kLinkBandwidth, "leaf000~spine00");
  f.factor = 0.5;
  Build({f});
  model_->Advance(0);
  Rng rng(3);
  for (const auto& flows : plan_) {
    for (const Flow& fl : flows) {
      if (!fl.inter_leaf) continue;
      BandwidthSample b = model_->SampleBandwidth(fl, 4 << 20, rng);
      ASSERT_FALSE(b.lost);
      bool forward_through =
          std::find(fl.links, fl.links + fl.forward_count, f.link) != fl.links + fl.forward_count;
      double ratio = b.goodput_bps / 400e9;
      if (forward_through) {
        EXPECT_NEAR(ratio, 0.46, 0.05);
      } else {
        EXPECT_NEAR(ratio, 0.92, 0.08);
      }
    }
  }
}

TEST_F(LinkModelTest, NoisyHostInflatesItsOwnProbesOnly) {
  Build({});
  Fault f;
  f.kind = FaultKind::kHostNoise;
  f.host = 5;
  f.spike_prob = 0.3;
  f.spike_us = 1000;
  f.end_s = 100;
  Build({f});
  model_->Advance(1);
  Rng rng(5);
  auto mean_rtt_us = [&](int host) {
    double sum = 0;
    int n = 0;
    for (const Flow& fl : plan_[static_cast<size_t>(host)]) {
      for (int i = 0; i < 500; ++i) {
        LatencySample s = model_->SampleLatency(fl, rng);
        if (!s.lost) sum += s.rtt_ns * 1e-3, ++n;
      }
    }
    return sum / n;
  };
  EXPECT_GT(mean_rtt_us(5), 200);
  EXPECT_LT(mean_rtt_us(20), 30);
}

}  // namespace
}  // namespace fw::sim
