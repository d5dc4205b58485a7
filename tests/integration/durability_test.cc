// Issue 12, sections 2 and 3, with the real daemons on loopback: one live session per node, acks
// that survive kill -9 of the aggregator, and bounds that hold against an abusive client.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <regex>
#include <thread>

#include "fabricwatch.grpc.pb.h"
#include "tests/integration/fleet.h"

namespace fw::testing {
namespace {

namespace v1 = fabricwatch::v1;
using std::chrono::seconds;

// The value of the series `name` exactly as written (labels included); -1 when absent.
double Value(const std::string& metrics, const std::string& series) {
  const size_t at = metrics.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::strtod(metrics.c_str() + at + series.size() + 2, nullptr);
}

size_t CountSeries(const std::string& metrics, const std::string& prefix) {
  size_t n = 0;
  for (size_t at = 0; (at = metrics.find("\n" + prefix, at)) != std::string::npos; ++at) ++n;
  return n;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Every numbered batch of every agent counted exactly once, and the node's sequence space whole:
// as many batches stored as the last sequence says (no batch twice, none skipped).
void ExpectExactlyOnce(Fleet& fleet, const std::vector<std::string>& nodes, int batches) {
  for (const auto& n : nodes) {
    json in = fleet.Node(n)["ingest"];
    EXPECT_EQ(in["test_batches"], batches) << n << " " << in.dump();
    EXPECT_EQ(in["test_ids_distinct"], batches) << n << " " << in.dump();
    EXPECT_EQ(in["gaps"], 0) << n << " " << in.dump();
    EXPECT_EQ(in["duplicates"], 0) << n << " " << in.dump();
    EXPECT_EQ(in["batches"], in["last_seq"]) << n << " " << in.dump();
  }
}

// Two agents started with the same --node-name (a duplicate hostname): each new session ends the
// other's stream, and both sequence spaces are kept apart, so every batch of both arrives once.
TEST(DurabilityTest, TwoAgentsWithOneNodeNameLoseNoBatch) {
  TempDir dir;
  Fleet fleet(dir);
  fleet.StartAggregator();
  constexpr int kBatches = 150;  // 6 s at 25/s each
  fleet.StartAgent("dup", kBatches);
  auto first = std::move(fleet.agents_["dup"]);
  ASSERT_TRUE(WaitUntil([&] { return fleet.ConnectedCount() == 1; }, seconds(20)));
  fleet.StartAgent("dup", kBatches);
  // Both agents send ids 1..kBatches: the node counts 2 * kBatches, kBatches distinct.
  ASSERT_TRUE(WaitUntil(
      [&] { return fleet.Node("dup")["ingest"].value("test_batches", 0) >= 2 * kBatches; },
      seconds(60)))
      << fleet.Node("dup").dump(2);
  std::this_thread::sleep_for(seconds(1));
  json in = fleet.Node("dup")["ingest"];
  EXPECT_EQ(in["test_batches"], 2 * kBatches) << in.dump();
  EXPECT_EQ(in["test_ids_distinct"], kBatches) << in.dump();
  EXPECT_EQ(in["gaps"], 0) << in.dump();
  EXPECT_EQ(in["duplicates"], 0) << in.dump();
  const std::string metrics = fleet.Metrics();
  EXPECT_GE(Value(metrics, "fabricwatch_ingest_session_takeovers_total"), 1) << metrics;
  EXPECT_NE(ReadFile(dir.path() + "/aggregator.log").find("msg=\"session takeover"),
            std::string::npos);
  EXPECT_TRUE(first->running());
  EXPECT_EQ(first->Stop(seconds(10)), 0);
  EXPECT_EQ(fleet.agents_["dup"]->Stop(seconds(10)), 0);
}

// kill -9 of the aggregator during steady ingest, then a restart on the same port: no batch that
// was acked is forgotten (which would be a false gap) and none is counted twice. On one completion
// queue, as a fleet with a map of up to 5,000 nodes is served (the other tests here run on four).
TEST(DurabilityTest, Kill9OfTheAggregatorLosesNothingAcked) {
  TempDir dir;
  Fleet fleet(dir);
  const std::vector<std::string> one_queue{"--grpc-queues", "1"};
  fleet.StartAggregator(0, one_queue);
  constexpr int kBatches = 300;  // 12 s at 25/s: both kills land in the middle
  const std::vector<std::string> nodes{"node-a", "node-b", "node-c"};
  for (const auto& n : nodes) fleet.StartAgent(n, kBatches);
  ASSERT_TRUE(WaitUntil([&] { return fleet.ConnectedCount() == 3; }, seconds(20)));
  const int port = fleet.grpc_port_;
  for (int round = 0; round < 2; ++round) {
    std::this_thread::sleep_for(seconds(3));
    fleet.agg_->Signal(SIGKILL);
    ASSERT_NE(fleet.agg_->Wait(seconds(10)), -1);
    fleet.StartAggregator(port, one_queue);
    ASSERT_TRUE(WaitUntil([&] { return fleet.ConnectedCount() == 3; }, seconds(30)))
        << "round " << round << " " << fleet.Nodes().dump(2);
  }
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const auto& n : nodes) {
          if (fleet.Node(n)["ingest"].value("test_batches", 0) < kBatches) return false;
        }
        return true;
      },
      seconds(60)))
      << fleet.Nodes().dump(2);
  std::this_thread::sleep_for(seconds(1));
  ExpectExactlyOnce(fleet, nodes, kBatches);
  const std::string metrics = fleet.Metrics();
  EXPECT_EQ(Value(metrics, "fabricwatch_ingest_gap_batches_total"), 0);
  EXPECT_GT(Value(metrics, "fabricwatch_ingest_journal_commits_total"), 0);
  EXPECT_NE(
      ReadFile(dir.path() + "/aggregator.log").find("msg=\"grpc completion queues\" queues=1"),
      std::string::npos);
  for (auto& [name, p] : fleet.agents_) EXPECT_EQ(p->Stop(seconds(10)), 0) << name;
}

