// FlowTable ingest: results by id and by name, repeated batches in another order, expiry.
#include "daemon/aggregator/analysis/flow_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "daemon/aggregator/analysis/testing/blame_fixture.h"

namespace fw::analysis {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

ReportedProbe Named(std::string src, std::string dst, uint16_t port, bool lost = false) {
  ReportedProbe r;
  r.src_node = std::move(src);
  r.dst_node = std::move(dst);
  r.src_port = port;
  r.flow_id = port % 100;
  r.rtt_ns = 20'000;
  r.lost = lost;
  return r;
}

ReportedProbe ById(NodeId src, NodeId dst, uint16_t port, bool lost = false) {
  ReportedProbe r = Named("", "", port, lost);
  r.src_id = src;
  r.dst_id = dst;
  return r;
}

// (dst name, src port) → (probes, lost) in the short window.
using Counts = std::map<std::pair<std::string, uint16_t>, std::pair<uint32_t, uint32_t>>;

class Collect final : public FlowTable::Visitor {
 public:
  explicit Collect(const FlowTable& table) : table_(table) {}
  void BeginPair(const PairRef&) override {}
  void Flow(const PairRef& pair, const FlowRef& flow, const FlowWindow& w) override {
    counts[{table_.NodeName(pair.dst), flow.src_port}] = {w.probes, w.lost};
  }
  void EndPair(const PairRef&) override {}
  Counts counts;

