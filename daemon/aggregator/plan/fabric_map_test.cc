// Fabric map parsing, validation errors and equal-cost path sets.
#include "daemon/aggregator/plan/fabric_map.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace fw::aggregator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

constexpr const char* kTwoByTwo = R"(routing: ecmp
switches:
  - {name: leaf1, tier: leaf}
  - {name: leaf2, tier: leaf}
  - {name: spine1, tier: spine}
  - {name: spine2, tier: spine}
links:
  - {a: leaf1, b: spine1}
  - {a: spine2, b: leaf1}
  - {a: leaf2, b: spine1}
  - {a: leaf2, b: spine2}
hosts:
  - {node: node01, nic: mlx5_0, address: 198.18.1.2, switch: leaf1}
  - {node: node02, nic: mlx5_0, address: 198.18.1.3, switch: leaf1}
  - {node: node03, nic: mlx5_0, address: 198.18.2.2, switch: leaf2}
)";

std::vector<std::string> Ids(const FabricMap& m, const std::vector<LinkIndex>& path) {
  std::vector<std::string> out;
  for (LinkIndex l : path) out.push_back(m.links()[l].id);
  return out;
}

TEST(FabricMapTest, ParsesTheDesignExample) {
  auto m = FabricMap::Parse(kTwoByTwo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->routing(), Routing::kEcmp);
  EXPECT_EQ(m->switches().size(), 4u);
  EXPECT_EQ(m->host_nics().size(), 3u);
  // Four switch links, ids sorted "a~b", then one access link per host NIC.
  ASSERT_EQ(m->links().size(), 7u);
  EXPECT_EQ(m->links()[1].id, "leaf1~spine2");
  EXPECT_TRUE(m->FindLink("leaf1~spine2").has_value());
  EXPECT_FALSE(m->FindLink("spine2~leaf1").has_value());
  EXPECT_TRUE(m->FindLink("node01:mlx5_0~leaf1").has_value());
  EXPECT_EQ(m->host_nics()[2].line, 15);
  EXPECT_EQ(m->NicsOnSwitch(*m->FindSwitch("leaf1")).size(), 2u);
}

TEST(FabricMapTest, IntraLeafPairHasOnePathOfTwoAccessLinks) {
  auto m = FabricMap::Parse(kTwoByTwo);
  ASSERT_TRUE(m.ok());
  const PathSet set = m->PathsBetweenNodes("node01", "node02");
  EXPECT_EQ(set.path_class, PathClass::kIntraLeaf);
  const auto full = set.FullPaths();
  ASSERT_EQ(full.size(), 1u);
  EXPECT_THAT(Ids(*m, full[0]), ElementsAre("node01:mlx5_0~leaf1", "node02:mlx5_0~leaf1"));
}

TEST(FabricMapTest, InterLeafPairHasOnePathPerSpine) {
  auto m = FabricMap::Parse(kTwoByTwo);
  ASSERT_TRUE(m.ok());
  const PathSet set = m->PathsBetweenNodes("node01", "node03");
  EXPECT_EQ(set.path_class, PathClass::kInterLeaf);
  std::vector<std::vector<std::string>> paths;
  for (const auto& p : set.FullPaths()) paths.push_back(Ids(*m, p));
  EXPECT_THAT(paths, UnorderedElementsAre(ElementsAre("node01:mlx5_0~leaf1", "leaf1~spine1",
                                                      "leaf2~spine1", "node03:mlx5_0~leaf2"),
                                          ElementsAre("node01:mlx5_0~leaf1", "leaf1~spine2",
                                                      "leaf2~spine2", "node03:mlx5_0~leaf2")));
  // The switch-level part is shared between lookups.
  EXPECT_EQ(set.core.get(), m->PathsBetweenNodes("node02", "node03").core.get());
}

TEST(FabricMapTest, UnknownNodeOrDisconnectedLeafIsUnknownClass) {
  auto m = FabricMap::Parse(R"(
switches: [{name: leaf1, tier: leaf}, {name: leaf2, tier: leaf}]
hosts:
  - {node: a, nic: eth0, address: 198.18.0.1, switch: leaf1}
  - {node: b, nic: eth0, address: 198.18.0.2, switch: leaf2}
)");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->PathsBetweenNodes("a", "b").path_class, PathClass::kUnknown);
  EXPECT_EQ(m->PathsBetweenNodes("a", "nope").path_class, PathClass::kUnknown);
  EXPECT_EQ(m->PathsBetweenNodes("a", "b").PathCount(), 0u);
}

