// An aggregator and three agents as real processes on loopback: membership, liveness, reconnects,
// and exactly-once delivery of numbered batches across an aggregator restart.
#include "tests/integration/fleet.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/http/http_client.h"

namespace fw::testing {
namespace {

using nlohmann::json;
using std::chrono::seconds;

// The value of an unlabelled series in a text exposition; -1 when it is not there.
double MetricValue(const std::string& text, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const size_t at = text.find(key);
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + key.size(), nullptr);
}

TEST(FleetTest, ThreeAgentsAppearAndADeadOneDropsOut) {
  TempDir dir;
  Fleet fleet(dir);
  fleet.StartAggregator();
  for (auto n : {"node-a", "node-b", "node-c"}) fleet.StartAgent(n);
  ASSERT_TRUE(WaitUntil([&] { return fleet.ConnectedCount() == 3; }, seconds(20)))
      << fleet.Nodes().dump(2);
  EXPECT_NE(fleet.Metrics().find("fabricwatch_agents_connected 3\n"), std::string::npos);
  // Both daemons' self-metrics and the aggregator's health endpoints.
  std::string agent_metrics =
      http::Get("127.0.0.1:" + std::to_string(fleet.AgentHttpPort("node-a")), "/metrics")->body;
  for (const std::string& m : {fleet.Metrics(), agent_metrics}) {
    for (const char* name :
         {"fabricwatch_build_info{version=\"", "process_cpu_seconds_total ",
          "process_resident_memory_bytes ", "fabricwatch_scrape_duration_seconds_count "}) {
      EXPECT_NE(m.find(std::string("\n") + name), std::string::npos) << name;
    }
  }
  EXPECT_EQ(http::Get(fleet.http_, "/healthz")->status, 200);
  EXPECT_TRUE(
      WaitUntil([&] { return http::Get(fleet.http_, "/readyz")->status == 200; }, seconds(10)));
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
  const double replans = MetricValue(fleet.Metrics(), "fabricwatch_planner_replans_total");
  EXPECT_GE(replans, 1.0);
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
  // The departure re-plans (after the 2 s settle time); the re-plan's cost is exported.
  EXPECT_TRUE(WaitUntil(
      [&] { return MetricValue(fleet.Metrics(), "fabricwatch_planner_replans_total") > replans; },
      seconds(10)))
      << fleet.Metrics();
  EXPECT_GT(MetricValue(fleet.Metrics(), "fabricwatch_planner_replan_seconds"), 0.0);

  // A clean agent shutdown on SIGTERM, and on SIGINT.
  EXPECT_EQ(fleet.agents_["node-c"]->Stop(seconds(10)), 0);
  fleet.agents_["node-a"]->Signal(SIGINT);
  EXPECT_EQ(fleet.agents_["node-a"]->Wait(seconds(10)), 0);
}

// --code-release-interval: an agent that unmaps its idle code pages every second holds less RSS
// than one that never does, counts what it gave back, and keeps probing and reporting.
TEST(FleetTest, AnAgentUnmapsItsIdleCodeAndKeepsWorking) {
  TempDir dir;
  Fleet fleet(dir);
  fleet.StartAggregator();
  fleet.StartAgent("node-a", 0, "", {"--code-release-interval", "1s"});
  fleet.StartAgent("node-b", 0, "", {"--code-release-interval", "0"});
  ASSERT_TRUE(WaitUntil([&] { return fleet.ConnectedCount() == 2; }, seconds(20)))
      << fleet.Nodes().dump(2);
  const std::string a = "127.0.0.1:" + std::to_string(fleet.AgentHttpPort("node-a"));
  const std::string b = "127.0.0.1:" + std::to_string(fleet.AgentHttpPort("node-b"));
  auto agent_metric = [](const std::string& addr, const std::string& name) {
    auto r = http::Get(addr, "/metrics", 2000);
    return r.ok() ? MetricValue(r->body, name) : -1.0;
  };
  // node-a's probes of node-b in the aggregator's 10 s window; -1 before any.
  auto probes_a_to_b = [&] {
    auto r = http::Get(fleet.http_, "/api/v1/pairs?src=node-a&dst=node-b", 2000);
    if (!r.ok()) return -1;
    auto j = json::parse(r->body, nullptr, false);
    if (j.is_discarded()) return -1;
    for (const auto& p : j) {
      if (p["transport"] == "udp") return p["windows"]["10s"]["probes"].get<int>();
    }
    return -1;
  };
  // Both probe each other before the comparison: the same work in both processes.
  ASSERT_TRUE(WaitUntil([&] { return probes_a_to_b() >= 1; }, seconds(20)));
  ASSERT_TRUE(WaitUntil(
      [&] { return agent_metric(a, "fabricwatch_agent_code_release_runs_total") >= 3; },
      seconds(20)))
      << fleet.AgentLog("node-a");
  EXPECT_GT(agent_metric(a, "fabricwatch_agent_code_released_bytes_total"), 1 << 20);
  EXPECT_EQ(agent_metric(a, "fabricwatch_agent_code_release_errors_total"), 0);
  EXPECT_EQ(agent_metric(b, "fabricwatch_agent_code_release_runs_total"), 0);
  EXPECT_NE(fleet.AgentLog("node-a").find("released idle code pages"), std::string::npos);
  // The code a static agent maps is ~8 MiB resident after start; what runs in steady state is a
  // fraction of it.
  const double rss_a = agent_metric(a, "process_resident_memory_bytes");
  const double rss_b = agent_metric(b, "process_resident_memory_bytes");
  EXPECT_LT(rss_a + (2 << 20), rss_b) << "rss " << rss_a << " vs " << rss_b;
  // Still working after the releases: node-a keeps sending batches, and its probes of node-b
  // stay in the aggregator's window.
  const double batches = agent_metric(a, "fabricwatch_uplink_batches_sent_total");
  EXPECT_TRUE(WaitUntil(
      [&] { return agent_metric(a, "fabricwatch_uplink_batches_sent_total") >= batches + 2; },
      seconds(10)));
  EXPECT_GE(probes_a_to_b(), 3) << http::Get(fleet.http_, "/api/v1/pairs")->body;
  EXPECT_EQ(fleet.agents_["node-a"]->Stop(seconds(10)), 0);
  EXPECT_EQ(fleet.agents_["node-b"]->Stop(seconds(10)), 0);
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
