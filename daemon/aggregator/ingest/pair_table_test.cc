// PairTable: handles, batches, path classes, flows, expiry and concurrent ingest.
#include "daemon/aggregator/ingest/pair_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <thread>

namespace fw::aggregator {
namespace {

using ::testing::UnorderedElementsAre;

std::shared_ptr<const FabricMap> SmallMap() {
  auto m = FabricMap::Parse(R"(
switches: [{name: l1, tier: leaf}, {name: l2, tier: leaf}, {name: s1, tier: spine}]
links: [{a: l1, b: s1}, {a: l2, b: s1}]
hosts:
  - {node: a, nic: e, address: 198.18.0.1, switch: l1}
  - {node: b, nic: e, address: 198.18.0.2, switch: l1}
  - {node: c, nic: e, address: 198.18.1.1, switch: l2}
)");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::make_shared<const FabricMap>(std::move(m).value());
}

ReportedProbe Result(std::string src, std::string dst, uint16_t port, int64_t rtt,
                     bool lost = false) {
  ReportedProbe r;
  r.src_node = std::move(src);
  r.dst_node = std::move(dst);
  r.src_port = port;
  r.flow_id = port % 100;
  r.rtt_ns = rtt;
  r.lost = lost;
  return r;
}

TEST(PairTableTest, BatchCreatesPairsWithPathClassesAndFlows) {
  FakeClock clock;
  PairTable table(clock, SmallMap());
  std::vector<ReportedProbe> batch = {
      Result("a", "b", 40000, 20'000), Result("a", "c", 40001, 60'000),
      Result("a", "c", 40002, 61'000, true), Result("a", "x", 40003, 70'000)};
  table.RecordBatch(batch);
  EXPECT_EQ(table.PairCount(), 3u);
  std::map<std::string, PathClass> classes;
  std::map<std::string, size_t> flows;
  table.ForEachPairFrom("a", [&](const PairView& v) {
    classes[std::string(v.dst)] = v.path_class;
    flows[std::string(v.dst)] = v.flows.size();
    if (v.dst == "c") {
      const auto s = v.windows.Snapshot(clock.MonotonicNanos(), Window::k10s);
      EXPECT_EQ(s.probes, 2u);
      EXPECT_DOUBLE_EQ(s.loss_ratio, 0.5);
    }
  });
  EXPECT_EQ(classes["b"], PathClass::kIntraLeaf);
  EXPECT_EQ(classes["c"], PathClass::kInterLeaf);
  EXPECT_EQ(classes["x"], PathClass::kUnknown);  // not in the map
  EXPECT_EQ(flows["c"], 2u);
  EXPECT_THAT(table.SourceNodes(), UnorderedElementsAre("a"));
}

// A late result (ReportedProbe::late) takes back the flow's newest recorded loss, in an earlier
// second too, and adds its round trip, not a probe; the pair's windows keep the loss.
TEST(PairTableTest, ALateEchoTakesBackTheFlowsLoss) {
  FakeClock clock;
  clock.Advance(std::chrono::seconds(100));
  PairTable table(clock, SmallMap());
  std::vector<ReportedProbe> batch = {Result("a", "c", 40001, 0, true),
                                      Result("a", "c", 40001, 0, true)};
  table.RecordBatch(batch);
  clock.Advance(std::chrono::milliseconds(1200));
  ReportedProbe late = Result("a", "c", 40001, 400'000'000);
  late.late = true;
  std::vector<ReportedProbe> one = {late};
  table.RecordBatch(one);
  int seen = 0;
  table.ForEachPairFrom("a", [&](const PairView& v) {
    ASSERT_EQ(v.flows.size(), 1u);
    uint32_t probes = 0, lost = 0;
    for (const FlowSlot& slot : v.flows[0].slots) {
      probes += slot.probes;
      lost += slot.lost;
    }
    EXPECT_EQ(probes, 2u);  // the two probes sent, not a third for the echo
    EXPECT_EQ(lost, 1u);    // one of the two answered after all
    const auto w = v.windows.Snapshot(clock.MonotonicNanos(), Window::k10s);
    EXPECT_EQ(w.probes, 2u);
    EXPECT_EQ(w.rtt_samples, 1u);
    ++seen;
  });
  EXPECT_EQ(seen, 1);
}

// A flow's run of losses counts the lost probes recorded since its last answered one, in arrival
// order: an answer, or a late echo that takes a loss back, ends it; so does a window that emptied.
TEST(PairTableTest, AFlowsLostRunCountsLossesSinceItsLastAnswer) {
  FakeClock clock;
  clock.Advance(std::chrono::seconds(100));
  PairTable table(clock, SmallMap());
  auto run = [&] {
    uint32_t out = 999;
    table.ForEachPairFrom("a", [&](const PairView& v) { out = v.flows.at(0).lost_run; });
    return out;
  };
  auto record = [&](std::vector<ReportedProbe> batch) { table.RecordBatch(batch); };
  record({Result("a", "c", 40001, 400'000), Result("a", "c", 40001, 0, true)});
  EXPECT_EQ(run(), 1u);
  record({Result("a", "c", 40001, 0, true), Result("a", "c", 40001, 0, true)});
  EXPECT_EQ(run(), 3u);
  ReportedProbe late = Result("a", "c", 40001, 400'000'000);
  late.late = true;
  record({late});  // the newest loss was answered after all
  EXPECT_EQ(run(), 0u);
  record({Result("a", "c", 40001, 0, true), Result("a", "c", 40001, 0, true)});
  EXPECT_EQ(run(), 2u);
  record({Result("a", "c", 40001, 400'000)});
  EXPECT_EQ(run(), 0u);
  for (int i = 0; i < 300; ++i) record({Result("a", "c", 40001, 0, true)});
  EXPECT_EQ(run(), 255u);  // saturates
  clock.Advance(std::chrono::seconds(FlowSeen::kSlots + 1));
  record({Result("a", "c", 40001, 0, true)});  // the old run left the window with its seconds
  EXPECT_EQ(run(), 1u);
}

TEST(PairTableTest, TransportsArePairsOfTheirOwn) {
  FakeClock clock;
  PairTable table(clock, nullptr);
  const PairHandle udp = table.Resolve("a", "b", Transport::kUdp).value();
  const PairHandle bw = table.Resolve("a", "b", Transport::kTcpBw).value();
  const PairHandle again = table.Resolve("a", "b", Transport::kUdp).value();
  EXPECT_EQ(udp.index, again.index);
  EXPECT_NE(udp.index, bw.index);
  EXPECT_TRUE(
      table.Record(bw, ProbeSample{false, 5'000'000, 8e9}, 5000, 0, clock.MonotonicNanos()));
  table.ForEachPair([&](const PairView& v) {
    EXPECT_EQ(v.path_class, PathClass::kUnknown);  // no map
    const auto s = v.windows.Snapshot(clock.MonotonicNanos(), Window::k600s);
    if (v.transport == Transport::kTcpBw) {
      EXPECT_DOUBLE_EQ(s.bandwidth_bps, 8e9);
    } else {
      EXPECT_EQ(s.probes, 0u);
    }
  });
}

TEST(PairTableTest, DropIdleFreesPairsAndInvalidatesHandles) {
  FakeClock clock;
  PairTable table(clock, nullptr);
  const PairHandle old = table.Resolve("a", "b", Transport::kUdp).value();
  ASSERT_TRUE(table.Record(old, ProbeSample{false, 10'000, 0}, 1, 1, clock.MonotonicNanos()));
  clock.Advance(std::chrono::seconds(300));
  table.Record(Result("c", "d", 7, 10'000));
  clock.Advance(std::chrono::seconds(400));
  EXPECT_EQ(table.DropIdle(clock.MonotonicNanos()), 1u);  // a→b idle for 700 s; c→d for 400 s
  EXPECT_EQ(table.PairCount(), 1u);
  EXPECT_FALSE(table.Record(old, ProbeSample{false, 10'000, 0}, 1, 1, clock.MonotonicNanos()));
  // Re-creating the pair reuses the slot with a new generation.
  const PairHandle fresh = table.Resolve("a", "b", Transport::kUdp).value();
  EXPECT_NE(fresh.generation, old.generation);
  EXPECT_TRUE(table.Record(fresh, ProbeSample{false, 10'000, 0}, 1, 1, clock.MonotonicNanos()));
  EXPECT_TRUE(table.SourceNodes().size() == 2u);
}

TEST(PairTableTest, FullTableAndUnknownTransportsAreRejectedAndCounted) {
  FakeClock clock;
  PairTable table(clock, nullptr, /*max_pairs=*/2);
  std::vector<ReportedProbe> batch = {Result("a", "b", 1, 10'000), Result("a", "c", 1, 10'000),
                                      Result("a", "made-up", 1, 10'000),
                                      Result("a", "b", 2, 10'000)};
  batch.push_back(Result("a", "b", 3, 10'000));
  batch.back().transport = static_cast<Transport>(200);  // a bad value from a wire conversion
  EXPECT_EQ(table.RecordBatch(batch), 3u);
  EXPECT_EQ(table.Rejected(), 2u);
  EXPECT_EQ(table.PairCount(), 2u);
  EXPECT_FALSE(table.Resolve("x", "y", Transport::kUdp).has_value());
  EXPECT_FALSE(table.Resolve("a", "b", static_cast<Transport>(6)).has_value());
  // Dropping idle pairs makes room again.
  clock.Advance(std::chrono::seconds(700));
  EXPECT_EQ(table.DropIdle(clock.MonotonicNanos()), 2u);
  EXPECT_TRUE(table.Record(Result("x", "y", 1, 10'000)));
}

TEST(PairTableTest, FlowListIsBoundedAndKeepsTheRecentFlows) {
  FakeClock clock;
  PairTable table(clock, nullptr);
  for (uint16_t port = 1; port <= PairTable::kMaxFlowsPerPair + 10; ++port) {
    table.Record(Result("a", "b", port, 10'000));
    clock.Advance(std::chrono::seconds(1));
  }
  table.ForEachPair([&](const PairView& v) {
    EXPECT_EQ(v.flows.size(), PairTable::kMaxFlowsPerPair);
    for (const FlowSeen& f : v.flows) EXPECT_GT(f.src_port, 10);  // the 10 oldest were replaced
  });
}

TEST(PairTableTest, ConcurrentBatchesFromManyAgentsLoseNothing) {
  FakeClock clock;
  PairTable table(clock, nullptr);
  constexpr int kThreads = 4, kBatches = 200, kPerBatch = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&table, t] {
      for (int b = 0; b < kBatches; ++b) {
        std::vector<ReportedProbe> batch;
        for (int i = 0; i < kPerBatch; ++i) {
          batch.push_back(Result("n" + std::to_string(t * 10 + b % 10), "d" + std::to_string(i % 7),
                                 static_cast<uint16_t>(i), 20'000));
        }
        table.RecordBatch(batch);
      }
    });
  }
  for (auto& th : threads) th.join();
  uint64_t probes = 0;
  table.ForEachPair([&](const PairView& v) {
    probes += v.windows.Snapshot(clock.MonotonicNanos(), Window::k10s).probes;
  });
  EXPECT_EQ(probes, static_cast<uint64_t>(kThreads) * kBatches * kPerBatch);
  EXPECT_EQ(table.PairCount(), static_cast<size_t>(kThreads) * 10 * 7);
}

// RecordBatch remembers where each position of a source's last batch went; a batch in another
// order, or after its pair was dropped, must still land in the right pair.
TEST(PairTableTest, RepeatedBatchesLandInTheRightPairsWhateverTheOrder) {
  FakeClock clock;
  PairTable table(clock, SmallMap());
  const std::vector<ReportedProbe> ab = {Result("a", "b", 40000, 20'000),
                                         Result("a", "c", 40001, 60'000)};
  const std::vector<ReportedProbe> ba = {Result("a", "c", 40001, 61'000),
                                         Result("a", "b", 40000, 21'000),
                                         Result("a", "c", 40002, 62'000, true)};
  EXPECT_EQ(table.RecordBatch(ab), 2u);
  EXPECT_EQ(table.RecordBatch(ab), 2u);
  EXPECT_EQ(table.RecordBatch(ba), 3u);
  std::map<std::string, WindowStats> stats;
  table.ForEachPairFrom("a", [&](const PairView& v) {
    stats[std::string(v.dst)] = v.windows.Snapshot(clock.MonotonicNanos(), Window::k10s);
  });
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats["b"].probes, 3u);
  EXPECT_EQ(stats["c"].probes, 4u);
  EXPECT_EQ(stats["c"].lost, 1u);

  // Both pairs expire; the same batch then recreates them instead of writing into freed slots.
  clock.Advance(std::chrono::seconds(700));
  EXPECT_EQ(table.DropIdle(clock.MonotonicNanos()), 2u);
  EXPECT_EQ(table.PairCount(), 0u);
  EXPECT_EQ(table.RecordBatch(ab), 2u);
  EXPECT_EQ(table.PairCount(), 2u);
  table.ForEachPairFrom("a", [&](const PairView& v) {
    EXPECT_EQ(v.windows.Snapshot(clock.MonotonicNanos(), Window::k10s).probes, 1u) << v.dst;
  });
}

// Ingest hands the table ids of its interner instead of names; they must land in the same pairs
// as names do, and a shared interner gives both tables the same ids.
TEST(PairTableTest, ResultsByIdLandWhereResultsByNameDo) {
  FakeClock clock;
  auto names = std::make_shared<NameInterner>();
  PairTable table(clock, SmallMap(), PairTable::kDefaultMaxPairs, names);
  EXPECT_EQ(table.names(), names);
  ReportedProbe by_name = Result("a", "c", 40001, 60'000);
  ReportedProbe by_id = Result("", "", 40001, 61'000);
  by_id.src_id = names->Intern("a");
  by_id.dst_id = names->Intern("c");
  EXPECT_EQ(table.RecordBatch(std::vector<ReportedProbe>{by_name}), 1u);
  EXPECT_EQ(table.RecordBatch(std::vector<ReportedProbe>{by_id, by_id}), 2u);
  EXPECT_EQ(table.PairCount(), 1u);
  int visited = 0;
  table.VisitPair("a", "c", Transport::kUdp, [&](const PairView& v) {
    ++visited;
    EXPECT_EQ(v.path_class, PathClass::kInterLeaf);
    EXPECT_EQ(v.windows.Snapshot(clock.MonotonicNanos(), Window::k10s).probes, 3u);
  });
  EXPECT_EQ(visited, 1);
}

// A source's rows differ from batch to batch (plans with fractional rates send other flows each
// time), so the positional cache misses: every result must still land in its own pair and flow,
// found through the source's index, also after its pairs were dropped and recreated.
TEST(PairTableTest, BatchesWithOtherRowsEachTimeLandInTheRightPairs) {
  FakeClock clock;
  PairTable table(clock, SmallMap());
  const std::vector<std::vector<ReportedProbe>> batches = {
      {Result("a", "b", 40000, 20'000), Result("a", "c", 40001, 60'000)},
      {Result("a", "c", 40001, 61'000)},
      {Result("a", "c", 40002, 62'000, true), Result("a", "b", 40000, 21'000),
       Result("a", "c", 40001, 63'000)},
      {Result("a", "b", 40000, 22'000)},
  };
  auto probes = [&] {
    std::map<std::string, uint64_t> n;
    table.ForEachPairFrom("a", [&](const PairView& v) {
      n[std::string(v.dst)] = v.windows.Snapshot(clock.MonotonicNanos(), Window::k10s).probes;
      for (const FlowSeen& f : v.flows) EXPECT_EQ(f.flow_id, f.src_port % 100) << v.dst;
    });
    return n;
  };
  for (const auto& b : batches) EXPECT_EQ(table.RecordBatch(b), b.size());
  EXPECT_EQ(probes(), (std::map<std::string, uint64_t>{{"b", 3}, {"c", 4}}));
  EXPECT_EQ(table.PairCount(), 2u);

  clock.Advance(std::chrono::seconds(700));
  EXPECT_EQ(table.DropIdle(clock.MonotonicNanos()), 2u);
  for (const auto& b : batches) EXPECT_EQ(table.RecordBatch(b), b.size());
  EXPECT_EQ(probes(), (std::map<std::string, uint64_t>{{"b", 3}, {"c", 4}}));
  EXPECT_EQ(table.PairCount(), 2u);
}

}  // namespace
}  // namespace fw::aggregator
