// ProbeScheduler on loopback: a plan with the planner's default budget admits bandwidth bursts.
#include "daemon/agent/probe_scheduler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>

namespace fw::agent {
namespace {

namespace v1 = fabricwatch::v1;

double MetricValue(const std::string& text, const std::string& series) {
  const std::regex re("(^|\n)" + std::regex_replace(series, std::regex(R"([{}"\\])"), R"(\$&)") +
                      " ([0-9.eE+-]+)");
  std::smatch m;
  if (!std::regex_search(text, m, re)) return -1;
  return std::stod(m[2]);
}

// The planner's defaults (daemon/aggregator/core/planner.h): 1,000 probes/s and 12.5 MB/s per
// node, 4 MiB bursts. Bursts used to be charged ~2,900 TCP segments against a packet bucket that
// held one second (1,000) of latency probes, so every burst was refused, forever.
TEST(ProbeScheduler, DefaultBudgetAdmitsBandwidthBursts) {
  OutboundBuffer buffer(1000, 64 << 20);
  metrics::Registry registry;
  ProbeSchedulerOptions o;
  o.listen_address = "127.0.0.1";
  o.port = 0;
  o.tcp_connect_interval_s = 3600;
  ProbeScheduler scheduler(
      o, buffer, [] {}, registry);
  ASSERT_TRUE(scheduler.Start().ok());

  v1::ProbePlan plan;
  plan.set_version(1);
  plan.mutable_budget()->set_packets_per_s(1000);
  plan.mutable_budget()->set_bytes_per_s(12.5e6);
  plan.set_bandwidth_interval_s(1);
  plan.set_bandwidth_bytes(4u << 20);
  v1::PlannedPeer* peer = plan.add_peers();
  peer->set_node("self");
  peer->set_address("127.0.0.1");
  peer->set_port(scheduler.responder_port());
  peer->set_transport(v1::TRANSPORT_UDP);
  peer->add_src_ports(0);
  peer->set_rate_pps(10);
  peer->set_bandwidth(true);
  scheduler.ApplyPlan(plan);

  double sent = 0;
  std::string text;
  for (int i = 0; i < 100 && sent < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    text = registry.RenderToString();
    sent = MetricValue(text, R"(fabricwatch_probe_sent_total{transport="tcp_bw"})");
  }
  scheduler.Stop();
  EXPECT_GE(sent, 2) << text;
  EXPECT_EQ(MetricValue(text, "fabricwatch_probe_budget_rejected_total"), 0) << text;
  EXPECT_GT(MetricValue(text, "fabricwatch_probe_goodput_bps"), 0) << text;
}

}  // namespace
}  // namespace fw::agent
