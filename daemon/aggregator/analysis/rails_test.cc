// Every NIC, every rail (issue 16): results that name their NICs are judged on their own rail's
// paths, traces count for the NICs they were taken between, and findings say the rail; results
// that name no NIC are judged on the nodes' first common rail, as before NICs were reported.
#include "daemon/aggregator/analysis/rails.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "daemon/aggregator/analysis/analyzer.h"
#include "daemon/aggregator/analysis/testing/synthetic_fleet.h"
#include "daemon/aggregator/ingest/pair_table.h"

namespace fw::analysis::testing {
namespace {

using aggregator::FabricMap;
using aggregator::HostNicIndex;
using aggregator::LinkIndex;
using aggregator::PairTable;

constexpr int kRails = 2;
constexpr int kSpines = 2;
constexpr int kLeaves = 3;
constexpr int kHosts = 4;  // per leaf
constexpr int kWarmup = 90;
constexpr int64_t kSecond = 1'000'000'000;

std::string Node(int leaf, int host) {
  return "n" + std::to_string(leaf) + "-" + std::to_string(host);
}
std::string Nic(int rail) { return "mlx5_" + std::to_string(rail); }
std::string HostAddress(int rail, int leaf, int host) {
  return "198.18." + std::to_string(rail) + "." + std::to_string(1 + leaf * kHosts + host);
}
std::string SwitchAddress(int rail, int tier, int i) {
  return "198.19." + std::to_string(rail * 16 + tier) + "." + std::to_string(1 + i);
}
std::string Leaf(int rail, int l) {
  return "r" + std::to_string(rail) + "-leaf" + std::to_string(l);
}
std::string Spine(int rail, int s) {
  return "r" + std::to_string(rail) + "-spine" + std::to_string(s);
}

// Two rails, each its own leaves and spines (rail-optimized); every host has mlx5_0 on rail 0 and
// mlx5_1 on rail 1. `rails` 1 gives the same fabric with rail 0 only.
std::string RailMapYaml(bool deterministic, int rails = kRails) {
  std::string y = std::string("routing: ") + (deterministic ? "deterministic" : "ecmp") + "\n";
  y += "switches:\n";
  for (int r = 0; r < rails; ++r) {
    for (int l = 0; l < kLeaves; ++l) {
      y += "  - {name: " + Leaf(r, l) + ", tier: leaf, addresses: [" + SwitchAddress(r, 0, l) +
           "]}\n";
    }
    for (int s = 0; s < kSpines; ++s) {
      y += "  - {name: " + Spine(r, s) + ", tier: spine, addresses: [" + SwitchAddress(r, 1, s) +
           "]}\n";
    }
  }
  y += "links:\n";
  for (int r = 0; r < rails; ++r) {
    for (int l = 0; l < kLeaves; ++l) {
      for (int s = 0; s < kSpines; ++s)
        y += "  - {a: " + Leaf(r, l) + ", b: " + Spine(r, s) + "}\n";
    }
  }
  y += "hosts:\n";
  for (int l = 0; l < kLeaves; ++l) {
    for (int h = 0; h < kHosts; ++h) {
      for (int r = 0; r < rails; ++r) {
        y += "  - {node: " + Node(l, h) + ", nic: " + Nic(r) +
             ", address: " + HostAddress(r, l, h) + ", switch: " + Leaf(r, l) + "}\n";
      }
    }
  }
  return y;
}

std::shared_ptr<const FabricMap> RailMap(bool deterministic, int rails = kRails) {
  auto m = FabricMap::Parse(RailMapYaml(deterministic, rails));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::make_shared<const FabricMap>(std::move(m).value());
}

// A two-rail fleet: every host probes every other host on each rail, with the same source ports
// and flow ids on both rails (as agents bound to each NIC's address may), and a loss model per
// link. Under ECMP the fabric hashes the 5-tuple, addresses included, so the two rails' flows of
// one port take unrelated spines; the analyzer learns them only from traces.
class RailFleet {
 public:
  struct Options {
    bool deterministic = true;
    bool name_nics = true;  // results carry src_nic/dst_nic (else: an agent before NICs)
    int probed_rails = kRails;
  };
  explicit RailFleet(Options o) : o_(o), map_(RailMap(o.deterministic)), rng_(7) {
    pairs_ = std::make_unique<PairTable>(clock_, map_);
    analyzer_ = std::make_unique<Analyzer>(clock_, map_, pairs_.get(), AnalysisConfig{});
    for (int sl = 0; sl < kLeaves; ++sl) {
      for (int sh = 0; sh < kHosts; ++sh) {
        for (int dl = 0; dl < kLeaves; ++dl) {
          for (int dh = 0; dh < kHosts; ++dh) {
            if (sl == dl && sh == dh) continue;
            for (int r = 0; r < o.probed_rails; ++r) {
              const int flows = sl == dl ? 1 : 2;
              for (int k = 0; k < flows; ++k) Add(sl, sh, dl, dh, r, k);
            }
          }
        }
      }
    }
  }

