// The aggregator's state across restarts, with the real daemons on loopback: plan versions keep
// growing so agents apply plans from a restarted aggregator, and a corrupt findings.db is moved
// aside at start and reported by /readyz.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/http/http_client.h"
#include "tests/integration/fleet.h"

namespace fw::testing {
namespace {

using std::chrono::seconds;

// The value of the first series named `name` (with or without labels); -1 when it is not there.
double FirstValue(const std::string& text, const std::string& name) {
  size_t at = 0;
  while ((at = text.find("\n" + name, at)) != std::string::npos) {
    at += 1 + name.size();
    if (text[at] != ' ' && text[at] != '{') continue;
    const size_t sp = text.find(' ', at);
    if (sp == std::string::npos) return -1;
    return std::strtod(text.c_str() + sp + 1, nullptr);
  }
  return -1;
}

double AgentPlannedPeers(Fleet& fleet, const std::string& node) {
  auto r = http::Get("127.0.0.1:" + std::to_string(fleet.AgentHttpPort(node)), "/metrics", 2000);
  return r.ok() ? FirstValue("\n" + r->body, "fabricwatch_probe_planned_peers") : -1;
}

bool PlannedPeersAre(Fleet& fleet, std::initializer_list<const char*> nodes, double peers) {
  for (const char* n : nodes) {
    if (AgentPlannedPeers(fleet, n) != peers) return false;
  }
  return true;
}

// Regression: plan versions restarted at 1 in every aggregator process, and agents ignore a plan
// whose version is not newer than theirs, so after a restart a new node never reached the agents'
// plans. The first lifetime re-plans several times (a node joins and leaves twice) so that the
// agents hold a version the old counter would not pass again within the test.
TEST(RestartStateTest, AgentsGetANewNodeInTheirPlanAfterAggregatorRestart) {
  TempDir dir;
  Fleet fleet(dir);
  fleet.StartAggregator();
  fleet.StartAgent("node-a");
  fleet.StartAgent("node-b");
  ASSERT_TRUE(WaitUntil(
      [&] {
        return PlannedPeersAre(fleet, {"node-a", "node-b"}, 1);
      },
      seconds(30)));
  for (int round = 0; round < 2; ++round) {
    fleet.StartAgent("node-x");
    ASSERT_TRUE(WaitUntil(
        [&] {
          return PlannedPeersAre(fleet, {"node-a", "node-b"}, 2);
        },
        seconds(30)))
        << "round " << round;
    ASSERT_EQ(fleet.agents_["node-x"]->Stop(seconds(10)), 0);
    ASSERT_TRUE(WaitUntil(
        [&] {
          return PlannedPeersAre(fleet, {"node-a", "node-b"}, 1);
        },
        seconds(30)))
        << "round " << round;
  }

  const int port = fleet.grpc_port_;
  ASSERT_EQ(fleet.agg_->Stop(seconds(15)), 0) << "aggregator did not stop cleanly";
  fleet.StartAggregator(port);
  ASSERT_TRUE(WaitUntil([&] { return fleet.ConnectedCount() == 2; }, seconds(30)))
      << fleet.Nodes().dump(2);
  fleet.StartAgent("node-c");
  const auto joined = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitUntil([&] { return fleet.ConnectedCount() == 3; }, seconds(20)));
  EXPECT_TRUE(WaitUntil(
      [&] {
        return PlannedPeersAre(fleet, {"node-a", "node-b", "node-c"}, 2);
      },
      seconds(30)))
      << "node-a peers " << AgentPlannedPeers(fleet, "node-a") << ", node-b peers "
      << AgentPlannedPeers(fleet, "node-b") << "\n"
      << fleet.AgentLog("node-a");
  std::printf("new node in the existing agents' plans %.1f s after it started\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - joined).count());
  for (auto& [name, p] : fleet.agents_) {
    if (p->pid() > 0 && name != "node-x") {
      EXPECT_EQ(p->Stop(seconds(10)), 0) << name;
    }
  }
}

TEST(RestartStateTest, CorruptFindingsDbIsMovedAsideAndReadyzSaysSo) {
  TempDir dir;
  std::filesystem::create_directories(dir.path() + "/state");
  const std::string garbage(8192, '\x7f');
  std::ofstream(dir.path() + "/state/findings.db", std::ios::binary) << garbage;
  Fleet fleet(dir);
  fleet.StartAggregator();

  auto r = http::Get(fleet.http_, "/readyz", 2000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200) << r->body;  // still serving: history is lost, monitoring is not
  EXPECT_NE(r->body.find("ready\n"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("findings.db was corrupt"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("moved to " + dir.path() + "/state/findings.db.corrupt-"),
            std::string::npos)
      << r->body;
  EXPECT_NE(
      fleet.Metrics().find("\nfabricwatch_state_files_quarantined_total{file=\"findings.db\"} 1\n"),
      std::string::npos);
  EXPECT_NE(fleet.Metrics().find(
                "\nfabricwatch_state_files_quarantined_total{file=\"ingest_state.json\"} 0\n"),
            std::string::npos);

  // The old file is kept byte for byte; a fresh database took its place.
  int moved = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/state")) {
    if (!e.path().filename().string().starts_with("findings.db.corrupt-")) continue;
    ++moved;
    std::ifstream in(e.path(), std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), garbage);
  }
  EXPECT_EQ(moved, 1);
  std::ifstream fresh(dir.path() + "/state/findings.db", std::ios::binary);
  std::string head(16, '\0');
  fresh.read(head.data(), 16);
  EXPECT_EQ(head, std::string("SQLite format 3\0", 16));

  // One clear log line says what happened.
  std::ifstream log(dir.path() + "/aggregator.log");
  const std::string text(std::istreambuf_iterator<char>(log), {});
  EXPECT_NE(text.find("msg=\"corrupt state file moved aside; starting fresh\""), std::string::npos)
      << text;

  // A corrupt ingest state file is handled the same way on the next start.
  ASSERT_EQ(fleet.agg_->Stop(seconds(15)), 0);
  std::ofstream(dir.path() + "/state/ingest_state.json", std::ios::trunc) << "{\"nodes\": [1, 2";
  fleet.StartAggregator();
  r = http::Get(fleet.http_, "/readyz", 2000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("ingest_state.json was corrupt"), std::string::npos) << r->body;
  EXPECT_EQ(r->body.find("findings.db was corrupt"), std::string::npos) << r->body;
  EXPECT_NE(fleet.Metrics().find(
                "\nfabricwatch_state_files_quarantined_total{file=\"ingest_state.json\"} 1\n"),
            std::string::npos);
}

}  // namespace
}  // namespace fw::testing
