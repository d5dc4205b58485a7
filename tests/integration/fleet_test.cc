// An aggregator and three agents as real processes on loopback: membership, liveness, reconnects,
// and exactly-once delivery of numbered batches across an aggregator restart.
#include <signal.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "exporter/http_client.h"
#include "tests/integration/process.h"

namespace fw::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

class Fleet {
 public:
  explicit Fleet(const TempDir& dir) : dir_(dir.path()) {}

  void StartAggregator(int grpc_port = 0) {
    std::string port_file = dir_ + "/agg.ports";
    std::filesystem::remove(port_file);
    agg_ = std::make_unique<Process>(
        std::vector<std::string>{FW_AGGREGATOR_BIN, "--grpc-listen",
                                 "127.0.0.1:" + std::to_string(grpc_port), "--http-listen",
                                 "127.0.0.1:0", "--heartbeat-timeout", "3s", "--tick", "500ms",
                                 "--state-dir", dir_ + "/state", "--record-test-batches",
                                 "--port-file", port_file},
        dir_ + "/aggregator.log");
    ASSERT_TRUE(WaitUntil([&] { return ReadPort(port_file, "grpc_port") > 0; }, seconds(20)))
        << "aggregator did not start; see " << dir_ << "/aggregator.log";
    grpc_port_ = ReadPort(port_file, "grpc_port");
    http_ = "127.0.0.1:" + std::to_string(ReadPort(port_file, "http_port"));
  }

  void StartAgent(const std::string& name, int test_batches = 0) {
    std::vector<std::string> argv{FW_AGENT_BIN,
                                  "--aggregator",
                                  "127.0.0.1:" + std::to_string(grpc_port_),
                                  "--node-name",
                                  name,
                                  "--http-listen",
                                  "127.0.0.1:0",
                                  "--heartbeat-interval",
                                  "500ms",
                                  "--probe-address",
                                  "127.0.0.1",
                                  "--probe-port",
                                  "0",
                                  "--hwloc-xml",
                                  std::string(FW_TESTDATA) + "/hwloc/psmgmt-topo.jrc0386.xml",
                                  "--sysfs-root",
                                  std::string(FW_TESTDATA) + "/sysfs/gpud-h100"};
    if (test_batches > 0) {
      argv.insert(argv.end(), {"--test-batches", std::to_string(test_batches),
                               "--test-batch-rate", "25"});
    }
    agents_[name] = std::make_unique<Process>(argv, dir_ + "/agent-" + name + ".log");
  }

  json Nodes() {
    auto r = http::Get(http_, "/api/v1/nodes", 2000);
    if (!r.ok() || r->status != 200) return json::array();
    auto j = json::parse(r->body, nullptr, false);
    return j.is_discarded() ? json::array() : j;
  }

  std::string Metrics() {
    auto r = http::Get(http_, "/metrics", 2000);
    return r.ok() ? r->body : "";
  }

  int ConnectedCount() {
    int n = 0;
    for (const auto& node : Nodes()) n += node.value("connected", false) ? 1 : 0;
    return n;
  }

  json Node(const std::string& name) {
    for (const auto& node : Nodes()) {
      if (node.value("name", "") == name) return node;
    }
    return json();
  }

  std::unique_ptr<Process> agg_;
  std::map<std::string, std::unique_ptr<Process>> agents_;
  int grpc_port_ = 0;
  std::string http_;

 private:
  std::string dir_;
};

