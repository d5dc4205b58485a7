// NodeProbeMetrics: per-node quantiles and loss in the exposition, and removal of stale nodes.
#include "daemon/aggregator/core/node_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fw::aggregator {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

void Add(PairTable& t, const char* src, const char* dst, int64_t rtt, bool lost) {
  ProbeResult r;
  r.src_node = src;
  r.dst_node = dst;
  r.rtt_ns = rtt;
  r.lost = lost;
  t.Record(r);
}

TEST(NodeProbeMetricsTest, ExportsMergedQuantilesAndLossPerNode) {
  FakeClock clock;
  PairTable table(clock, nullptr);
  metrics::Registry registry;
  NodeProbeMetrics node_metrics(registry);
  // node01 probes two peers: 99 fast results and one slow, and one loss in 100.
  for (int i = 0; i < 99; ++i) Add(table, "node01", i % 2 ? "node02" : "node03", 20'000, false);
  Add(table, "node01", "node02", 8'000'000, false);
  Add(table, "node01", "node03", 0, true);
  node_metrics.Update(table, clock.MonotonicNanos());
  const std::string text = registry.RenderToString();
  EXPECT_THAT(
      text,
      HasSubstr(R"(fabricwatch_node_probe_loss_ratio{node="node01",transport="udp"} 0.00990099)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(fabricwatch_node_probe_rtt_seconds{node="node01",transport="udp",quantile="0.5"} 2.)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(fabricwatch_node_probe_rtt_seconds{node="node01",transport="udp",quantile="0.999"} 0.008)"));
  EXPECT_THAT(text, Not(HasSubstr("tcp_bw")));  // no data, no series
}

TEST(NodeProbeMetricsTest, SeriesDisappearWhenTheWindowEmptiesAndNodesGo) {
  FakeClock clock;
  PairTable table(clock, nullptr);
  metrics::Registry registry;
  NodeProbeMetrics node_metrics(registry);
  Add(table, "node01", "node02", 20'000, false);
  node_metrics.Update(table, clock.MonotonicNanos());
  EXPECT_THAT(registry.RenderToString(), HasSubstr("node01"));
  clock.Advance(std::chrono::seconds(120));  // past the 60 s window
  node_metrics.Update(table, clock.MonotonicNanos());
  EXPECT_THAT(registry.RenderToString(), Not(HasSubstr("node01")));
  Add(table, "node01", "node02", 20'000, false);  // back: the series revive
  node_metrics.Update(table, clock.MonotonicNanos());
  EXPECT_THAT(registry.RenderToString(), HasSubstr("node01"));
  clock.Advance(std::chrono::seconds(700));
  table.DropIdle(clock.MonotonicNanos());
  node_metrics.Update(table, clock.MonotonicNanos());
  EXPECT_THAT(registry.RenderToString(), Not(HasSubstr("node01")));
}

}  // namespace
}  // namespace fw::aggregator