// One client that tries to make the aggregator hold without bound: 10,000 node names, 100,000
// rotating device names, a report of 50,000 findings, and sessions that say Hello and never read.
TEST(DurabilityTest, AnAbusiveClientStaysWithinTheBounds) {
  TempDir dir;
  const std::string port_file = dir.path() + "/agg.ports";
  Process agg({FW_AGGREGATOR_BIN, "--insecure", "--grpc-listen", "127.0.0.1:0", "--http-listen",
               "127.0.0.1:0", "--tick", "500ms", "--state-dir", dir.path() + "/state",
               "--port-file", port_file, "--max-nodes", "1000", "--max-devices-per-node", "64",
               "--max-findings-per-report", "100"},
              dir.path() + "/aggregator.log");
  ASSERT_TRUE(WaitUntil([&] { return ReadPort(port_file, "grpc_port") > 0; }, seconds(20)));
  const std::string grpc = "127.0.0.1:" + std::to_string(ReadPort(port_file, "grpc_port"));
  const std::string http = "127.0.0.1:" + std::to_string(ReadPort(port_file, "http_port"));
  auto channel = grpc::CreateChannel(grpc, grpc::InsecureChannelCredentials());
  auto stub = v1::Aggregator::NewStub(channel);

  // 10,000 node names, one short session each.
  for (int i = 0; i < 10000; ++i) {
    grpc::ClientContext ctx;
    auto stream = stub->Connect(&ctx);
    v1::AgentMessage m;
    m.mutable_hello()->set_node("abuse-" + std::to_string(i));
    m.mutable_hello()->set_session_id(static_cast<uint64_t>(i) + 1);
    stream->Write(m);
    stream->WritesDone();
    v1::AggregatorMessage in;
    while (stream->Read(&in)) {
    }
    stream->Finish();
  }
  // 100,000 rotating device names and 50,000 findings from one of the admitted nodes.
  {
    grpc::ClientContext ctx;
    auto stream = stub->Connect(&ctx);
    v1::AgentMessage m;
    m.mutable_hello()->set_node("abuse-0");
    m.mutable_hello()->set_session_id(1);
    ASSERT_TRUE(stream->Write(m));
    for (int b = 0; b < 100; ++b) {
      v1::AgentMessage c;
      for (int i = 0; i < 1000; ++i) {
        auto* p = c.mutable_counter_batch()->add_ports();
        p->set_device("mlx5_" + std::to_string(b * 1000 + i));
        p->set_port(1);
        p->set_state("ACTIVE");
      }
      ASSERT_TRUE(stream->Write(c));
    }
    v1::AgentMessage r;
    r.mutable_check_report()->set_exit_code(0);
    for (int i = 0; i < 50000; ++i) {
      auto* f = r.mutable_check_report()->add_findings();
      f->set_id("f" + std::to_string(i));
      f->set_kind("gpu_xid");
      f->set_severity("warning");
      f->set_active(true);
    }
    ASSERT_TRUE(stream->Write(r));
    // Path traces without a fabric map: refused as a whole, counted, logged once.
    v1::AgentMessage t;
    for (int i = 0; i < 2; ++i) t.mutable_path_traces()->add_traces()->set_dst_node("abuse-1");
    ASSERT_TRUE(stream->Write(t));
    stream->WritesDone();
    v1::AggregatorMessage in;
    while (stream->Read(&in)) {
    }
    stream->Finish();
  }
  // Sessions that say Hello and never read what the aggregator sends.
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::AggregatorMessage>>>
      idle;
  for (int i = 0; i < 200; ++i) {
    ctxs.push_back(std::make_unique<grpc::ClientContext>());
    idle.push_back(stub->Connect(ctxs.back().get()));
    v1::AgentMessage m;
    m.mutable_hello()->set_node("abuse-" + std::to_string(i));
    m.mutable_hello()->set_session_id(99);
    idle.back()->Write(m);
  }

  std::string metrics;
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto r = http::Get(http, "/metrics", 5000);
        metrics = r.ok() ? r->body : "";
        return Value(metrics, "fabricwatch_ingest_refused_total{reason=\"report_findings\"}") > 0;
      },
      seconds(30)));
  EXPECT_EQ(Value(metrics, "fabricwatch_ingest_refused_total{reason=\"node_limit\"}"), 9000);
  EXPECT_EQ(Value(metrics, "fabricwatch_ingest_refused_total{reason=\"inventory_devices\"}"),
            100000 - 64);
  EXPECT_EQ(Value(metrics, "fabricwatch_ingest_refused_total{reason=\"report_findings\"}"),
            50000 - 100);
  EXPECT_EQ(Value(metrics, "fabricwatch_path_traces_refused_total{reason=\"no_map\"}"), 2);
  EXPECT_LE(CountSeries(metrics, "fabricwatch_agent_up{"), 1000u);
  EXPECT_LE(CountSeries(metrics, "fabricwatch_nic_port_up{"), 64u);
  const std::string status = ReadFile("/proc/" + std::to_string(agg.pid()) + "/status");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(status, m, std::regex("VmRSS:\\s+(\\d+) kB")));
  const double rss_mib = std::stod(m[1]) / 1024;
  std::printf("aggregator RSS after the abuse: %.0f MiB; port series %zu\n", rss_mib,
              CountSeries(metrics, "fabricwatch_nic_port_up{"));
  EXPECT_LT(rss_mib, 400);
  const std::string log = ReadFile(dir.path() + "/aggregator.log");
  EXPECT_NE(log.find("msg=\"session refused: node limit reached\""), std::string::npos);
  EXPECT_NE(log.find("msg=\"check report trimmed"), std::string::npos);
  EXPECT_NE(log.find("msg=\"path traces refused\""), std::string::npos);
  for (auto& c : ctxs) c->TryCancel();
  for (auto& s : idle) s->Finish();
  EXPECT_EQ(agg.Stop(seconds(15)), 0);
}

}  // namespace
}  // namespace fw::testing
