// Batch filling: correct static fields, and no reallocation once built.
#include "tests/sim/batch_builder.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace fw::sim {
namespace {

// A 2-spine, 4-leaf, 8-host fat-tree at second 0, and agent 9's flows.
class BatchBuilderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sc.topology = {.spines = 2, .leaves = 4, .hosts_per_leaf = 8};
    auto t = FatTree::Build(sc.topology);
    ASSERT_TRUE(t.ok());
    tree = std::make_unique<FatTree>(std::move(*t));
    plan = BuildFlowPlan(*tree, {.inter_leaf_flows = 4});
    model = std::make_unique<FabricModel>(*tree, sc);
    model->Advance(0);
  }
  Scenario sc;
  std::unique_ptr<FatTree> tree;
  std::vector<std::vector<Flow>> plan;
  std::unique_ptr<FabricModel> model;
};

TEST_F(BatchBuilderTest, BuildsOnceThenRewritesInPlace) {
  BatchBuilder builder(*tree, *model, 2, BatchEncoding::kResults);
  Rng rng(1);
  fabricwatch::v1::ProbeBatch batch;
  const auto& flows = plan[9];
  builder.Fill(flows, 0, 1'000'000'000'000, rng, batch);
  ASSERT_EQ(batch.results_size(), static_cast<int>(flows.size()) + 2);
  const auto& r0 = batch.results(0);
  EXPECT_EQ(r0.peer(), tree->NodeName(static_cast<int>(flows[0].dst_host)));
  EXPECT_EQ(r0.src_nic(), "mlx5_0");
  EXPECT_EQ(r0.transport(), fabricwatch::v1::TRANSPORT_UDP);
  EXPECT_EQ(r0.src_port(), flows[0].src_port);
  EXPECT_EQ(r0.dst_port(), kProbePort);
  EXPECT_EQ(r0.sent_unix_ns(), 1'000'000'000'000);
  const auto& bw = batch.results(static_cast<int>(flows.size()));
  EXPECT_EQ(bw.transport(), fabricwatch::v1::TRANSPORT_TCP_BW);
  EXPECT_GT(bw.goodput_bps(), 1e11);
  EXPECT_EQ(bw.bytes(), BatchBuilder::kBandwidthBytes);

  const void* results_before = &batch.results(0);
  const char* peer_before = batch.results(3).peer().data();
  const char* bw_peer_before = bw.peer().data();
  model->Advance(1);
  builder.Fill(flows, 1, 1'000'000'001'000, rng, batch);
  EXPECT_EQ(&batch.results(0), results_before);
  EXPECT_EQ(batch.results(3).peer().data(), peer_before);
  // The bandwidth slot moved to other flows: same buffers, new contents.
  EXPECT_EQ(batch.results(static_cast<int>(flows.size())).peer().data(), bw_peer_before);
  EXPECT_EQ(batch.results(static_cast<int>(flows.size())).src_port(), flows[2].src_port);
  EXPECT_EQ(batch.results(0).probe_seq(), 1u);
}

