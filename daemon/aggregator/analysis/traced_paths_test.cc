// Switch addresses in the fabric map, traced hops mapped to the map's paths, and stale paths.
#include "daemon/aggregator/analysis/traced_paths.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "daemon/aggregator/analysis/tomography.h"

namespace fw::analysis {
namespace {

using aggregator::FabricMap;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr const char* kMap = R"(routing: ecmp
switches:
  - {name: leaf1, tier: leaf, addresses: [198.19.1.1]}
  - {name: leaf2, tier: leaf, addresses: [198.19.2.1, "198.19.2.129"]}
  - {name: spine1, tier: spine, addresses: [198.19.11.1, 198.19.21.1]}
  - {name: spine2, tier: spine, addresses: [198.19.12.1, 198.19.22.1]}
links:
  - {a: leaf1, b: spine1}
  - {a: leaf1, b: spine2}
  - {a: leaf2, b: spine1}
  - {a: leaf2, b: spine2}
hosts:
  - {node: a, nic: eth0, address: 198.18.1.2, switch: leaf1}
  - {node: b, nic: eth0, address: 198.18.2.2, switch: leaf2}
  - {node: c, nic: eth0, address: 198.18.1.3, switch: leaf1}
)";

std::shared_ptr<const FabricMap> Map() {
  auto m = FabricMap::Parse(kMap);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::make_shared<FabricMap>(std::move(*m));
}

// The index of the a -> b path that crosses `spine`.
int32_t PathVia(const FabricMap& m, const std::string& spine) {
  aggregator::PathSet ps = m.PathsBetweenNodes("a", "b");
  for (size_t i = 0; i < ps.PathCount(); ++i) {
    for (auto sw : m.SwitchesOnPath(ps, i)) {
      if (m.switches()[sw].name == spine) return static_cast<int32_t>(i);
    }
  }
  return -1;
}

TEST(SwitchAddresses, AreParsedCanonicalAndLookedUp) {
  auto m = Map();
  EXPECT_THAT(m->switches()[1].addresses, ElementsAre("198.19.2.1", "198.19.2.129"));
  EXPECT_EQ(m->switches()[*m->SwitchAtAddress("198.19.22.1")].name, "spine2");
  EXPECT_FALSE(m->SwitchAtAddress("198.18.1.2"));  // a host, not a switch
  EXPECT_FALSE(m->SwitchAtAddress("not an address"));
  aggregator::PathSet ps = m->PathsBetweenNodes("a", "b");
  ASSERT_EQ(ps.PathCount(), 2u);
  std::vector<std::string> names;
  for (auto sw : m->SwitchesOnPath(ps, 0)) names.push_back(m->switches()[sw].name);
  EXPECT_EQ(names.size(), 3u);
  EXPECT_EQ(names.front(), "leaf1");
  EXPECT_EQ(names.back(), "leaf2");
}

TEST(SwitchAddresses, RefusesBadAndSharedAddresses) {
  auto bad = FabricMap::Parse(R"(switches:
  - {name: leaf1, tier: leaf, addresses: [10.0.0.300]}
hosts:
  - {node: a, nic: eth0, address: 198.18.1.2, switch: leaf1}
)");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().ToString(), HasSubstr("is not an IP address"));
  auto shared = FabricMap::Parse(R"(switches:
  - {name: leaf1, tier: leaf, addresses: [10.0.0.1]}
  - {name: leaf2, tier: leaf, addresses: [10.0.0.1]}
hosts:
  - {node: a, nic: eth0, address: 198.18.1.2, switch: leaf1}
)");
  ASSERT_FALSE(shared.ok());
  EXPECT_THAT(shared.status().ToString(), HasSubstr("already switch leaf1's"));
  auto not_list = FabricMap::Parse(R"(switches:
  - {name: leaf1, tier: leaf, addresses: 10.0.0.1}
hosts:
  - {node: a, nic: eth0, address: 198.18.1.2, switch: leaf1}
)");
  EXPECT_FALSE(not_list.ok());
  auto twice = FabricMap::Parse(R"(switches:
  - {name: leaf1, tier: leaf, addresses: [10.0.0.1, "10.0.0.1"]}
hosts:
  - {node: a, nic: eth0, address: 198.18.1.2, switch: leaf1}
)");
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(twice.status().ToString(), HasSubstr("already listed"));
  auto nested = FabricMap::Parse(R"(switches:
  - {name: leaf1, tier: leaf, addresses: [[10.0.0.1]]}
hosts:
  - {node: a, nic: eth0, address: 198.18.1.2, switch: leaf1}
)");
  ASSERT_FALSE(nested.ok());
  EXPECT_THAT(nested.status().ToString(), HasSubstr("(not a value)"));
}

TEST(SwitchAddresses, AnyTextualFormOfAnIpv6AddressFindsItsSwitch) {
  auto m = FabricMap::Parse(R"(switches:
  - {name: leaf1, tier: leaf, addresses: ["2001:DB8:0:0::1"]}
hosts:
  - {node: a, nic: eth0, address: 198.18.1.2, switch: leaf1}
)");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->switches()[0].addresses.front(), "2001:db8::1");
  EXPECT_EQ(m->SwitchAtAddress("2001:db8::0:1"), 0u);
  EXPECT_FALSE(m->SwitchAtAddress("2001:db8::2"));
}

TEST(TracedPaths, MapsHopsToTheFlowsOwnPath) {
  auto m = Map();
  TracedPaths t(m, nullptr);
  const std::vector<std::string> hops = {"198.19.1.1", "198.19.12.1", "198.19.2.1"};
  TraceOutcome o = t.Record("a", "b", 40001, hops, 1);
  EXPECT_EQ(o.kind, TraceOutcome::kResolved);
  EXPECT_EQ(o.path, PathVia(*m, "spine2"));
  EXPECT_TRUE(o.unknown_hops.empty());
  // Another flow of the pair on the other spine (any of its addresses).
  const std::vector<std::string> other = {"198.19.1.1", "198.19.21.1", "198.19.2.129"};
  EXPECT_EQ(t.Record("a", "b", 40002, other, 1).path, PathVia(*m, "spine1"));
}

TEST(TracedPaths, AStalePathIsReplacedAfterAReroute) {
  auto m = Map();
  auto names = std::make_shared<aggregator::NameInterner>();
  TracedPaths t(m, names, TracedPaths::kDefaultMaxFlows, /*max_age_s=*/60);
  const int64_t s = 1'000'000'000;
  t.Record("a", "b", 40001, std::vector<std::string>{"198.19.1.1", "198.19.11.1", "198.19.2.1"},
           1 * s);
  const auto a = *names->Find("a");
  const auto b = *names->Find("b");
  EXPECT_EQ(t.PathOf(a, b, 40001, 2 * s), PathVia(*m, "spine1"));
  // spine1's link fails; the fabric rehashes the flow onto spine2 and the agent traces again.
  t.Record("a", "b", 40001, std::vector<std::string>{"198.19.1.1", "198.19.12.1", "198.19.2.1"},
           10 * s);
  EXPECT_EQ(t.PathOf(a, b, 40001, 11 * s), PathVia(*m, "spine2"));
  EXPECT_EQ(t.stats().moved, 1u);
  EXPECT_EQ(t.stats().flows, 1u);
  // A trace that no longer resolves drops the old path instead of keeping it.
  t.Record("a", "b", 40001, std::vector<std::string>{"198.19.1.1", "", "198.19.2.1"}, 20 * s);
  EXPECT_FALSE(t.PathOf(a, b, 40001, 21 * s));
  // And a path is not trusted forever.
  t.Record("a", "b", 40001, std::vector<std::string>{"198.19.1.1", "198.19.12.1"}, 30 * s);
  EXPECT_TRUE(t.PathOf(a, b, 40001, 31 * s));
  EXPECT_FALSE(t.PathOf(a, b, 40001, 91 * s));
  EXPECT_FALSE(t.PathOf(a, b, 40002, 31 * s));  // another flow
}

TEST(TracedPaths, SilentAndUnknownHopsAreWildcardsAndUnknownOnesAreNamed) {
  auto m = Map();
  TracedPaths t(m, nullptr);
  // The spine stays silent: either path.
  TraceOutcome silent =
      t.Record("a", "b", 1, std::vector<std::string>{"198.19.1.1", "", "198.19.2.1"}, 0);
  EXPECT_EQ(silent.kind, TraceOutcome::kAmbiguous);
  EXPECT_EQ(silent.path, -1);
  // A spine address the map does not list: ambiguous, and the address is reported.
  TraceOutcome unknown =
      t.Record("a", "b", 2, std::vector<std::string>{"198.19.1.1", "10.9.9.9", "198.19.2.1"}, 0);
  EXPECT_EQ(unknown.kind, TraceOutcome::kAmbiguous);
  EXPECT_THAT(unknown.unknown_hops, ElementsAre("10.9.9.9"));
  // An unknown leaf address does not stop the spine from naming the path.
  TraceOutcome leaf =
      t.Record("a", "b", 3, std::vector<std::string>{"10.1.1.1", "198.19.22.1", "198.19.2.1"}, 0);
  EXPECT_EQ(leaf.kind, TraceOutcome::kResolved);
  EXPECT_EQ(leaf.path, PathVia(*m, "spine2"));
  auto names = t.stats();
  EXPECT_EQ(names.ambiguous, 2u);
  EXPECT_EQ(names.resolved, 1u);
}

TEST(TracedPaths, HopsThatContradictTheMapMatchNothing) {
  auto m = Map();
  TracedPaths t(m, nullptr);
  // leaf2 first: not where a's flows start.
  EXPECT_EQ(t.Record("a", "b", 1, std::vector<std::string>{"198.19.2.1", "198.19.11.1"}, 0).kind,
            TraceOutcome::kNoMatch);
  // Intra-leaf pair: one path of one switch; a spine on it is no match.
  EXPECT_EQ(t.Record("a", "c", 1, std::vector<std::string>{"198.19.1.1"}, 0).kind,
            TraceOutcome::kResolved);
  EXPECT_EQ(t.Record("a", "c", 2, std::vector<std::string>{"198.19.1.1", "198.19.11.1"}, 0).kind,
            TraceOutcome::kNoMatch);
  // Unknown nodes: unmapped.
  EXPECT_EQ(t.Record("x", "y", 1, std::vector<std::string>{"198.19.1.1"}, 0).kind,
            TraceOutcome::kUnmapped);
  // Too many hops: refused.
  std::vector<std::string> many(TracedPaths::kMaxHops + 1, "198.19.1.1");
  EXPECT_EQ(t.Record("a", "b", 9, many, 0).kind, TraceOutcome::kUnmapped);
  EXPECT_EQ(t.stats().refused, 1u);
}

TEST(TracedPaths, TheTableIsBounded) {
  TracedPaths t(Map(), nullptr, /*max_flows=*/2);
  const std::vector<std::string> hops = {"198.19.1.1", "198.19.11.1", "198.19.2.1"};
  EXPECT_EQ(t.Record("a", "b", 1, hops, 0).kind, TraceOutcome::kResolved);
  EXPECT_EQ(t.Record("a", "b", 2, hops, 0).kind, TraceOutcome::kResolved);
  EXPECT_EQ(t.Record("a", "b", 3, hops, 0).kind, TraceOutcome::kUnmapped);
  EXPECT_EQ(t.Record("a", "b", 1, hops, 0).kind, TraceOutcome::kResolved);  // known flow: updated
  EXPECT_EQ(t.stats().flows, 2u);
}

// The echo of a -> b's flow from port 40001 comes back b -> a through spine2 while the probe went
// through spine1: the echo's path is kept as the a -> b path through spine2, under a's flow.
TEST(TracedPaths, AnEchoIsKeptUnderTheProbersFlowAsItsOwnPath) {
  auto m = Map();
  auto names = std::make_shared<aggregator::NameInterner>();
  TracedPaths t(m, names);
  t.Record("a", "b", 40001, std::vector<std::string>{"198.19.1.1", "198.19.11.1", "198.19.2.1"}, 1);
  const TraceOutcome echo = t.RecordEcho(
      "b", "a", 40001, std::vector<std::string>{"198.19.2.1", "198.19.22.1", "198.19.1.1"}, 1);
  EXPECT_EQ(echo.kind, TraceOutcome::kResolved);
  EXPECT_EQ(echo.path, PathVia(*m, "spine2"));
  const auto a = names->Intern("a"), b = names->Intern("b");
  EXPECT_EQ(t.PathOf(a, b, 40001, 2), PathVia(*m, "spine1"));
  EXPECT_EQ(t.EchoPathOf(a, b, 40001, 2), PathVia(*m, "spine2"));
  EXPECT_FALSE(t.EchoPathOf(a, b, 40002, 2));  // another flow's echo is not known
  EXPECT_FALSE(t.EchoPathOf(b, a, 40001, 2));  // nor b's own flow's
  // An echo that contradicts the map resolves nothing and forgets the old echo path.
  EXPECT_EQ(t.RecordEcho("b", "a", 40001,
                         std::vector<std::string>{"198.19.1.1", "198.19.22.1", "198.19.2.1"}, 3)
                .kind,
            TraceOutcome::kNoMatch);
  EXPECT_FALSE(t.EchoPathOf(a, b, 40001, 4));
  EXPECT_EQ(t.stats().echoes, 2u);
  EXPECT_EQ(t.stats().flows, 2u);
}

// A flow whose probe and echo take different spines votes for the links of both ways, once each.
TEST(TracedPaths, AFlowWithATracedEchoVotesForBothWays) {
  auto m = Map();
  const aggregator::PathSet ps = m->PathsBetweenNodes("a", "b");
  Tomography tomo(m);
  FlowObs o;
  o.src_access = ps.src_access;
  o.dst_access = ps.dst_access;
  o.core = ps.core.get();
  o.path = PathVia(*m, "spine1");
  std::map<aggregator::LinkIndex, double> votes;
  auto collect = [&](aggregator::LinkIndex l, double w) { votes[l] += w; };
  tomo.ForEachCandidate(o, collect);
  EXPECT_EQ(votes.size(), 4u);  // two access links, leaf1~spine1, spine1~leaf2
  votes.clear();
  o.echo_path = PathVia(*m, "spine2");
  tomo.ForEachCandidate(o, collect);
  EXPECT_EQ(votes.size(), 6u);  // and leaf2~spine2, spine2~leaf1
  for (const auto& [link, w] : votes) EXPECT_EQ(w, 1.0) << link;
  votes.clear();
  o.echo_path = o.path;  // the same way back: nothing twice
  tomo.ForEachCandidate(o, collect);
  EXPECT_EQ(votes.size(), 4u);
  for (const auto& [link, w] : votes) EXPECT_EQ(w, 1.0) << link;
}

}  // namespace
}  // namespace fw::analysis