TEST(FleetTest, ThreeAgentsAppearAndADeadOneDropsOut) {
  TempDir dir;
  Fleet fleet(dir);
  fleet.StartAggregator();
  for (auto n : {"node-a", "node-b", "node-c"}) fleet.StartAgent(n);
  ASSERT_TRUE(WaitUntil([&] { return fleet.ConnectedCount() == 3; }, seconds(20)))
      << fleet.Nodes().dump(2);
  EXPECT_NE(fleet.Metrics().find("fabricwatch_agents_connected 3\n"), std::string::npos);
  // The inventory from the hwloc export made it through Hello.
  json a = fleet.Node("node-a");
  EXPECT_EQ(a["inventory"]["gpus"].size(), 4u) << a.dump(2);
  EXPECT_EQ(a["inventory"]["numa_nodes"], 8);

  // Without a fabric map the planner builds a full mesh, so the agents probe each other on
  // loopback and the aggregator fills per-pair windows.
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto r = http::Get(fleet.http_, "/api/v1/pairs?src=node-a&dst=node-b", 2000);
        if (!r.ok()) return false;
        auto j = json::parse(r->body, nullptr, false);
        if (j.is_discarded() || j.empty()) return false;
        for (const auto& p : j) {
          if (p["transport"] == "udp" && p["windows"]["10s"]["probes"].get<int>() >= 3) return true;
        }
        return false;
      },
      seconds(20)))
      << http::Get(fleet.http_, "/api/v1/pairs")->body;
  {
    auto j = json::parse(http::Get(fleet.http_, "/api/v1/pairs?src=node-a&dst=node-b")->body);
    for (const auto& p : j) {
      if (p["transport"] != "udp") continue;
      EXPECT_EQ(p["windows"]["10s"]["loss_ratio"], 0.0) << p.dump();
      EXPECT_GT(p["windows"]["10s"]["rtt_p50_s"].get<double>(), 0) << p.dump();
      EXPECT_LT(p["windows"]["10s"]["rtt_p50_s"].get<double>(), 0.05) << p.dump();
    }
  }
  EXPECT_TRUE(WaitUntil(
      [&] {
        return fleet.Metrics().find("fabricwatch_node_probe_rtt_seconds{node=\"node-a\"") !=
               std::string::npos;
      },
      seconds(5)))
      << fleet.Metrics();

  // Node hardware findings travel from each agent's check report to the aggregator's findings:
  // the real H100 tree has link_downed stuck at 255 on mlx5_1.
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto r = http::Get(fleet.http_, "/api/v1/findings?active=true", 2000);
        if (!r.ok()) return false;
        auto j = json::parse(r->body, nullptr, false);
        if (j.is_discarded()) return false;
        for (const auto& f : j) {
          if (f["location"].value("node", "") == "node-a" &&
              f["location"].value("device", "") == "mlx5_1" &&
              f["summary"].get<std::string>().find("255") != std::string::npos) {
            return true;
          }
        }
        return false;
      },
      seconds(10)))
      << http::Get(fleet.http_, "/api/v1/findings")->body;
  EXPECT_NE(fleet.Metrics().find("fabricwatch_findings_active{"), std::string::npos);
  EXPECT_NE(fleet.Metrics().find(
                "fabricwatch_nic_port_up{node=\"node-a\",device=\"mlx5_0\",port=\"1\"} 1\n"),
            std::string::npos);

  // SIGKILL gives the agent no chance to say goodbye; the aggregator must notice on its own
  // within the 3 s heartbeat timeout.
  auto killed_at = std::chrono::steady_clock::now();
  fleet.agents_["node-b"]->Signal(SIGKILL);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return fleet.Metrics().find("fabricwatch_agent_up{node=\"node-b\"} 0\n") !=
               std::string::npos;
      },
      seconds(4)));
  EXPECT_LE(std::chrono::steady_clock::now() - killed_at, seconds(4));
  EXPECT_NE(fleet.Metrics().find("fabricwatch_agents_connected 2\n"), std::string::npos);
  EXPECT_NE(fleet.Metrics().find("fabricwatch_agent_up{node=\"node-a\"} 1\n"), std::string::npos);

  // A clean agent shutdown on SIGTERM.
  EXPECT_EQ(fleet.agents_["node-c"]->Stop(seconds(10)), 0);
}

TEST(FleetTest, AgentsReconnectAfterAggregatorRestartWithoutLossOrDuplicates) {
  TempDir dir;
  Fleet fleet(dir);
  fleet.StartAggregator();
  const int kBatches = 250;  // 10 s at 25/s, so the restart lands in the middle
  for (auto n : {"node-a", "node-b", "node-c"}) fleet.StartAgent(n, kBatches);
  ASSERT_TRUE(WaitUntil([&] { return fleet.ConnectedCount() == 3; }, seconds(20)));
  std::this_thread::sleep_for(seconds(2));

  int port = fleet.grpc_port_;
  ASSERT_EQ(fleet.agg_->Stop(seconds(15)), 0) << "aggregator did not stop cleanly";
  std::this_thread::sleep_for(seconds(1));  // agents keep measuring into their buffers
  fleet.StartAggregator(port);
  ASSERT_TRUE(WaitUntil([&] { return fleet.ConnectedCount() == 3; }, seconds(30)))
      << fleet.Nodes().dump(2);

  // Every numbered batch arrives exactly once, counted across both aggregator lifetimes.
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (auto n : {"node-a", "node-b", "node-c"}) {
          if (fleet.Node(n)["ingest"].value("test_batches", 0) < kBatches) return false;
        }
        return true;
      },
      seconds(30)))
      << fleet.Nodes().dump(2);
  std::this_thread::sleep_for(seconds(1));
  for (auto n : {"node-a", "node-b", "node-c"}) {
    json in = fleet.Node(n)["ingest"];
    EXPECT_EQ(in["test_batches"], kBatches) << n << " " << in.dump();
    EXPECT_EQ(in["test_ids_distinct"], kBatches) << n << " " << in.dump();
    EXPECT_EQ(in["gaps"], 0) << n << " " << in.dump();
  }
  EXPECT_NE(fleet.Metrics().find("fabricwatch_agents_connected 3\n"), std::string::npos);
  for (auto& [name, p] : fleet.agents_) {
    auto m = http::Get(fleet.http_, "/metrics");  // keep the aggregator busy while agents stop
    EXPECT_EQ(p->Stop(seconds(10)), 0) << name;
  }
}

}  // namespace
}  // namespace fw::testing