TEST_F(BatchBuilderTest, ColumnsCarryTheSameResultsAndAreRewrittenInPlace) {
  BatchBuilder rows(*tree, *model, 2, BatchEncoding::kResults);
  BatchBuilder cols(*tree, *model, 2, BatchEncoding::kColumns);
  const auto& flows = plan[9];
  fabricwatch::v1::ProbeBatch a, b;
  Rng ra(5), rb(5);  // same draws: the two encodings must carry identical values
  rows.Fill(flows, 0, 1'000'000'000'000, ra, a);
  cols.Fill(flows, 0, 1'000'000'000'000, rb, b);
  ASSERT_EQ(b.results_size(), 0);
  ASSERT_EQ(ResultCount(b), ResultCount(a));
  const auto& c = b.columns();
  auto name = [&](uint32_t k) {
    uint32_t off = 0;
    for (uint32_t j = 0; j < k; ++j) off += c.name_lengths(static_cast<int>(j));
    return c.names().substr(off, c.name_lengths(static_cast<int>(k)));
  };
  int64_t sent = 0;
  for (int i = 0; i < ResultCount(a); ++i) {
    const auto& r = a.results(i);
    sent += c.sent_unix_ns_delta(i);
    EXPECT_EQ(name(c.peer(i)), r.peer()) << i;
    EXPECT_EQ(name(c.src_nic(i)), r.src_nic()) << i;
    EXPECT_EQ(c.transport(i), r.transport()) << i;
    EXPECT_EQ(c.src_port(i), r.src_port()) << i;
    EXPECT_EQ(c.flow_id(i), r.flow_id()) << i;
    EXPECT_EQ(c.lost(i), r.lost()) << i;
    EXPECT_EQ(c.rtt_ns(i), r.rtt_ns()) << i;
    EXPECT_EQ(c.goodput_bps(i), r.goodput_bps()) << i;
    EXPECT_EQ(c.cpu_busy_permille(i), r.cpu_busy_permille()) << i;
    EXPECT_EQ(c.cpu_peak_permille(i), r.cpu_peak_permille()) << i;
    if (r.transport() == fabricwatch::v1::TRANSPORT_TCP_BW && !r.lost()) {
      EXPECT_GE(r.cpu_busy_permille(), 200u) << i;  // a healthy prober: 20-40 %
      EXPECT_LE(r.cpu_busy_permille(), 400u) << i;
    }
    EXPECT_EQ(sent, r.sent_unix_ns()) << i;
  }
  // Names appear once each: fewer table entries than rows.
  EXPECT_LT(c.name_lengths_size(), ResultCount(b));

  const uint64_t* rtt_before = c.rtt_ns().data();
  const char* names_before = c.names().data();
  model->Advance(1);
  cols.Fill(flows, 1, 1'000'000'001'000, rb, b);
  EXPECT_EQ(b.columns().rtt_ns().data(), rtt_before);
  EXPECT_EQ(b.columns().names().data(), names_before);
  EXPECT_EQ(b.columns().probe_seq(0), 1u);
  EXPECT_EQ(b.columns().src_port(static_cast<int>(flows.size())), flows[2].src_port);
}

// A flow list that changes at the same length (a plan's fractional rates pick other flows each
// second) gets its own names with a layout key; without one the first list's names stayed.
TEST_F(BatchBuilderTest, ALayoutKeyRebuildsTheNamesOfAnotherListOfTheSameLength) {
  BatchBuilder cols(*tree, *model, 0, BatchEncoding::kColumns);
  const auto& flows = plan[9];
  ASSERT_GE(flows.size(), 4u);
  const std::vector<Flow> first(flows.begin(), flows.begin() + 2);
  const std::vector<Flow> second(flows.end() - 2, flows.end());
  ASSERT_NE(first[0].dst_host, second[0].dst_host);
  fabricwatch::v1::ProbeBatch b;
  Rng rng(3);
  uint64_t layout = 0;
  cols.Fill(first, 0, 1'000'000'000'000, rng, b, 1, &layout);
  const uint64_t first_key = layout;
  cols.Fill(second, 1, 1'000'000'001'000, rng, b, 1, &layout);
  EXPECT_NE(layout, first_key);
  const auto& c = b.columns();
  ASSERT_EQ(c.peer_size(), 2);
  const std::string& peer = tree->NodeName(static_cast<int>(second[0].dst_host));
  EXPECT_EQ(c.names().substr(0, c.name_lengths(static_cast<int>(c.peer(0)))), peer);
  EXPECT_EQ(c.flow_id(1), second[1].flow_id);
  EXPECT_EQ(c.src_port(1), second[1].src_port);
  // The same list again keeps the built fields.
  const char* names_before = c.names().data();
  cols.Fill(second, 2, 1'000'000'002'000, rng, b, 1, &layout);
  EXPECT_EQ(b.columns().names().data(), names_before);
}

}  // namespace
}  // namespace fw::sim