TEST(FabricMapTest, ThreeTierFabricCountsAllEqualCostPaths) {
  // Two pods, each with 2 leaves and 2 aggregation switches (tier spine), joined by 2 cores.
  std::string y = "switches:\n";
  for (const char* s : {"l1", "l2", "l3", "l4"})
    y += std::string("  - {name: ") + s + ", tier: leaf}\n";
  for (const char* s : {"s1", "s2", "s3", "s4"})
    y += std::string("  - {name: ") + s + ", tier: spine}\n";
  for (const char* s : {"c1", "c2"}) y += std::string("  - {name: ") + s + ", tier: core}\n";
  y += "links:\n";
  for (auto [a, b] : std::vector<std::pair<const char*, const char*>>{{"l1", "s1"},
                                                                      {"l1", "s2"},
                                                                      {"l2", "s1"},
                                                                      {"l2", "s2"},
                                                                      {"l3", "s3"},
                                                                      {"l3", "s4"},
                                                                      {"l4", "s3"},
                                                                      {"l4", "s4"},
                                                                      {"s1", "c1"},
                                                                      {"s1", "c2"},
                                                                      {"s2", "c1"},
                                                                      {"s2", "c2"},
                                                                      {"s3", "c1"},
                                                                      {"s3", "c2"},
                                                                      {"s4", "c1"},
                                                                      {"s4", "c2"}}) {
    y += std::string("  - {a: ") + a + ", b: " + b + "}\n";
  }
  y += "hosts:\n  - {node: h1, nic: x, address: 10.0.0.1, switch: l1}\n"
       "  - {node: h2, nic: x, address: 10.0.0.2, switch: l2}\n"
       "  - {node: h3, nic: x, address: 10.0.0.3, switch: l3}\n";
  auto m = FabricMap::Parse(y);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->PathsBetweenNodes("h1", "h2").PathCount(), 2u);  // via s1 or s2
  const PathSet far = m->PathsBetweenNodes("h1", "h3");         // 2 aggs × 2 cores × 2 aggs
  EXPECT_EQ(far.PathCount(), 8u);
  for (const auto& p : far.FullPaths()) EXPECT_EQ(p.size(), 6u);
}

TEST(FabricMapTest, MultiRailNodesPairOnTheSameRail) {
  auto m = FabricMap::Parse(R"(
switches: [{name: r0, tier: leaf}, {name: r1, tier: leaf}]
hosts:
  - {node: a, nic: mlx5_0, address: 198.18.0.1, switch: r0}
  - {node: a, nic: mlx5_1, address: 198.18.1.1, switch: r1}
  - {node: b, nic: mlx5_1, address: 198.18.1.2, switch: r1}
)");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const PathSet set = m->PathsBetweenNodes("a", "b");
  EXPECT_EQ(set.path_class, PathClass::kIntraLeaf);
  EXPECT_EQ(m->links()[set.src_access].id, "a:mlx5_1~r1");
}

struct BadCase {
  const char* name;
  const char* yaml;
  const char* error;
};

class FabricMapErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(FabricMapErrorTest, RejectsWithAnErrorNamingKeyAndLine) {
  auto m = FabricMap::Parse(GetParam().yaml, "fabric.yaml");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr(GetParam().error));
  EXPECT_THAT(m.status().message(), HasSubstr("fabric.yaml"));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FabricMapErrorTest,
    ::testing::Values(
        BadCase{"not_yaml", "switches: [unclosed", "not valid YAML"},
        BadCase{"scalar_root", "just text", "top level must be a map"},
        BadCase{"unknown_top_key", "switchs: []\n", ":1: top level: unknown key 'switchs'"},
        BadCase{"bad_routing", "routing: random\n", "routing: expected ecmp or deterministic"},
        BadCase{"no_switches", "hosts: []\n", "switches: expected a non-empty list"},
        BadCase{"bad_tier", "switches:\n  - {name: leaf1, tier: lef}\n",
                ":2: switches[0]: bad tier 'lef'"},
        BadCase{"missing_tier", "switches:\n  - {name: leaf1}\n", "missing key 'tier'"},
        BadCase{"duplicate_switch",
                "switches:\n  - {name: a, tier: leaf}\n  - {name: a, tier: spine}\n",
                ":3: switches[1]: duplicate switch 'a' (first on line 2)"},
        BadCase{"name_with_tilde", "switches: [{name: a~b, tier: leaf}]\n", "bad name 'a~b'"},
        BadCase{"link_unknown_switch",
                "switches: [{name: leaf1, tier: leaf}]\nlinks:\n  - {a: leaf1, b: spine9}\n",
                ":3: links[0]: unknown switch 'spine9'"},
        BadCase{"duplicate_link_reversed",
                "switches: [{name: l, tier: leaf}, {name: s, tier: spine}]\nlinks:\n"
                "  - {a: l, b: s}\n  - {a: s, b: l}\n",
                ":4: links[1]: duplicate link 'l~s' (first on line 3)"},
        BadCase{"self_link", "switches: [{name: l, tier: leaf}]\nlinks: [{a: l, b: l}]\n",
                "to itself"},
        BadCase{"link_key_typo", "switches: [{name: l, tier: leaf}]\nlinks: [{a: l, c: l}]\n",
                "links[0]: unknown key 'c'"},
        BadCase{"no_hosts", "switches: [{name: l, tier: leaf}]\n", "hosts: expected a non-empty"},
        BadCase{"host_on_spine",
                "switches: [{name: leaf1, tier: leaf}, {name: spine1, tier: spine}]\n"
                "hosts:\n  - {node: n, nic: e, address: 10.0.0.1, switch: spine1}\n",
                ":3: hosts[0]: host attached to 'spine1', which is a spine, not a leaf"},
        BadCase{"host_unknown_switch",
                "switches: [{name: leaf1, tier: leaf}]\n"
                "hosts:\n  - {node: n, nic: e, address: 10.0.0.1, switch: leaf7}\n",
                "hosts[0]: unknown switch 'leaf7'"},
        BadCase{"bad_address",
                "switches: [{name: leaf1, tier: leaf}]\n"
                "hosts:\n  - {node: n, nic: e, address: 10.0.0.300, switch: leaf1}\n",
                "address '10.0.0.300' is not an IP address"},
        BadCase{"duplicate_host_nic",
                "switches: [{name: leaf1, tier: leaf}]\nhosts:\n"
                "  - {node: n, nic: e, address: 10.0.0.1, switch: leaf1}\n"
                "  - {node: n, nic: e, address: 10.0.0.2, switch: leaf1}\n",
                ":4: hosts[1]: duplicate host NIC n:e"},
        BadCase{"duplicate_address",
                "switches: [{name: leaf1, tier: leaf}]\nhosts:\n"
                "  - {node: n, nic: e, address: 10.0.0.1, switch: leaf1}\n"
                "  - {node: m, nic: e, address: 10.0.0.1, switch: leaf1}\n",
                "address 10.0.0.1 already used on line 3"},
        BadCase{"host_field_is_a_list",
                "switches: [{name: leaf1, tier: leaf}]\nhosts:\n"
                "  - {node: [x], nic: e, address: 10.0.0.1, switch: leaf1}\n",
                "key 'node' must be a plain value"},
        BadCase{"deep_brackets",
                "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
                "nested deeper than 64"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

TEST(FabricMapTest, LoadReadsAFileAndReportsAMissingOne) {
  const std::string path = ::testing::TempDir() + "/fabric_map_test.yaml";
  {
    std::ofstream out(path);
    out << kTwoByTwo;
  }
  auto m = FabricMap::Load(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->host_nics().size(), 3u);
  std::remove(path.c_str());
  auto missing = FabricMap::Load(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace fw::aggregator

namespace fw::aggregator {
namespace {

TEST(PathListTest, FlatPathsReadBackInOrder) {
  const std::vector<std::vector<LinkIndex>> nested = {{1, 2}, {3, 4}, {5, 6}};
  const PathList list(2, nested);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list.hops(), 2u);
  std::vector<std::vector<LinkIndex>> back;
  for (PathList::Path p : list) back.emplace_back(p.begin(), p.end());
  EXPECT_EQ(back, nested);
  EXPECT_EQ(list[1][0], 3u);
  EXPECT_EQ(list[2][1], 6u);
  // Two switches that are the same: one path of no links.
  const PathList same(0, {{}});
  ASSERT_EQ(same.size(), 1u);
  EXPECT_TRUE(same[0].empty());
  EXPECT_TRUE(PathList().empty());
}

}  // namespace
}  // namespace fw::aggregator
