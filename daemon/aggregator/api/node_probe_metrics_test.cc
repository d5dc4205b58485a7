// NodeProbeMetrics: per-node quantiles and loss in the exposition, and removal of stale nodes.
#include "daemon/aggregator/api/node_probe_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fw::aggregator {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

void Add(PairTable& t, const char* src, const char* dst, int64_t rtt, bool lost) {
  ReportedProbe r;
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

TEST(NodeProbeMetricsTest, SeparatesIntraLeafFromInterLeafProbes) {
  auto map = FabricMap::Parse(R"(
switches:
  - {name: leaf1, tier: leaf}
  - {name: leaf2, tier: leaf}
  - {name: spine1, tier: spine}
links:
  - {a: leaf1, b: spine1}
  - {a: leaf2, b: spine1}
hosts:
  - {node: n1, nic: eth0, address: 198.18.1.1, switch: leaf1}
  - {node: n2, nic: eth0, address: 198.18.1.2, switch: leaf1}
  - {node: n3, nic: eth0, address: 198.18.2.1, switch: leaf2}
)");
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  FakeClock clock;
  PairTable table(clock, std::make_shared<const FabricMap>(std::move(*map)));
  metrics::Registry registry;
  NodeProbeMetrics node_metrics(registry);
  // In-leaf probes are fast and lossless; cross-spine probes are slow and lose one in five.
  for (int i = 0; i < 8; ++i) Add(table, "n1", "n2", 20'000, false);
  for (int i = 0; i < 3; ++i) Add(table, "n1", "n3", 1'000'000, false);
  Add(table, "n2", "n3", 1'000'000, false);
  Add(table, "n2", "n3", 0, true);
  node_metrics.Update(table, clock.MonotonicNanos());
  const std::string text = registry.RenderToString();
  EXPECT_THAT(text, HasSubstr(R"(fabricwatch_path_class_probe_loss_ratio{path_class="intra_leaf",)"
                              R"(transport="udp"} 0)"));
  EXPECT_THAT(text, HasSubstr(R"(fabricwatch_path_class_probe_loss_ratio{path_class="inter_leaf",)"
                              R"(transport="udp"} 0.2)"));
  EXPECT_THAT(text, HasSubstr(R"(fabricwatch_path_class_probe_rtt_seconds{path_class="inter_leaf",)"
                              R"(transport="udp",quantile="0.5"} 0.00)"));
  EXPECT_THAT(text, HasSubstr(R"(fabricwatch_path_class_probe_rtt_seconds{path_class="intra_leaf",)"
                              R"(transport="udp",quantile="0.5"} 2.)"));
  EXPECT_THAT(text, Not(HasSubstr(R"(path_class="unknown")")));
  // The node view still merges both classes: n1 lost none of 11, n2 one of 2.
  EXPECT_THAT(text, HasSubstr(R"(fabricwatch_node_probe_loss_ratio{node="n1",transport="udp"} 0)"));
  EXPECT_THAT(text,
              HasSubstr(R"(fabricwatch_node_probe_loss_ratio{node="n2",transport="udp"} 0.5)"));
  // Once the window empties, the class series go too.
  clock.Advance(std::chrono::seconds(120));
  node_metrics.Update(table, clock.MonotonicNanos());
  EXPECT_THAT(registry.RenderToString(),
              Not(HasSubstr("fabricwatch_path_class_probe_loss_ratio{")));
}

}  // namespace
}  // namespace fw::aggregator
