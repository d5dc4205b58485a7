// Tomography::Add's per-link sums against a plain reference, over randomized scans.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "daemon/aggregator/analysis/testing/blame_fixture.h"
#include "daemon/aggregator/analysis/tomography.h"

namespace fw::analysis {
namespace {

// 4 leaves of 5 single-NIC hosts under 2 spines (ECMP): flows of a resolved path, of every
// candidate path, and with an echo on the other path.
std::shared_ptr<const FabricMap> FourLeafMap() {
  std::string yaml = "routing: ecmp\nswitches: [{name: s1, tier: spine}, {name: s2, tier: spine}";
  for (int l = 1; l <= 4; ++l) yaml += ", {name: l" + std::to_string(l) + ", tier: leaf}";
  yaml += "]\nlinks: [";
  for (int l = 1; l <= 4; ++l) {
    for (int s = 1; s <= 2; ++s) {
      yaml += (l + s > 2 ? ", " : "") + std::string("{a: l") + std::to_string(l) + ", b: s" +
              std::to_string(s) + "}";
    }
  }
  yaml += "]\nhosts:\n";
  for (int l = 1; l <= 4; ++l) {
    for (int h = 0; h < 5; ++h) {
      yaml += "  - {node: h" + std::to_string(l) + std::to_string(h) +
              ", nic: e0, address: 198.18." + std::to_string(l) + "." + std::to_string(h + 1) +
              ", switch: l" + std::to_string(l) + "}\n";
    }
  }
  return testing::ParsedMap(yaml);
}

// What Add() must sum per link, written the plain way: each sum in its own array, each link's
// list of crossing NIC pairs searched in full.
struct Reference {
  explicit Reference(size_t links, size_t switches)
      : totals(links),
        sure(links),
        fresh_rtt(links),
        fresh_slow(links),
        crossing(links),
        switch_sure(switches) {}
  std::vector<LinkTotals> totals;
  std::vector<Tomography::Counts> sure;
  std::vector<double> fresh_rtt, fresh_slow;
  std::vector<std::vector<CrossingPair>> crossing;
  std::vector<Tomography::Counts> switch_sure;

