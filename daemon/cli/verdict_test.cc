// Verdict rules of the CLI verbs: each rule a user relies on for the exit code.
#include "daemon/cli/verdict.h"

#include <gtest/gtest.h>

namespace fw::cli {
namespace {

using nlohmann::json;

json Finding(const std::string& severity, bool active, const json& location) {
  return {{"kind", "x"}, {"severity", severity}, {"active", active}, {"location", location}};
}

TEST(VerdictTest, FindingsTakeTheWorstActiveSeverity) {
  EXPECT_EQ(FindingsVerdict(json::array()), kOk);
  const json loc = {{"type", "node"}, {"id", "a"}, {"node", "a"}};
  EXPECT_EQ(FindingsVerdict(json::array({Finding("warning", true, loc)})), kWarning);
  EXPECT_EQ(FindingsVerdict({Finding("warning", true, loc), Finding("critical", true, loc)}),
            kCritical);
  // Resolved findings (findings --all) do not raise the verdict.
  EXPECT_EQ(FindingsVerdict(json::array({Finding("critical", false, loc)})), kOk);
}

TEST(VerdictTest, NodesWarnOnDisconnectAndFollowHealth) {
  EXPECT_EQ(NodesVerdict(json::array()), kOk);
  EXPECT_EQ(NodesVerdict({{{"connected", true}, {"health", ""}}}), kOk);
  EXPECT_EQ(NodesVerdict({{{"connected", true}, {"health", "ok"}}}), kOk);
  EXPECT_EQ(NodesVerdict({{{"connected", false}, {"health", "ok"}}}), kWarning);
  EXPECT_EQ(NodesVerdict({{{"connected", true}, {"health", "unknown"}}}), kWarning);
  EXPECT_EQ(NodesVerdict({{{"connected", true}, {"health", "warning"}},
                          {{"connected", true}, {"health", "critical"}}}),
            kCritical);
}

TEST(VerdictTest, LinksByState) {
  auto links = [](const char* state) { return json{{{"id", "a~b"}, {"state", state}}}; };
  EXPECT_EQ(LinksVerdict(links("ok")), kOk);
  EXPECT_EQ(LinksVerdict(links("unknown")), kOk);
  EXPECT_EQ(LinksVerdict(links("degraded")), kWarning);
  EXPECT_EQ(LinksVerdict(links("flapping")), kWarning);
  EXPECT_EQ(LinksVerdict(links("congested")), kWarning);
  EXPECT_EQ(LinksVerdict(links("down")), kCritical);
}

TEST(VerdictTest, PairsCountOnlyPairFindingsThatMatchTheFilterInEitherDirection) {
  const json f = {Finding("critical", true, {{"type", "pair"}, {"id", "a~b"}, {"node", "a"}}),
                  Finding("warning", true, {{"type", "node"}, {"id", "c"}, {"node", "c"}})};
  EXPECT_EQ(PairsVerdict(f, "", ""), kCritical);
  EXPECT_EQ(PairsVerdict(f, "a", "b"), kCritical);
  EXPECT_EQ(PairsVerdict(f, "b", "a"), kCritical);
  EXPECT_EQ(PairsVerdict(f, "b", ""), kCritical);
  EXPECT_EQ(PairsVerdict(f, "", "a"), kCritical);
  EXPECT_EQ(PairsVerdict(f, "a", "c"), kOk);
  // A node finding is not a pair verdict.
  EXPECT_EQ(PairsVerdict(f, "c", ""), kOk);
}

TEST(VerdictTest, TopoTakesTheNodesWorstFindingAndWarnsWhenDisconnected) {
  const json findings = {
      Finding("warning", true, {{"type", "nic"}, {"id", "n1/mlx5_0/1"}, {"node", "n1"}}),
      Finding("critical", true, {{"type", "gpu"}, {"id", "n2/0000:44:00.0"}, {"node", "n2"}}),
      Finding("critical", false, {{"type", "gpu"}, {"id", "n1/0000:44:00.0"}, {"node", "n1"}})};
  EXPECT_EQ(TopoVerdict({{"name", "n1"}, {"connected", true}}, findings), kWarning);
  EXPECT_EQ(TopoVerdict({{"name", "n2"}, {"connected", true}}, findings), kCritical);
  EXPECT_EQ(TopoVerdict({{"name", "n3"}, {"connected", true}}, findings), kOk);
  EXPECT_EQ(TopoVerdict({{"name", "n3"}, {"connected", false}}, findings), kWarning);
}

TEST(VerdictTest, StatusCombinesFindingsAndConnectivity) {
  const json up = {{{"connected", true}}}, down = {{{"connected", false}}};
  const json loc = {{"type", "link"}, {"id", "l1~s1"}, {"node", ""}};
  EXPECT_EQ(StatusVerdict(up, json::array()), kOk);
  EXPECT_EQ(StatusVerdict(down, json::array()), kWarning);
  EXPECT_EQ(StatusVerdict(down, json::array({Finding("critical", true, loc)})), kCritical);
}

TEST(VerdictTest, MalformedRowsDoNotThrow) {
  const json junk = {1, "x", nullptr, json::array(), {{"connected", "yes"}}};
  EXPECT_EQ(NodesVerdict(junk), kWarning);  // no row says it is connected
  EXPECT_EQ(FindingsVerdict(junk), kOk);
  EXPECT_EQ(LinksVerdict(junk), kOk);
  EXPECT_EQ(PairsVerdict(junk, "", ""), kOk);
  EXPECT_EQ(TopoVerdict(json("n1"), junk), kWarning);
}

}  // namespace
}  // namespace fw::cli
