// Golden tests for the text exposition: structure, escaping, special values, histograms.
#include "exporter/registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <limits>

namespace fw::metrics {
namespace {

TEST(RegistryTest, GoldenCounterGaugeAndEscaping) {
  Registry r;
  auto& c = r.AddCounter("fabricwatch_test_total", "A counter with \\ and\nnewline.", {"node"});
  c.WithLabels({"a\"b\\c\nd"}).Inc(2);
  c.WithLabels({"plain"}).Inc();
  auto& g = r.AddGauge("fabricwatch_gauge", "Special values.", {"kind"});
  g.WithLabels({"nan"}).Set(std::nan(""));
  g.WithLabels({"pinf"}).Set(std::numeric_limits<double>::infinity());
  g.WithLabels({"ninf"}).Set(-std::numeric_limits<double>::infinity());
  g.WithLabels({"frac"}).Set(0.25);
  g.WithLabels({"big"}).Set(1e20);
  g.WithLabels({"neg"}).Set(-3);
  r.AddGauge("fabricwatch_nolabels", "No labels.").WithLabels({}).Set(7);

  const char* want =
      "# HELP fabricwatch_test_total A counter with \\\\ and\\nnewline.\n"
      "# TYPE fabricwatch_test_total counter\n"
      "fabricwatch_test_total{node=\"a\\\"b\\\\c\\nd\"} 2\n"
      "fabricwatch_test_total{node=\"plain\"} 1\n"
      "# HELP fabricwatch_gauge Special values.\n"
      "# TYPE fabricwatch_gauge gauge\n"
      "fabricwatch_gauge{kind=\"big\"} 1e+20\n"
      "fabricwatch_gauge{kind=\"frac\"} 0.25\n"
      "fabricwatch_gauge{kind=\"nan\"} NaN\n"
      "fabricwatch_gauge{kind=\"neg\"} -3\n"
      "fabricwatch_gauge{kind=\"ninf\"} -Inf\n"
      "fabricwatch_gauge{kind=\"pinf\"} +Inf\n"
      "# HELP fabricwatch_nolabels No labels.\n"
      "# TYPE fabricwatch_nolabels gauge\n"
      "fabricwatch_nolabels 7\n";
  EXPECT_EQ(r.RenderToString(), want);
}

TEST(RegistryTest, GoldenHistogram) {
  Registry r;
  auto& h = r.AddHistogram("fabricwatch_rtt_seconds", "RTT.", {"transport"}, {0.001, 0.01});
  auto& udp = h.WithLabels({"udp"});
  udp.Observe(0.0005);
  udp.Observe(0.001);  // bounds are inclusive
  udp.Observe(0.005);
  udp.Observe(5);
  const char* want =
      "# HELP fabricwatch_rtt_seconds RTT.\n"
      "# TYPE fabricwatch_rtt_seconds histogram\n"
      "fabricwatch_rtt_seconds_bucket{transport=\"udp\",le=\"0.001\"} 2\n"
      "fabricwatch_rtt_seconds_bucket{transport=\"udp\",le=\"0.01\"} 3\n"
      "fabricwatch_rtt_seconds_bucket{transport=\"udp\",le=\"+Inf\"} 4\n"
      "fabricwatch_rtt_seconds_sum{transport=\"udp\"} 5.0065\n"
      "fabricwatch_rtt_seconds_count{transport=\"udp\"} 4\n";
  EXPECT_EQ(r.RenderToString(), want);
}

TEST(RegistryTest, HandlesAreStableAndRemoveHidesSeries) {
  Registry r;
  auto& f = r.AddGauge("fabricwatch_agent_up", "Up.", {"node"});
  Gauge& a = f.WithLabels({"a"});
  for (int i = 0; i < 1000; ++i) f.WithLabels({"n" + std::to_string(i)});
  EXPECT_EQ(&a, &f.WithLabels({"a"}));
  f.Remove({"a"});
  a.Set(5);  // still safe to use
  EXPECT_EQ(r.RenderToString().find("node=\"a\""), std::string::npos);
  f.WithLabels({"a"});
  EXPECT_NE(r.RenderToString().find("fabricwatch_agent_up{node=\"a\"} 5"), std::string::npos);
}

// Renders between creations, removals and revivals give the same text as a registry built at once.
TEST(RegistryTest, RenderAfterChangesMatchesAFreshRegistry) {
  Registry changed, fresh;
  auto& c = changed.AddCounter("fabricwatch_c_total", "C.", {"a", "b"});
  auto& h = changed.AddHistogram("fabricwatch_h_seconds", "H.", {"a"}, {0.1, 1});
  for (int i = 0; i < 50; i += 2) c.WithLabels({std::to_string(i), "x\"y"}).Inc(i);
  h.WithLabels({"m"}).Observe(0.5);
  (void)changed.RenderToString();
  for (int i = 1; i < 50; i += 2) c.WithLabels({std::to_string(i), "x\"y"}).Inc(i);
  h.WithLabels({"a"}).Observe(2);
  c.Remove({"10", "x\"y"});
  (void)changed.RenderToString();
  c.Remove({"20", "x\"y"});
  c.WithLabels({"10", "x\"y"});
  h.WithLabels({"z"});

  auto& fc = fresh.AddCounter("fabricwatch_c_total", "C.", {"a", "b"});
  auto& fh = fresh.AddHistogram("fabricwatch_h_seconds", "H.", {"a"}, {0.1, 1});
  for (int i = 0; i < 50; ++i) {
    if (i != 20) fc.WithLabels({std::to_string(i), "x\"y"}).Inc(i);
  }
  fh.WithLabels({"m"}).Observe(0.5);
  fh.WithLabels({"a"}).Observe(2);
  fh.WithLabels({"z"});
  EXPECT_EQ(changed.RenderToString(), fresh.RenderToString());
  EXPECT_EQ(c.size(), 49u);
}

TEST(RegistryTest, CounterIgnoresNegativeIncrements) {
  Registry r;
  auto& c = r.AddCounter("fabricwatch_x_total", "x").WithLabels({});
  c.Inc(3);
  c.Inc(-1);
  EXPECT_EQ(c.Value(), 3);
}

TEST(RegistryTest, RenderStreamsInBoundedChunks) {
  Registry r;
  auto& f = r.AddGauge("fabricwatch_many", "Many series.", {"i"});
  for (int i = 0; i < 20000; ++i) f.WithLabels({std::to_string(i)}).Set(i);
  size_t chunks = 0, largest = 0, total = 0;
  r.Render([&](std::string_view chunk) {
    ++chunks;
    largest = std::max(largest, chunk.size());
    total += chunk.size();
  });
  EXPECT_GT(chunks, 3u);
  EXPECT_LT(largest, Registry::kChunkBytes + 4096);
  EXPECT_GT(total, 20000u * 20);
}

// A scrape whose reader is slow must not stall callers creating series in the same family.
TEST(RegistryTest, SinkRunsWithoutTheFamilyLock) {
  Registry r;
  auto& g = r.AddGauge("fabricwatch_many", "Many.", {"i"});
  for (int i = 0; i < 20000; ++i) g.WithLabels({std::to_string(i)}).Set(i);
  bool created_while_writing = false;
  int chunks = 0;
  std::future<void> done;  // outlives Render, so a failure is reported instead of deadlocking
  r.Render([&](std::string_view) {
    if (chunks++ != 0) return;
    // Cannot finish while Render holds the family's lock.
    done = std::async(std::launch::async, [&] { g.WithLabels({"new"}).Set(1); });
    created_while_writing = done.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  });
  EXPECT_GT(chunks, 1);
  EXPECT_TRUE(created_while_writing);
  EXPECT_NE(r.RenderToString().find("fabricwatch_many{i=\"new\"} 1\n"), std::string::npos);
}

TEST(RegistryTest, NameValidation) {
  EXPECT_TRUE(IsValidMetricName("fabricwatch_agents_connected"));
  EXPECT_TRUE(IsValidMetricName("a:b"));
  EXPECT_FALSE(IsValidMetricName("1abc"));
  EXPECT_FALSE(IsValidMetricName("a-b"));
  EXPECT_FALSE(IsValidLabelName("__reserved"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_DEATH(Registry().AddGauge("bad-name", "x"), "invalid metric name");
}

TEST(RegistryTest, DuplicateNameIsAProgrammingError) {
  Registry r;
  r.AddGauge("fabricwatch_dup", "x");
  EXPECT_DEATH(r.AddCounter("fabricwatch_dup", "x"), "registered twice");
}

}  // namespace
}  // namespace fw::metrics