 private:
  const FlowTable& table_;
};

Counts Scan(FlowTable& table, int64_t now_ns) {
  Collect c(table);
  table.Scan(now_ns, c);
  return c.counts;
}

TEST(FlowTableTest, ResultsByIdAndByNameLandInTheSameFlows) {
  auto names = std::make_shared<aggregator::NameInterner>();
  FlowTable table(nullptr, {}, 10, names);
  const NodeId a = names->Intern("a"), b = names->Intern("b");
  table.Ingest(std::vector<ReportedProbe>{Named("a", "b", 40000)}, 5 * kSecond);
  table.Ingest(std::vector<ReportedProbe>{ById(a, b, 40000, true), ById(a, b, 40001)}, 5 * kSecond);
  EXPECT_EQ(table.PairCount(), 1u);
  EXPECT_EQ(table.FlowCount(), 2u);
  const Counts c = Scan(table, 6 * kSecond);
  EXPECT_EQ(c.at({"b", 40000}), std::make_pair(2u, 1u));
  EXPECT_EQ(c.at({"b", 40001}), std::make_pair(1u, 0u));
}

// Flow ids are per NIC pair (each its own plan entry): FlowRef::nic_flows counts the flows of the
// flow's own NIC pair, not the node pair's. a's e0 -> b's e0 has 3 flows, e1 -> e1 2, with the
// same ids and ports (a leaf-per-host fabric).
TEST(FlowTableTest, EachFlowKnowsTheFlowsOfItsNicPair) {
  FlowTable table(testing::LeafPerHostMap(), {}, 10);
  std::vector<ReportedProbe> batch;
  for (const auto& [nic, flows] : {std::pair{"e0", 3}, std::pair{"e1", 2}}) {
    for (int i = 0; i < flows; ++i) {
      ReportedProbe r = Named("a", "b", static_cast<uint16_t>(40000 + i));
      r.src_nic = r.dst_nic = nic;
      batch.push_back(r);
    }
  }
  table.Ingest(batch, 5 * kSecond);
  ASSERT_EQ(table.FlowCount(), 5u);
  std::map<std::string, std::vector<uint32_t>> nic_flows;  // by src access link's NIC
  table.ScanFrom(*table.FindNode("a"), 6 * kSecond,
                 [&](const PairRef&, const FlowRef& f, const FlowWindow&) {
                   nic_flows[std::to_string(f.paths->src_access)].push_back(f.nic_flows);
                 });
  ASSERT_EQ(nic_flows.size(), 2u);
  std::multiset<std::vector<uint32_t>> got;
  for (const auto& [nic, counts] : nic_flows) got.insert(counts);
  EXPECT_EQ(got, (std::multiset<std::vector<uint32_t>>{{2, 2}, {3, 3, 3}}));
  struct Visitor final : FlowTable::Visitor {
    void BeginPair(const PairRef&) override {}
    void Flow(const PairRef& pair, const FlowRef& f, const FlowWindow&) override {
      EXPECT_EQ(pair.flows, 5u);
      sum += f.nic_flows;
    }
    void EndPair(const PairRef&) override {}
    uint32_t sum = 0;
  } v;
  table.Scan(6 * kSecond, v);
  EXPECT_EQ(v.sum, 3u * 3 + 2u * 2);
}

// Ingest remembers where each position of a source's last batch went; a batch in another order,
// with other flows, or after the pairs expired must still land in the right flows.
TEST(FlowTableTest, RepeatedBatchesLandInTheRightFlowsWhateverTheOrder) {
  auto names = std::make_shared<aggregator::NameInterner>();
  FlowTable table(nullptr, {}, 10, names);
  const NodeId a = names->Intern("a"), b = names->Intern("b"), c = names->Intern("c");
  const std::vector<ReportedProbe> first = {ById(a, b, 40000), ById(a, c, 40001)};
  const std::vector<ReportedProbe> other = {ById(a, c, 40001, true), ById(a, b, 40000),
                                            ById(a, b, 40002), ById(a, c, 40001)};
  table.Ingest(first, 1 * kSecond);
  table.Ingest(first, 2 * kSecond);
  table.Ingest(other, 3 * kSecond);
  table.Ingest(first, 4 * kSecond);
  Counts counts = Scan(table, 5 * kSecond);
  EXPECT_EQ(counts.size(), 3u);
  EXPECT_EQ(counts.at({"b", 40000}), std::make_pair(4u, 0u));
  EXPECT_EQ(counts.at({"b", 40002}), std::make_pair(1u, 0u));
  EXPECT_EQ(counts.at({"c", 40001}), std::make_pair(5u, 1u));

  // Everything expires; the same batch then recreates the pairs instead of using freed slots.
  EXPECT_EQ(table.DropIdle(700 * kSecond), 2u);
  EXPECT_EQ(table.PairCount(), 0u);
  const std::vector<ReportedProbe> c_only = {ById(a, c, 40001)};
  table.Ingest(c_only, 700 * kSecond);
  table.Ingest(first, 701 * kSecond);
  counts = Scan(table, 702 * kSecond);
  EXPECT_EQ(table.PairCount(), 2u);
  EXPECT_EQ(counts.at({"b", 40000}), std::make_pair(1u, 0u));
  EXPECT_EQ(counts.at({"c", 40001}), std::make_pair(2u, 0u));
}

// The fresh counts are the two complete seconds before the tick's second and what the tick's own
// second holds so far; the recent and last counts, which read seconds, keep to complete ones.
TEST(FlowTableTest, FreshCountsHoldTheTicksOwnSecondSoFar) {
  auto names = std::make_shared<aggregator::NameInterner>();
  FlowTable table(nullptr, {}, 10, names);
  names->Intern("a");
  names->Intern("b");
  auto at = [&](int64_t ns, bool lost) {
    table.Ingest(std::vector<ReportedProbe>{Named("a", "b", 40000, lost)}, ns);
  };
  at(2 * kSecond, true);                // older than the fresh seconds
  at(3 * kSecond + kSecond / 2, true);  // the two complete seconds before the tick's
  at(4 * kSecond + kSecond / 2, false);
  at(5 * kSecond + kSecond / 10, true);  // the tick's own second, before the tick
  at(5 * kSecond + kSecond / 5, true);
  struct Fresh final : FlowTable::Visitor {
    void BeginPair(const PairRef&) override {}
    void Flow(const PairRef&, const FlowRef&, const FlowWindow& w) override { last = w; }
    void EndPair(const PairRef&) override {}
    FlowWindow last;
  } v;
  table.Scan(5 * kSecond + kSecond / 2, v);
  EXPECT_EQ(v.last.probes, 5u);
  EXPECT_EQ(v.last.lost, 4u);
  EXPECT_EQ(v.last.recent_probes, 2u);
  EXPECT_EQ(v.last.recent_lost, 1u);
  EXPECT_EQ(v.last.last_probes, 1u);
  EXPECT_EQ(v.last.last_lost, 0u);
  EXPECT_EQ(v.last.fresh_probes, 4u);
  EXPECT_EQ(v.last.fresh_lost, 3u);
  // The tick's own second's probes were lost: no RTT sample beyond the complete seconds'.
  EXPECT_EQ(v.last.fresh_rtt, v.last.recent_rtt);
  EXPECT_EQ(v.last.fresh_slow, v.last.recent_slow);
}

// A flow's window read second by second from its slots, the plain way: what FlowTable::Scan must
// hand out for it at `now_s` (FlowWindow's definitions; the bandwidth fields aside).
FlowWindow ReferenceWindow(const aggregator::FlowSeen& f, uint32_t now_s) {
  FlowWindow w;
  constexpr uint32_t kSlots = aggregator::FlowSeen::kSlots;
  if (f.last_s == 0 || f.last_s + kSlots <= now_s) return w;
  // The slots hold the kSlots seconds up to the later of now_s and the flow's last second; the
  // window ends at the earlier of the two.
  const uint32_t top = std::max(now_s, f.last_s);
  uint32_t ratio_q = 0;
  for (uint32_t sec = 1; sec <= std::min(now_s, f.last_s); ++sec) {
    if (sec + kSlots <= top) continue;
    const aggregator::FlowSlot& s = f.slots[sec % kSlots];
    w.probes += s.probes;
    w.lost += s.lost;
    w.rtt += s.judged;
    w.slow += s.slow;
    ratio_q += s.ratio_q;
    if (sec + 2 >= now_s) {  // fresh: the two complete seconds and now_s so far
      w.fresh_probes += s.probes;
      w.fresh_lost += s.lost;
      w.fresh_rtt += s.judged;
      w.fresh_slow += s.slow;
      if (sec < now_s) {  // recent: the two complete ones
        w.recent_probes += s.probes;
        w.recent_lost += s.lost;
        w.recent_rtt += s.judged;
        w.recent_slow += s.slow;
      }
      if (sec + 1 == now_s) {  // last: the one complete second
        w.last_probes = s.probes;
        w.last_lost = s.lost;
      }
    }
  }
  w.ratio_sum = ratio_q / aggregator::FlowSeen::kRatioScale;
  w.lost_run = f.lost_run;
  return w;
}

// Randomized ticks: flows that appear, go silent for a while, expire, come back, and escalated
// flows with many probes a second; ticks at any point of a second, some before the last results
// (the tick's clock read before ingest's). Every window the scan hands out equals the reference
// reading of the flow's slots, and every flow with probes in its window is handed out.
TEST(FlowTableWindows, ScanMatchesASecondBySecondReadingOverRandomTicks) {
  aggregator::PairTable store(RealClock::Get(), nullptr);
  FlowTable table(store, {}, 10);
  std::mt19937 rng(20261207);
  auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  struct Flow {
    std::string src, dst;
    uint16_t port = 0;
    int mode = 0;  // 0 silent, 1 one probe a second, 2 escalated (several a second)
  };
  std::vector<Flow> flows;
  for (int i = 0; i < 60; ++i) {
    flows.push_back({"n" + std::to_string(pick(5)), "m" + std::to_string(pick(6)),
                     static_cast<uint16_t>(40000 + pick(8)), static_cast<int>(pick(3))});
  }
  bool baselines_set = false;
  size_t compared = 0;
  for (uint32_t sec = 1; sec <= 120; ++sec) {
    for (Flow& f : flows) {
      if (pick(10) == 0) f.mode = static_cast<int>(pick(3));  // goes silent, resumes, escalates
    }
    // Results arrive in a few batches over the second.
    for (int part = 0; part < 3; ++part) {
      std::vector<ReportedProbe> batch;
      for (const Flow& f : flows) {
        const uint32_t n = f.mode == 0 ? 0 : f.mode == 1 ? (part == 1) : pick(12);
        for (uint32_t k = 0; k < n; ++k) {
          ReportedProbe r = Named(f.src, f.dst, f.port, pick(7) == 0);
          r.rtt_ns = r.lost ? 0 : 10'000 + pick(50'000);
          batch.push_back(r);
        }
      }
      const int64_t at = int64_t{sec} * kSecond + part * (kSecond / 3) + pick(1000);
      if (!batch.empty()) store.RecordBatch(batch, at);
    }
    if (!baselines_set && sec == 3) {  // RTTs judged from here on: slow samples and ratios
      table.ForEachPair([](const PairRef& p) {
        p.baseline.reference_s = 20e-6f;
        p.baseline.slow_threshold_s = 40e-6f;
      });
      baselines_set = true;
    }
    // A tick at a random point of this second, or of the one before (ingest ran ahead of it).
    const int64_t tick_ns = int64_t{sec - (pick(4) == 0 ? 1 : 0)} * kSecond + pick(1'000'000'000);
    const uint32_t now_s = aggregator::FlowSecond(tick_ns);
    std::map<std::tuple<std::string, std::string, uint16_t, uint32_t>, FlowWindow> scanned;
    struct Collect final : FlowTable::Visitor {
      FlowTable* t = nullptr;
      std::map<std::tuple<std::string, std::string, uint16_t, uint32_t>, FlowWindow>* out;
      void BeginPair(const PairRef&) override {}
      void Flow(const PairRef& p, const FlowRef& f, const FlowWindow& w) override {
        (*out)[{t->NodeName(p.src), t->NodeName(p.dst), f.src_port, f.flow_id}] = w;
      }
      void EndPair(const PairRef&) override {}
    } collect;
    collect.t = &table;
    collect.out = &scanned;
    table.Scan(tick_ns, collect);
    size_t expected_flows = 0;
    store.ForEachPair([&](const aggregator::PairView& p) {
      for (const aggregator::FlowSeen& f : p.flows) {
        const FlowWindow want = ReferenceWindow(f, now_s);
        const auto key =
            std::make_tuple(std::string(p.src), std::string(p.dst), f.src_port, f.flow_id);
        if (want.probes == 0) {
          EXPECT_FALSE(scanned.contains(key)) << "second " << sec;
          continue;
        }
        ++expected_flows;
        auto it = scanned.find(key);
        ASSERT_TRUE(it != scanned.end()) << "second " << sec;
        const FlowWindow& got = it->second;
        SCOPED_TRACE(::testing::Message()
                     << "second " << sec << " now_s " << now_s << " last_s " << f.last_s << " "
                     << p.src << "->" << p.dst << ":" << f.src_port);
        EXPECT_EQ(got.probes, want.probes);
        EXPECT_EQ(got.lost, want.lost);
        EXPECT_EQ(got.rtt, want.rtt);
        EXPECT_EQ(got.slow, want.slow);
        EXPECT_EQ(got.ratio_sum, want.ratio_sum);
        EXPECT_EQ(got.recent_probes, want.recent_probes);
        EXPECT_EQ(got.recent_lost, want.recent_lost);
        EXPECT_EQ(got.recent_rtt, want.recent_rtt);
        EXPECT_EQ(got.recent_slow, want.recent_slow);
        EXPECT_EQ(got.last_probes, want.last_probes);
        EXPECT_EQ(got.last_lost, want.last_lost);
        EXPECT_EQ(got.fresh_probes, want.fresh_probes);
        EXPECT_EQ(got.fresh_lost, want.fresh_lost);
        EXPECT_EQ(got.fresh_rtt, want.fresh_rtt);
        EXPECT_EQ(got.fresh_slow, want.fresh_slow);
        EXPECT_EQ(got.lost_run, want.lost_run);
        ++compared;
      }
    });
    EXPECT_EQ(scanned.size(), expected_flows) << "second " << sec;
  }
  // The run covered full windows, partial ones (flows silent for a while) and expired ones.
  EXPECT_GT(compared, 3000u);
}

}  // namespace
}  // namespace fw::analysis
