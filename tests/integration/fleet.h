// An aggregator and agents as real processes on loopback, for the integration tests.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/http/http_client.h"
#include "tests/integration/process.h"

namespace fw::testing {

using nlohmann::json;

class Fleet {
 public:
  explicit Fleet(const TempDir& dir) : dir_(dir.path()) {}

  void StartAggregator(int grpc_port = 0, const std::vector<std::string>& extra_args = {}) {
    std::string port_file = dir_ + "/agg.ports";
    std::filesystem::remove(port_file);
    std::vector<std::string> argv{FW_AGGREGATOR_BIN,
                                  "--insecure",
                                  "--grpc-listen",
                                  "127.0.0.1:" + std::to_string(grpc_port),
                                  "--http-listen",
                                  "127.0.0.1:0",
                                  "--heartbeat-timeout",
                                  "3s",
                                  "--tick",
                                  "500ms",
                                  "--state-dir",
                                  dir_ + "/state",
                                  "--record-test-batches",
                                  "--port-file",
                                  port_file};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    agg_ = std::make_unique<Process>(argv, dir_ + "/aggregator.log");
    ASSERT_TRUE(
        WaitUntil([&] { return ReadPort(port_file, "grpc_port") > 0; }, std::chrono::seconds(20)))
        << "aggregator did not start; see " << dir_ << "/aggregator.log";
    grpc_port_ = ReadPort(port_file, "grpc_port");
    http_ = "127.0.0.1:" + std::to_string(ReadPort(port_file, "http_port"));
  }

  // Starts an agent reporting to this fleet's aggregator, or to `aggregator` when given.
  void StartAgent(const std::string& name, int test_batches = 0,
                  const std::string& aggregator = "",
                  const std::vector<std::string>& extra_args = {}) {
    std::string port_file = dir_ + "/agent-" + name + ".ports";
    std::filesystem::remove(port_file);
    std::vector<std::string> argv{
        FW_AGENT_BIN,
        "--insecure",
        "--aggregator",
        aggregator.empty() ? "127.0.0.1:" + std::to_string(grpc_port_) : aggregator,
        "--port-file",
        port_file,
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
      argv.insert(argv.end(),
                  {"--test-batches", std::to_string(test_batches), "--test-batch-rate", "25"});
    }
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    agents_[name] = std::make_unique<Process>(argv, dir_ + "/agent-" + name + ".log");
  }

  // The agent's HTTP port once it listens; -1 if it never does.
  int AgentHttpPort(const std::string& name) {
    std::string port_file = dir_ + "/agent-" + name + ".ports";
    WaitUntil([&] { return ReadPort(port_file, "http_port") > 0; }, std::chrono::seconds(20));
    return ReadPort(port_file, "http_port");
  }

  std::string AgentLog(const std::string& name) const {
    std::ifstream in(dir_ + "/agent-" + name + ".log");
    return std::string(std::istreambuf_iterator<char>(in), {});
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

}  // namespace fw::testing
