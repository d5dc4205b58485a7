// FlowTable ingest: results by id and by name, repeated batches in another order, expiry.
#include "daemon/aggregator/analysis/flow_table.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
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

}  // namespace
}  // namespace fw::analysis
