// Scenario parsing: every shipped scenario loads; mistakes are named by file, line and key.
#include "tests/sim/scenario.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace fw::sim {
namespace {

TEST(ScenarioTest, EveryShippedScenarioLoads) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(FW_SIM_SCENARIOS)) {
    if (e.path().extension() != ".yaml") continue;
    auto s = LoadScenario(e.path().string());
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(s->name + ".yaml", e.path().filename().string());
    ++n;
  }
  EXPECT_GE(n, 10);
}

// The traced ECMP suite (traced_suite.sh): named traced_<file>, every one traces.
TEST(ScenarioTest, EveryTracedScenarioLoadsAndTraces) {
  int n = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(FW_SIM_SCENARIOS) + "/traced")) {
    if (e.path().extension() != ".yaml") continue;
    auto s = LoadScenario(e.path().string());
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(s->name + ".yaml", "traced_" + e.path().filename().string());
    EXPECT_TRUE(s->tracing.enabled) << s->name;
    ++n;
  }
  EXPECT_GE(n, 7);
}

TEST(ScenarioTest, TracingNamesSilentSwitches) {
  auto s = ParseScenario(
      "name: t\ntopology: {spines: 2, leaves: 4, hosts_per_leaf: 2}\ntracing: {silent: "
      "[spine01]}\n",
      "t.yaml");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_TRUE(s->tracing.enabled);
  EXPECT_EQ(s->tracing.silent, std::vector<int>{4 + 1});  // leaves first, then spines
  auto bad = ParseScenario(
      "name: t\ntopology: {spines: 2, leaves: 4, hosts_per_leaf: 2}\ntracing: {silent: [spine9]}\n",
      "t.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("t.yaml:3: tracing.silent: no switch 'spine9'"),
            std::string::npos)
      << bad.status().message();
  EXPECT_TRUE(ParseScenario("name: t\n", "t.yaml")->tracing.silent.empty());
  EXPECT_FALSE(ParseScenario("name: t\n", "t.yaml")->tracing.enabled);
}

TEST(ScenarioTest, RerouteIsForLinkDownAndEchoTracesCanBeOff) {
  auto s = ParseScenario(R"(
name: t
topology: {spines: 2, leaves: 3, hosts_per_leaf: 2}
tracing: {echoes: false}
faults:
  - {kind: link_down, link: leaf001~spine00, start: 5s, reroute: true}
)",
                         "t.yaml");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_FALSE(s->tracing.echoes);
  EXPECT_TRUE(s->faults[0].reroute);
  EXPECT_TRUE(ParseScenario("name: t\ntracing: {}\n", "t.yaml")->tracing.echoes);
  auto bad = ParseScenario(R"(
name: t
topology: {spines: 2, leaves: 3, hosts_per_leaf: 2}
faults:
  - {kind: link_loss, link: leaf001~spine00, loss: 0.1, reroute: true}
)",
                           "t.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("reroute: only a link_down fault reroutes"),
            std::string::npos)
      << bad.status().message();
}

TEST(ScenarioTest, FaultsResolveAndGetDefaultGroundTruth) {
  auto s = ParseScenario(R"(
name: t
topology: {spines: 2, leaves: 4, hosts_per_leaf: 8}
duration: 60s
faults:
  - {kind: link_flap, link: leaf001~spine01, period: 10s, down: 2s, start: 20s, end: 50s}
  - {kind: nic_degraded, node: node00003, loss: 0.02}
  - {kind: switch_congestion, switch: spine00, latency_us: 50, expect: [congestion, switch_degraded]}
)",
                         "t.yaml");
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->faults.size(), 3u);
  const Fault& flap = s->faults[0];
  EXPECT_EQ(flap.kind, FaultKind::kLinkFlap);
  EXPECT_EQ(flap.link, 1 * 2 + 1);
  EXPECT_DOUBLE_EQ(flap.start_s, 20);
  EXPECT_DOUBLE_EQ(flap.end_s, 50);
  EXPECT_EQ(flap.expect_kinds, std::vector<std::string>{"link_flapping"});
  const Fault& nic = s->faults[1];
  EXPECT_EQ(nic.host, 3);
  EXPECT_EQ(nic.nic, "mlx5_0");
  EXPECT_DOUBLE_EQ(nic.end_s, 60);  // defaults to the run's end
  EXPECT_EQ(nic.expect_kinds, std::vector<std::string>{"nic_degraded"});
  EXPECT_EQ(s->faults[2].expect_kinds.size(), 2u);
}

void ExpectError(const std::string& yaml, const std::string& needle) {
  auto s = ParseScenario(yaml, "bad.yaml");
  ASSERT_FALSE(s.ok()) << "accepted: " << yaml;
  EXPECT_NE(s.status().message().find(needle), std::string::npos) << s.status().message();
}

TEST(ScenarioTest, MistakesAreNamed) {
  ExpectError("duration: 10s\nfautls: []\n", "bad.yaml:2: fautls: unknown key");
  ExpectError("topology: {spines: 2, leafs: 4}\n", "topology.leafs: unknown key");
  ExpectError("faults:\n  - {kind: link_loss, link: leaf009~spine00, loss: 0.1}\n",
              "faults[0].link: no link 'leaf009~spine00'");
  ExpectError("faults:\n  - {kind: link_melt, link: leaf000~spine00}\n",
              "'link_melt' is not a fault kind");
  ExpectError("faults:\n  - {kind: link_loss, link: leaf000~spine00, loss: 1.5}\n",
              "faults[0].loss: must be a number in [0, 1]");
  ExpectError("faults:\n  - {kind: link_down, link: leaf000~spine00, start: soon}\n",
              "faults[0].start");
  ExpectError("faults:\n  - {kind: link_flap, link: leaf000~spine00, period: 2s, down: 3s}\n",
              "0 < down < period");
  ExpectError("duration: 30s\nfaults:\n  - {kind: link_down, link: leaf000~spine00, start: 40s}\n",
              "starts after the run ends");
  ExpectError("topology: {leaves: 2000, hosts_per_leaf: 10}\n", "at most 16000");
  ExpectError("[1, 2", "not valid YAML");
  ExpectError("- a\n- b\n", "must be a mapping");
  ExpectError("seed: many\n", "seed: must be an integer");
}

}  // namespace
}  // namespace fw::sim