  void Add(Tomography& candidates, const FabricMap& map, const FlowObs& o) {
    const bool bad = o.lost > 0 || o.slow > 0 || o.bw_bad;
    std::vector<aggregator::SwitchIndex> seen;
    candidates.ForEachCandidate(o, [&](LinkIndex l, double w) {
      if (w >= 0.999 && o.probes > 0) {
        sure[l].probes += o.probes;
        sure[l].lost += o.lost;
        for (aggregator::SwitchIndex sw : {map.links()[l].a, map.links()[l].b}) {
          if (sw == aggregator::kNoIndex || std::find(seen.begin(), seen.end(), sw) != seen.end()) {
            continue;
          }
          seen.push_back(sw);
          switch_sure[sw].probes += o.probes;
          switch_sure[sw].lost += o.lost;
        }
        // The link's first kCrossingPairs NIC pairs; a listed one gains the flow's id when the
        // flow is bad, or when the list has room, or when its entry is among the last ones listed
        // for the flow's node pair (the scan visits a node pair's flows together).
        std::vector<CrossingPair>& list = crossing[l];
        CrossingPair* known = nullptr;
        for (size_t k = list.size(); k > 0 && list[k - 1].src == o.src && list[k - 1].dst == o.dst;
             --k) {
          if (list[k - 1].Holds(o)) {
            known = &list[k - 1];
            break;
          }
        }
        if (!known && (list.size() < Tomography::kCrossingPairs || bad)) {
          for (CrossingPair& c : list) {
            if (c.Holds(o)) {
              known = &c;
              break;
            }
          }
        }
        if (known) {
          known->flow_ids |= o.flow_bit;
        } else if (list.size() < Tomography::kCrossingPairs) {
          list.push_back(
              CrossingPair{o.src, o.dst, o.pair_flows, o.flow_bit, o.src_access, o.dst_access});
        }
      }
      LinkTotals& t = totals[l];
      t.probes += w * o.probes;
      t.lost += w * o.lost;
      t.rtt += w * o.rtt;
      t.slow += w * o.slow;
      t.ratio += w * o.ratio_sum;
      if (o.bw_ratio >= 0) {
        t.bw += w;
        t.bw_ratio += w * o.bw_ratio;
        if (o.bw_bad) t.bw_bad += w;
      }
      ++t.flows;
      fresh_rtt[l] += w * o.fresh_rtt;
      fresh_slow[l] += w * o.fresh_slow;
    });
  }
};

// Randomized scans (each after Reset(), as at a tick): node pairs visited with their flows
// together, some node pairs again later (another transport's flows), bad flows among good ones,
// resolved, unresolved and echo paths. Every per-link sum, per-switch sum and crossing list equals
// the reference's, exactly.
TEST(TomographyTotals, AddMatchesAPlainReferenceOverRandomScans) {
  const std::shared_ptr<const FabricMap> map = FourLeafMap();
  Tomography t(map), candidates(map);
  std::mt19937 rng(7);
  auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  std::vector<std::string> hosts;
  for (int l = 1; l <= 4; ++l) {
    for (int h = 0; h < 5; ++h) hosts.push_back("h" + std::to_string(l) + std::to_string(h));
  }
  size_t full_lists = 0;
  for (int scan = 0; scan < 30; ++scan) {
    t.Reset();
    Reference ref(map->links().size(), map->switches().size());
    const int pairs = 20 + static_cast<int>(pick(200));
    for (int p = 0; p < pairs; ++p) {
      const NodeId src = pick(20);
      NodeId dst = pick(20);
      while (dst == src) dst = pick(20);
      const aggregator::PathSet paths = map->PathsBetweenNodes(hosts[src], hosts[dst]);
      const uint32_t flows = 1 + pick(6);
      for (uint32_t f = 0; f < flows; ++f) {
        FlowObs o;
        o.src = src;
        o.dst = dst;
        o.src_access = paths.src_access;
        o.dst_access = paths.dst_access;
        o.core = paths.core.get();
        const size_t n = o.core ? o.core->paths.size() : 0;
        const uint32_t way = pick(3);
        o.path = n > 0 && way > 0 ? static_cast<int32_t>(pick(static_cast<uint32_t>(n))) : -1;
        if (way == 2 && n > 1) o.echo_path = static_cast<int32_t>(pick(static_cast<uint32_t>(n)));
        o.probes = pick(4) == 0 ? 0 : 1 + pick(40);
        o.lost = o.probes > 0 && pick(8) == 0 ? 1 + pick(o.probes) : 0;
        o.rtt = o.probes - o.lost;
        o.slow = o.rtt > 0 && pick(8) == 0 ? 1 + pick(o.rtt) : 0;
        o.ratio_sum = static_cast<float>(o.rtt) * (1.0f + 0.01f * static_cast<float>(pick(300)));
        o.recent_probes = o.fresh_probes = std::min<uint32_t>(o.probes, pick(5));
        o.fresh_rtt = std::min(o.rtt, o.fresh_probes);
        o.fresh_slow = std::min(o.slow, o.fresh_rtt);
        o.lost_run = o.lost > 0 ? pick(3) : 0;
        if (pick(5) == 0) {
          o.bw_ratio = 0.01f * static_cast<float>(pick(150));
          o.bw_bad = o.bw_ratio < 0.7f;
        }
        o.pair_flows = flows;
        o.flow_bit = FlowBit(f);
        t.Add(o);
        ref.Add(candidates, *map, o);
      }
    }
    for (LinkIndex l = 0; l < map->links().size(); ++l) {
      SCOPED_TRACE(::testing::Message() << "scan " << scan << " link " << map->links()[l].id);
      const LinkTotals& got = t.totals(l);
      const LinkTotals& want = ref.totals[l];
      EXPECT_EQ(got.probes, want.probes);
      EXPECT_EQ(got.lost, want.lost);
      EXPECT_EQ(got.rtt, want.rtt);
      EXPECT_EQ(got.slow, want.slow);
      EXPECT_EQ(got.ratio, want.ratio);
      EXPECT_EQ(got.bw, want.bw);
      EXPECT_EQ(got.bw_ratio, want.bw_ratio);
      EXPECT_EQ(got.bw_bad, want.bw_bad);
      EXPECT_EQ(got.flows, want.flows);
      EXPECT_EQ(t.SureOfLink(l).probes, ref.sure[l].probes);
      EXPECT_EQ(t.SureOfLink(l).lost, ref.sure[l].lost);
      EXPECT_EQ(t.FreshRtt(l), ref.fresh_rtt[l]);
      EXPECT_EQ(t.FreshSlowShare(l),
                ref.fresh_rtt[l] > 0 ? std::min(1.0, ref.fresh_slow[l] / ref.fresh_rtt[l]) : 0);
      const std::span<const CrossingPair> list = t.CrossingPairs(l);
      ASSERT_EQ(list.size(), ref.crossing[l].size());
      full_lists += list.size() == Tomography::kCrossingPairs;
      for (size_t k = 0; k < list.size(); ++k) {
        EXPECT_EQ(list[k].src, ref.crossing[l][k].src);
        EXPECT_EQ(list[k].dst, ref.crossing[l][k].dst);
        EXPECT_EQ(list[k].flows, ref.crossing[l][k].flows);
        EXPECT_EQ(list[k].flow_ids, ref.crossing[l][k].flow_ids);
        EXPECT_EQ(list[k].src_access, ref.crossing[l][k].src_access);
        EXPECT_EQ(list[k].dst_access, ref.crossing[l][k].dst_access);
      }
    }
    for (aggregator::SwitchIndex s = 0; s < map->switches().size(); ++s) {
      EXPECT_EQ(t.SureOfSwitch(s).probes, ref.switch_sure[s].probes);
      EXPECT_EQ(t.SureOfSwitch(s).lost, ref.switch_sure[s].lost);
    }
  }
  // Full lists are where Add() skips reading a link's list for a good flow of another node pair.
  EXPECT_GT(full_lists, 100u);
}

}  // namespace
}  // namespace fw::analysis
