// Batch filling: correct static fields, and no reallocation once built.
#include "tests/sim/batch_builder.h"

#include <gtest/gtest.h>

namespace fw::sim {
namespace {

TEST(BatchBuilderTest, BuildsOnceThenRewritesInPlace) {
  Scenario sc;
  sc.topology = {.spines = 2, .leaves = 4, .hosts_per_leaf = 8};
  auto tree = FatTree::Build(sc.topology);
  ASSERT_TRUE(tree.ok());
  auto plan = BuildFlowPlan(*tree, {.inter_leaf_flows = 4});
  FabricModel model(*tree, sc);
  model.Advance(0);
  BatchBuilder builder(*tree, model, 2);
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
  model.Advance(1);
  builder.Fill(flows, 1, 1'000'000'001'000, rng, batch);
  EXPECT_EQ(&batch.results(0), results_before);
  EXPECT_EQ(batch.results(3).peer().data(), peer_before);
  // The bandwidth slot moved to other flows: same buffers, new contents.
  EXPECT_EQ(batch.results(static_cast<int>(flows.size())).peer().data(), bw_peer_before);
  EXPECT_EQ(batch.results(static_cast<int>(flows.size())).src_port(), flows[2].src_port);
  EXPECT_EQ(batch.results(0).probe_seq(), 1u);
}

}  // namespace
}  // namespace fw::sim
