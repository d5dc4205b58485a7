// Node snapshot → wire messages, on the real H100 sysfs tree and a real hwloc export.
#include "daemon/agent/node_report.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <utility>
#include <vector>

#include "daemon/agent/node_test_util.h"

namespace fw::agent {
namespace {

namespace v1 = fabricwatch::v1;

NodeSnapshot H100Snapshot(int passes = 1) {
  bool ok = false;
  NodeSnapshot snap = testing::H100Snapshot(passes, &ok);
  EXPECT_TRUE(ok);
  return snap;
}

TEST(NodeReportTest, RealTreeBecomesWireMessages) {
  NodeSnapshot snap = H100Snapshot();
  ASSERT_TRUE(snap.inventory);

  auto inv = InventoryToProto(*snap.inventory);
  EXPECT_EQ(inv.gpus_size(), 4);
  EXPECT_EQ(inv.numa_nodes(), 8u);
  EXPECT_EQ(inv.gpus(0).affinity_class(), "PXB");  // each A100 shares a switch with one HCA

  auto counters = CounterBatchToProto(snap);
  ASSERT_EQ(counters.ports_size(), 9);  // 8 NDR ports and the bond
  bool saw_saturated = false;
  for (const auto& p : counters.ports()) {
    // A single pass has no rates: unknown must travel as NaN, never as a false zero.
    EXPECT_TRUE(std::isnan(p.xmit_bytes_per_s())) << p.device();
    if (p.device() == "mlx5_1") {
      EXPECT_EQ(p.counters().at("link_downed"), 255);
      saw_saturated = true;
    }
    if (p.device() == "mlx5_0") {
      EXPECT_EQ(p.rate_gbps(), 400);
      EXPECT_EQ(p.state(), "ACTIVE");
    }
  }
  EXPECT_TRUE(saw_saturated);

  auto report = CheckReportToProto(snap);
  EXPECT_FALSE(report.json().empty());
  EXPECT_GE(report.exit_code(), 1);  // link_downed saturated at 255 is at least a warning
  bool saturated_finding = false;
  for (const auto& f : report.findings()) {
    if (f.location().device() == "mlx5_1" && f.summary().find("255") != std::string::npos) {
      saturated_finding = true;
    }
  }
  EXPECT_TRUE(saturated_finding) << report.DebugString();
}

using CounterMap = std::map<std::string, double>;
using PortMaps = std::map<std::pair<std::string, uint32_t>, CounterMap>;

PortMaps MapsOf(const v1::CounterBatch& b) {
  PortMaps out;
  for (const v1::PortSample& p : b.ports()) {
    out[{p.device(), p.port()}] = CounterMap(p.counters().begin(), p.counters().end());
  }
  return out;
}

size_t Entries(const v1::CounterBatch& b) {
  size_t n = 0;
  for (const v1::PortSample& p : b.ports()) n += static_cast<size_t>(p.counters_size());
  return n;
}

// What a reader holds after a partial batch: the base's full maps with the partial ones laid over.
PortMaps Overlay(PortMaps base, const v1::CounterBatch& partial) {
  for (const auto& [port, counters] : MapsOf(partial)) {
    for (const auto& [name, value] : counters) base[port][name] = value;
  }
  return base;
}

// The next pass: a second later, with `bump` added to counter j of port i for each (i, j).
NodeSnapshot Advance(NodeSnapshot snap, const std::vector<std::pair<size_t, size_t>>& bump) {
  snap.wall_ns += 1'000'000'000;
  ++snap.seq;
  for (const auto& [i, j] : bump) {
    counters::CounterReading& c = snap.ports.at(i).counters.at(j);
    c.valid = true;
    c.value += 1000;
  }
  return snap;
}

// Full maps of raw counters go once a minute and after Reset(); the batches between carry only
// the counters that differ from the last full one (not from the batch before: a lost batch costs
// a reader nothing else), and laid over that full one they give what a full map would have.
TEST(CounterBatcherTest, BetweenFullMapsOnlyTheCountersThatChangedSinceTheLastOneGo) {
  const NodeSnapshot first = H100Snapshot(2);
  ASSERT_GE(first.ports.size(), 2u);
  ASSERT_GE(first.ports[1].counters.size(), 5u);
  CounterBatcher batcher(std::chrono::seconds(60));
  const auto t0 = std::chrono::steady_clock::time_point() + std::chrono::hours(1);

  const v1::CounterBatch full = batcher.Next(first, t0);
  EXPECT_EQ(full.counters_base_unix_ns(), 0) << "0: a full map";
  EXPECT_EQ(MapsOf(full), MapsOf(CounterBatchToProto(first)));
  EXPECT_GT(Entries(full), 400u) << "every readable counter of the H100 tree";

  // Nothing changed (the testdata tree is static): empty maps, every other field as before.
  const NodeSnapshot same = Advance(first, {});
  const v1::CounterBatch quiet = batcher.Next(same, t0 + std::chrono::seconds(1));
  EXPECT_EQ(quiet.counters_base_unix_ns(), first.wall_ns);
  EXPECT_EQ(Entries(quiet), 0u);
  ASSERT_EQ(quiet.ports_size(), full.ports_size());
  for (int i = 0; i < quiet.ports_size(); ++i) {
    v1::PortSample without_map = full.ports(i);
    without_map.clear_counters();
    EXPECT_EQ(quiet.ports(i).SerializeAsString(), without_map.SerializeAsString())
        << "a reader that ignores the map reads the same port";
  }

  // Two counters move, then a third: the third batch still carries the first two (against the
  // full map, not the batch before).
  const NodeSnapshot second = Advance(same, {{0, 0}, {1, 4}});
  const v1::CounterBatch p2 = batcher.Next(second, t0 + std::chrono::seconds(2));
  EXPECT_EQ(p2.counters_base_unix_ns(), first.wall_ns);
  EXPECT_EQ(Entries(p2), 2u);
  EXPECT_EQ(Overlay(MapsOf(full), p2), MapsOf(CounterBatchToProto(second)));
  const NodeSnapshot third = Advance(second, {{1, 2}});
  const v1::CounterBatch p3 = batcher.Next(third, t0 + std::chrono::seconds(3));
  EXPECT_EQ(Entries(p3), 3u);
  EXPECT_EQ(Overlay(MapsOf(full), p3), MapsOf(CounterBatchToProto(third)))
      << "without p2, as if it had been lost";

  // A minute after the full map: full again, and the base moves to it.
  const NodeSnapshot later = Advance(third, {{0, 1}});
  const v1::CounterBatch full2 = batcher.Next(later, t0 + std::chrono::seconds(60));
  EXPECT_EQ(full2.counters_base_unix_ns(), 0);
  EXPECT_EQ(MapsOf(full2), MapsOf(CounterBatchToProto(later)));
  const v1::CounterBatch after = batcher.Next(Advance(later, {}), t0 + std::chrono::seconds(61));
  EXPECT_EQ(after.counters_base_unix_ns(), later.wall_ns);
  EXPECT_EQ(Entries(after), 0u);

  // A new connection: full at once, whatever the time.
  batcher.Reset();
  EXPECT_EQ(batcher.Next(Advance(later, {}), t0 + std::chrono::seconds(62))
                .counters_base_unix_ns(),
            0);
}

// A port the base lacks carries all its counters; one the base has in another order is matched
// by name; a counter that became unreadable is left out (it leaves the next full map).
TEST(CounterBatcherTest, APortTheBaseLacksCarriesEveryCounter) {
  const NodeSnapshot first = H100Snapshot(2);
  ASSERT_GE(first.ports.size(), 3u);
  CounterMapBase base;
  NodeSnapshot without_port = first;
  without_port.ports.erase(without_port.ports.begin() + 1);
  SetCounterMapBase(without_port, base);
  ASSERT_EQ(base.sampled_unix_ns, first.wall_ns);

  NodeSnapshot next = Advance(first, {});
  next.ports[2].counters[0].valid = false;  // unreadable since the base
  const v1::CounterBatch partial = CounterBatchToProto(next, &base);
  EXPECT_EQ(partial.counters_base_unix_ns(), first.wall_ns);
  size_t readable = 0;
  for (const counters::CounterReading& c : first.ports[1].counters) readable += c.valid;
  EXPECT_EQ(Entries(partial), readable) << "the added port's counters and nothing else";
  EXPECT_EQ(static_cast<size_t>(partial.ports(1).counters_size()), readable);
  EXPECT_EQ(partial.ports(1).device(), first.ports[1].device);

  // Ports in another order than the base's: matched by device and port, still nothing to send.
  NodeSnapshot reordered = Advance(without_port, {});
  std::swap(reordered.ports[0], reordered.ports[1]);
  EXPECT_EQ(Entries(CounterBatchToProto(reordered, &base)), 0u);

  // An empty base is none: the full map.
  const CounterMapBase empty;
  const v1::CounterBatch full = CounterBatchToProto(next, &empty);
  EXPECT_EQ(full.counters_base_unix_ns(), 0);
  EXPECT_EQ(MapsOf(full), MapsOf(CounterBatchToProto(next)));
}

}  // namespace
}  // namespace fw::agent