  void SetLinkLoss(const std::string& link, double loss) { loss_[*map_->FindLink(link)] = loss; }

  // Each flow's true forward path as its agent's trace reports it, with the trace's addresses.
  void TraceFlows() {
    for (const Flow& f : flows_) {
      std::vector<std::string> hops;
      for (aggregator::SwitchIndex sw : map_->SwitchesOnPath(f.paths, f.path)) {
        hops.push_back(map_->switches()[sw].addresses.front());
      }
      analyzer_->traced_paths()->Record(f.src, f.dst, f.src_port, hops, clock_.MonotonicNanos(),
                                        f.src_address, f.dst_address);
    }
  }

  void Run(int seconds) {
    std::normal_distribution<double> jitter(0, 0.04);
    std::uniform_real_distribution<double> u(0, 1);
    for (int i = 0; i < seconds; ++i) {
      clock_.Advance(std::chrono::milliseconds(100));
      std::vector<ReportedProbe> batch;
      for (const Flow& f : flows_) {
        ReportedProbe r;
        r.src_node = f.src;
        r.dst_node = f.dst;
        r.src_port = f.src_port;
        r.flow_id = f.flow_id;
        r.seq = ++seq_;
        if (o_.name_nics) {
          r.src_nic = f.src_nic;
          r.dst_nic = f.dst_nic;
        }
        double pass = 1 - 1e-5;
        for (LinkIndex l : f.links) {
          if (auto it = loss_.find(l); it != loss_.end()) pass *= 1 - it->second;
        }
        r.lost = u(rng_) > pass;
        r.rtt_ns = static_cast<int64_t>(20'000 * (1 + std::abs(jitter(rng_))));
        batch.push_back(std::move(r));
      }
      size_t begin = 0;
      for (size_t j = 1; j <= batch.size(); ++j) {
        if (j == batch.size() || batch[j].src_node != batch[begin].src_node) {
          pairs_->RecordBatch(std::span<const ReportedProbe>(batch.data() + begin, j - begin));
          begin = j;
        }
      }
      clock_.Advance(std::chrono::milliseconds(850));
      analyzer_->Tick();
      clock_.Advance(std::chrono::milliseconds(50));
    }
  }

  std::vector<TrackedFinding> Active() const { return analyzer_->Findings(true); }
  const Analyzer& analyzer() const { return *analyzer_; }
  const FabricMap& map() const { return *map_; }

 private:
  struct Flow {
    std::string src, dst, src_nic, dst_nic, src_address, dst_address;
    uint16_t src_port = 0;
    uint32_t flow_id = 0;
    aggregator::PathSet paths;
    size_t path = 0;
    std::vector<LinkIndex> links;
  };

  void Add(int sl, int sh, int dl, int dh, int rail, int k) {
    Flow f;
    f.src = Node(sl, sh);
    f.dst = Node(dl, dh);
    f.src_nic = f.dst_nic = Nic(rail);
    f.src_address = HostAddress(rail, sl, sh);
    f.dst_address = HostAddress(rail, dl, dh);
    f.src_port = static_cast<uint16_t>(40000 + 10 * dl + dh + 100 * k);  // the same on both rails
    f.flow_id = static_cast<uint32_t>(k);
    f.paths =
        map_->Paths(*map_->FindHostNic(f.src, f.src_nic), *map_->FindHostNic(f.dst, f.dst_nic));
    const size_t n = f.paths.PathCount();
    // Deterministic: flow i on path i mod n. ECMP: a hash of the 5-tuple, addresses included.
    f.path =
        o_.deterministic
            ? f.flow_id % n
            : std::hash<std::string>{}(f.src_address + f.dst_address + std::to_string(f.src_port)) %
                  n;
    f.links.push_back(f.paths.src_access);
    for (LinkIndex l : f.paths.core->paths[f.path]) f.links.push_back(l);
    f.links.push_back(f.paths.dst_access);
    flows_.push_back(std::move(f));
  }

  Options o_;
  FakeClock clock_;
  std::shared_ptr<const FabricMap> map_;
  std::unique_ptr<PairTable> pairs_;
  std::unique_ptr<Analyzer> analyzer_;
  std::vector<Flow> flows_;
  std::map<LinkIndex, double> loss_;
  std::mt19937_64 rng_;
  uint64_t seq_ = 0;
};

// The elements of active findings that are on rail 0.
std::vector<std::string> OnRailZero(const std::vector<TrackedFinding>& active) {
  std::vector<std::string> out;
  for (const TrackedFinding& f : active) {
    const std::string& id = f.finding.location.id;
    if (id.find("r0-") != std::string::npos || f.finding.location.device == Nic(0))
      out.push_back(id);
  }
  return out;
}

TEST(FabricMapRails, PathsBetweenNicsTakeTheNicsOwnRail) {
  const auto map = RailMap(true);
  const aggregator::PathSet rail1 = map->PathsBetweenNics(Node(0, 0), Nic(1), Node(1, 0), Nic(1));
  ASSERT_EQ(rail1.PathCount(), 2u);
  EXPECT_EQ(map->links()[rail1.src_access].id, "n0-0:mlx5_1~r1-leaf0");
  EXPECT_EQ(map->links()[rail1.dst_access].id, "n1-0:mlx5_1~r1-leaf1");
  for (LinkIndex l : rail1.core->paths[0]) {
    EXPECT_NE(map->links()[l].id.find("r1-"), std::string::npos) << map->links()[l].id;
  }
  // No NIC, or one the map does not list: the nodes' first common rail, as before.
  const aggregator::PathSet nodes = map->PathsBetweenNodes(Node(0, 0), Node(1, 0));
  EXPECT_EQ(map->links()[nodes.src_access].id, "n0-0:mlx5_0~r0-leaf0");
  for (const auto& [s, d] : std::vector<std::pair<std::string, std::string>>{
           {"", ""}, {Nic(1), ""}, {"mlx5_9", Nic(1)}}) {
    const aggregator::PathSet p = map->PathsBetweenNics(Node(0, 0), s, Node(1, 0), d);
    EXPECT_EQ(p.src_access, nodes.src_access) << s << "/" << d;
    EXPECT_EQ(p.dst_access, nodes.dst_access) << s << "/" << d;
  }
  EXPECT_EQ(map->HostNicAt(Node(0, 0), HostAddress(1, 0, 0)), map->FindHostNic(Node(0, 0), Nic(1)));
  EXPECT_FALSE(map->HostNicAt(Node(0, 1), HostAddress(1, 0, 0)));  // another node's address
  EXPECT_FALSE(map->HostNicAt(Node(0, 0), "not an address"));
  EXPECT_EQ(map->RailOf(*map->FindHostNic(Node(2, 3), Nic(1))), 1u);
}

TEST(RailIndex, NamesTheRailOfLinksSwitchesAndNics) {
  const auto map = RailMap(true);
  const RailIndex rails(*map);
  EXPECT_TRUE(rails.multi_rail());
  EXPECT_EQ(rails.OfLink(*map->FindLink("r1-leaf2~r1-spine0")), 1u);
  EXPECT_EQ(rails.OfSwitch(*map->FindSwitch("r0-spine1")), 0u);
  EXPECT_EQ(rails.OfLocation({"nic", "n1-2/mlx5_1", "n1-2", "mlx5_1", 0}), 1u);
  EXPECT_EQ(rails.OfLocation({"switch", "r1-spine0,r1-spine1", "", "", 0}), 1u);
  EXPECT_FALSE(rails.OfLocation({"switch", "r0-spine0,r1-spine1", "", "", 0}));
  EXPECT_FALSE(rails.OfLocation({"node", "n1-2", "n1-2", "", 0}));
  EXPECT_FALSE(RailIndex(*RailMap(true, 1)).multi_rail());
  // A leaf per host: both NICs on one leaf are positions, not rails.
  auto shared = FabricMap::Parse(
      "switches:\n  - {name: leafA, tier: leaf}\n  - {name: leafB, tier: leaf}\n"
      "  - {name: spine, tier: spine}\nlinks:\n  - {a: leafA, b: spine}\n  - {a: leafB, b: spine}\n"
      "hosts:\n  - {node: a, nic: mlx5_0, address: 198.18.0.1, switch: leafA}\n"
      "  - {node: a, nic: mlx5_1, address: 198.18.0.2, switch: leafA}\n"
      "  - {node: b, nic: mlx5_0, address: 198.18.0.3, switch: leafB}\n"
      "  - {node: b, nic: mlx5_1, address: 198.18.0.4, switch: leafB}\n");
  ASSERT_TRUE(shared.ok()) << shared.status().ToString();
  const RailIndex per_host(*shared);
  EXPECT_FALSE(per_host.OfNic(*shared->FindHostNic("a", "mlx5_1")));
  EXPECT_FALSE(per_host.OfLink(*shared->FindLink("leafA~spine")));
}

ReportedProbe Result(const std::string& src_nic, const std::string& dst_nic, bool lost) {
  ReportedProbe r;
  r.src_node = Node(0, 0);
  r.dst_node = Node(1, 0);
  r.src_port = 40000;
  r.flow_id = 0;
  r.rtt_ns = 20'000;
  r.lost = lost;
  r.src_nic = src_nic;
  r.dst_nic = dst_nic;
  return r;
}

// Agents bound to each NIC may use the same source ports on both rails: the NIC pair keeps their
// flows apart, each on its own rail's paths. Results without NICs, and results naming the NICs of
// the pair's own paths (the first common rail), are one flow on those paths, as before.
TEST(PairTableRails, TwoRailsWithTheSamePortAreTwoFlowsOnTheirOwnPaths) {
  const auto map = RailMap(true);
  FakeClock clock;
  PairTable table(clock, map);
  const std::vector<ReportedProbe> batch = {Result(Nic(0), Nic(0), false),
                                            Result(Nic(1), Nic(1), true), Result("", "", false)};
  for (int i = 0; i < 3; ++i) {  // again: the batch cache must keep each result on its flow
    table.RecordBatch(batch, (i + 1) * kSecond);
  }
  int pairs = 0;
  table.ForEachPairFlows([&](const aggregator::PairFlows& p) {
    ++pairs;
    ASSERT_EQ(p.flows.size(), 2u);
    ASSERT_EQ(p.nic_pairs.size(), 1u);  // rail 1; rail 0 is the pair's own
    EXPECT_EQ(p.nic_pairs[0].src_nic, Nic(1));
    for (const aggregator::FlowSeen& f : p.flows) {
      uint32_t probes = 0, lost = 0;
      for (const aggregator::FlowSlot& s : f.slots) {
        probes += s.probes;
        lost += s.lost;
      }
      const aggregator::PathSet& paths = f.nics == 0 ? p.paths : p.nic_pairs[f.nics - 1].paths;
      const std::string access = map->links()[paths.src_access].id;
      if (f.nics == 0) {
        EXPECT_EQ(access, "n0-0:mlx5_0~r0-leaf0");
        EXPECT_EQ(probes, 6u);
        EXPECT_EQ(lost, 0u);
      } else {
        EXPECT_EQ(access, "n0-0:mlx5_1~r1-leaf0");
        EXPECT_EQ(map->links()[paths.dst_access].id, "n1-0:mlx5_1~r1-leaf1");
        EXPECT_EQ(probes, 3u);
        EXPECT_EQ(lost, 3u);
      }
    }
  });
  EXPECT_EQ(pairs, 1);
}

// Two rails' traces of the same source port between the same nodes: each is matched against its
// own NICs' paths (the rail-1 hops would contradict rail 0's) and kept apart.
TEST(TracedPathsRails, EachRailKeepsItsOwnTrace) {
  const auto map = RailMap(false);
  auto names = std::make_shared<aggregator::NameInterner>();
  TracedPaths traced(map, names);
  auto hops = [](int rail, int spine) {
    return std::vector<std::string>{SwitchAddress(rail, 0, 0), SwitchAddress(rail, 1, spine),
                                    SwitchAddress(rail, 0, 1)};
  };
  const std::string a = Node(0, 0), b = Node(1, 0);
  EXPECT_EQ(
      traced.Record(a, b, 40000, hops(0, 0), kSecond, HostAddress(0, 0, 0), HostAddress(0, 1, 0))
          .kind,
      TraceOutcome::kResolved);
  EXPECT_EQ(
      traced.Record(a, b, 40000, hops(1, 1), kSecond, HostAddress(1, 0, 0), HostAddress(1, 1, 0))
          .kind,
      TraceOutcome::kResolved);
  // Without its addresses a rail-1 trace is matched against the first common rail: no match.
  EXPECT_EQ(traced.Record(a, b, 40001, hops(1, 1), kSecond).kind, TraceOutcome::kNoMatch);
  const aggregator::PathSet rail0 = map->PathsBetweenNics(a, Nic(0), b, Nic(0));
  const aggregator::PathSet rail1 = map->PathsBetweenNics(a, Nic(1), b, Nic(1));
  const auto via = [&](const aggregator::PathSet& paths, const std::string& spine) {
    for (size_t i = 0; i < paths.PathCount(); ++i) {
      for (aggregator::SwitchIndex sw : map->SwitchesOnPath(paths, i)) {
        if (map->switches()[sw].name == spine) return static_cast<int32_t>(i);
      }
    }
    return -1;
  };
  const NodeId ia = *names->Find(a), ib = *names->Find(b);
  EXPECT_EQ(traced.PathOf(ia, ib, 40000, 2 * kSecond, NicsOfPaths(*map, rail0)),
            via(rail0, "r0-spine0"));
  EXPECT_EQ(traced.PathOf(ia, ib, 40000, 2 * kSecond, NicsOfPaths(*map, rail1)),
            via(rail1, "r1-spine1"));
  EXPECT_EQ(traced.stats().flows, 3u);
}

// Warms the fleet up, puts 5 % loss on `link` for 30 s and returns the active findings.
std::vector<TrackedFinding> AfterLossOn(RailFleet& fleet, const std::string& link) {
  fleet.Run(kWarmup);
  fleet.SetLinkLoss(link, 0.05);
  fleet.Run(30);
  return fleet.Active();
}

// The only active finding is `kind` at `id` on rail `rail`, and its summary says `said`.
void ExpectOnly(const std::vector<TrackedFinding>& active, const std::string& kind,
                const std::string& id, double rail, const std::string& said) {
  ASSERT_EQ(active.size(), 1u) << DescribeFindings(active);
  const Finding& f = active[0].finding;
  EXPECT_EQ(f.kind, kind);
  EXPECT_EQ(f.location.id, id);
  EXPECT_EQ(FindingEvidence(active[0], "rail"), rail);
  EXPECT_NE(f.summary.find(said), std::string::npos) << f.summary;
}

TEST(AnalyzerRails, ALinkFaultOnRailOneIsThatLinkAndRailZeroStaysClean) {
  RailFleet fleet({});
  const auto active = AfterLossOn(fleet, "r1-leaf1~r1-spine0");
  ExpectOnly(active, "link_degraded", "r1-leaf1~r1-spine0", 1, "r1-leaf1~r1-spine0 (rail 1)");
  EXPECT_TRUE(OnRailZero(active).empty());
}

// ECMP: both rails use the same source ports, which hash to unrelated spines per rail; only
// traces matched on their own NICs tell the analyzer which.
TEST(AnalyzerRails, TracedEcmpRailsNameTheExactLink) {
  RailFleet fleet({.deterministic = false});
  fleet.TraceFlows();
  const auto active = AfterLossOn(fleet, "r1-leaf2~r1-spine1");
  ASSERT_EQ(active.size(), 1u) << DescribeFindings(active);
  EXPECT_EQ(active[0].finding.location.id, "r1-leaf2~r1-spine1");
  EXPECT_GE(FindingEvidence(active[0], "paths_traced"), 3);
  EXPECT_EQ(FindingEvidence(active[0], "paths_candidates"), 0);
  EXPECT_TRUE(OnRailZero(active).empty());
}

// Escalation raises the flows that cross the suspect element: on a multi-rail fabric those of the
// pair's NICs on the element's rail. Without the NICs the planner raised the first entry toward
// the peer, rail 0's (plan_overlay.h), and the rail-1 link's flows stayed at the base rate.
TEST(AnalyzerRails, ARailOneSuspicionEscalatesThePairsRailOneNics) {
  RailFleet fleet({});
  fleet.Run(kWarmup);
  fleet.SetLinkLoss("r1-leaf1~r1-spine0", 0.05);
  size_t pairs = 0;
  for (int s = 0; s < 30 && pairs == 0; ++s) {
    fleet.Run(1);
    for (const aggregator::EscalationRequest& r : fleet.analyzer().escalation_candidates()) {
      if (r.element != "link:r1-leaf1~r1-spine0") continue;
      for (const aggregator::EscalationPair& p : r.pairs) {
        ++pairs;
        EXPECT_EQ(p.a_nic, Nic(1)) << p.a << "~" << p.b;
        EXPECT_EQ(p.b_nic, Nic(1)) << p.a << "~" << p.b;
      }
    }
  }
  EXPECT_GT(pairs, 0u);
}

TEST(AnalyzerRails, ANicFaultNamesTheNicAndItsRail) {
  RailFleet fleet({});
  ExpectOnly(AfterLossOn(fleet, "n2-1:mlx5_1~r1-leaf2"), "nic_degraded", "n2-1/mlx5_1", 1,
             "NIC mlx5_1 on n2-1 (rail 1)");
}

// An agent from before NICs were reported probes from one address and names no NIC: its flows
// are judged on the nodes' first common rail, exactly as before, and a fault there is still that
// link (the map being multi-rail, the finding says which rail it is).
TEST(AnalyzerRails, ResultsWithoutNicsAreJudgedOnTheFirstCommonRail) {
  RailFleet fleet({.name_nics = false, .probed_rails = 1});
  ExpectOnly(AfterLossOn(fleet, "r0-leaf1~r0-spine0"), "link_degraded", "r0-leaf1~r0-spine0", 0,
             "r0-leaf1~r0-spine0 (rail 0)");
}

}  // namespace
}  // namespace fw::analysis::testing
