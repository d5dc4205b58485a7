// Agent delivery: results reach the aggregator no sooner than a real agent's would.
#include "tests/sim/delivery.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tests/sim/batch_builder.h"

namespace fw::sim {
namespace {

TEST(SendInstants, FollowTheFlowsGridInsideTheWindow) {
  std::vector<double> at;
  EXPECT_EQ(SendInstants(1.0, 0.25, 0.0, 1.0, &at), 1);
  ASSERT_EQ(at.size(), 1u);
  EXPECT_DOUBLE_EQ(at[0], 0.25);
  at.clear();
  // The window's start counts, its end does not.
  EXPECT_EQ(SendInstants(1.0, 0.25, 1.25, 2.25, &at), 1);
  EXPECT_DOUBLE_EQ(at[0], 1.25);
  at.clear();
  EXPECT_EQ(SendInstants(10.0, 0.0, 0.0, 0.5, &at), 5);
  EXPECT_DOUBLE_EQ(at.back(), 0.4);
  at.clear();
  EXPECT_EQ(SendInstants(0.0, 0.5, 0.0, 10.0, &at), 0);
  // A fractional rate: 0.4/s sends every 2.5 s.
  EXPECT_EQ(SendInstants(0.4, 0.0, 0.0, 10.0, &at), 4);
}

TEST(SendInstants, WindowsOfASecondAddUpToTheRate) {
  for (double rate : {1.0, 3.7, 10.0, 0.4}) {
    std::vector<double> at;
    int n = 0;
    for (int k = 0; k < 20 * 10; ++k) n += SendInstants(rate, 0.3, k / 20.0, (k + 1) / 20.0, &at);
    EXPECT_NEAR(n, rate * 10, 1.0) << rate;
    for (size_t i = 1; i < at.size(); ++i) EXPECT_GT(at[i], at[i - 1]);
  }
}

HeldResult Result(double sent, bool lost, bool urgent, double rtt_s = 20e-6) {
  HeldResult h;
  h.sent_s = sent;
  h.lost = lost;
  h.urgent = urgent || lost;
  h.ready_s = sent + (lost ? kProbeTimeoutS : rtt_s);
  return h;
}

TEST(Outbox, ALostProbeWaitsForTheTimeoutThenGoesAtOnce) {
  Outbox box;
  box.Hold(Result(12.125, /*lost=*/true, false));
  // Its loss is not known before the timeout, whatever the batch cadence.
  EXPECT_FALSE(box.Due(12.95, /*regular=*/true));
  EXPECT_FALSE(box.Due(13.0, false));
  // Known at 13.125: urgent, sent without waiting for the report interval.
  EXPECT_TRUE(box.Due(13.125, false));
  std::vector<HeldResult> out;
  box.TakeReady(13.0, &out);
  EXPECT_TRUE(out.empty());
  box.TakeReady(13.125, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(box.held(), 0u);
}

// A lost probe is ready one of its own flow's timeouts after it was sent: an escalated flow's
// 250 ms one goes out (urgent) at sent + 0.25, a base flow's waits for the agent's 1 s. An echo
// slower than the flow's timeout is a lost probe too (the agent counts the reply late).
TEST(LatencyResult, ALostProbeIsReadyAtItsOwnFlowsTimeout) {
  const HeldResult dense = LatencyResult(nullptr, 12.125, /*lost=*/true, 0, 0.25, /*raised=*/true);
  EXPECT_TRUE(dense.lost);
  EXPECT_TRUE(dense.urgent);
  EXPECT_DOUBLE_EQ(dense.ready_s, 12.375);
  const HeldResult base = LatencyResult(nullptr, 12.125, true, 0, kProbeTimeoutS, false);
  EXPECT_TRUE(base.urgent);
  EXPECT_DOUBLE_EQ(base.ready_s, 13.125);
  Outbox box;
  box.Hold(base);
  box.Hold(dense);
  EXPECT_FALSE(box.Due(12.37, false));
  EXPECT_TRUE(box.Due(12.375, false));
  std::vector<HeldResult> out;
  box.TakeReady(12.375, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_DOUBLE_EQ(out[0].ready_s, 12.375);
  box.Sent(12.375);
  EXPECT_EQ(box.held(), 1u);  // the base flow's loss, not known yet
  EXPECT_FALSE(box.Due(13.0, true));
  EXPECT_TRUE(box.Due(13.125, false));

  // Answered within the timeout: ready at its echo, urgent only when raised.
  const HeldResult quick = LatencyResult(nullptr, 5.0, false, 2'000'000, 0.25, false);
  EXPECT_FALSE(quick.lost);
  EXPECT_FALSE(quick.urgent);
  EXPECT_EQ(quick.rtt_ns, 2'000'000u);
  EXPECT_DOUBLE_EQ(quick.ready_s, 5.002);
  // An echo after 300 ms: answered under the 1 s timeout, lost at sent + 0.25 under 250 ms.
  const HeldResult slow_base = LatencyResult(nullptr, 5.0, false, 300'000'000, 1.0, false);
  EXPECT_FALSE(slow_base.lost);
  EXPECT_DOUBLE_EQ(slow_base.ready_s, 5.3);
  const HeldResult slow_dense = LatencyResult(nullptr, 5.0, false, 300'000'000, 0.25, true);
  EXPECT_TRUE(slow_dense.lost);
  EXPECT_EQ(slow_dense.rtt_ns, 0u);
  EXPECT_DOUBLE_EQ(slow_dense.ready_s, 5.25);
}

TEST(Outbox, AnsweredResultsWaitForTheReportInterval) {
  Outbox box;
  box.Hold(Result(12.10, false, false));
  EXPECT_FALSE(box.Due(12.50, false));
  EXPECT_TRUE(box.Due(12.50, true));
  // Not before its echo is back.
  Outbox early;
  early.Hold(Result(12.125, false, false, 0.25));
  EXPECT_FALSE(early.Due(12.25, true));
  EXPECT_TRUE(early.Due(12.375, true));
}

TEST(Outbox, UrgentBatchesKeepTheAgentsGap) {
  Outbox box;
  box.Hold(Result(12.00, false, /*urgent=*/true));
  ASSERT_TRUE(box.Due(12.05, false));
  std::vector<HeldResult> out;
  box.TakeReady(12.05, &out);
  box.Sent(12.05);
  box.Hold(Result(12.10, false, true));
  box.Hold(Result(12.20, false, true));
  EXPECT_FALSE(box.Due(12.15, false));
  EXPECT_FALSE(box.Due(12.25, false));
  EXPECT_TRUE(box.Due(12.30, false));
  // Only what is ready leaves; the rest waits, oldest first when it goes.
  box.Hold(Result(12.40, false, true));
  box.TakeReady(12.30, &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_LT(out[0].sent_s, out[1].sent_s);
  EXPECT_EQ(box.held(), 1u);
  // A refused write keeps them for the next batch.
  box.Return(out);
  EXPECT_EQ(box.held(), 3u);
}

TEST(FillHeld, WritesEachResultWithItsOwnSendTime) {
  Scenario sc;
  sc.topology = {.spines = 2, .leaves = 4, .hosts_per_leaf = 8};
  auto tree = FatTree::Build(sc.topology);
  ASSERT_TRUE(tree.ok());
  auto plan = BuildFlowPlan(*tree, {.inter_leaf_flows = 4});
  FabricModel model(*tree, sc);
  model.Advance(0);
  BatchBuilder builder(*tree, model, 1);
  const auto& flows = plan[9];
  std::vector<HeldResult> held = {Result(3.25, false, false), Result(3.5, true, false)};
  held[0].flow = &flows[0];
  held[0].rtt_ns = 20'000;
  held[1].flow = &flows[1];
  HeldResult burst = Result(3.75, false, false);
  burst.flow = &flows[2];
  burst.bandwidth = true;
  burst.rtt_ns = 400'000;
  burst.goodput_bps = 80e9;
  held.push_back(burst);
  fabricwatch::v1::ProbeBatch batch;
  const int64_t epoch = 1'000'000'000'000;
  builder.FillHeld(held, epoch, batch);
  const auto& c = batch.columns();
  ASSERT_EQ(c.peer_size(), 3);
  int64_t sent = 0;
  std::vector<int64_t> at;
  for (int i = 0; i < 3; ++i) at.push_back(sent += c.sent_unix_ns_delta(i));
  EXPECT_EQ(at[0], epoch + 3'250'000'000);
  EXPECT_EQ(at[1], epoch + 3'500'000'000);
  EXPECT_EQ(at[2], epoch + 3'750'000'000);
  EXPECT_FALSE(c.lost(0));
  EXPECT_EQ(c.rtt_ns(0), 20'000u);
  EXPECT_TRUE(c.lost(1));
  EXPECT_EQ(c.rtt_ns(1), 0u);
  EXPECT_EQ(c.transport(2), fabricwatch::v1::TRANSPORT_TCP_BW);
  EXPECT_EQ(c.bytes(2), BatchBuilder::kBandwidthBytes);
  EXPECT_EQ(c.bytes(0), 0u);
  // The name table holds each name once; the peers' indices resolve to their names.
  size_t off = 0;
  std::vector<std::string> names;
  for (uint32_t len : c.name_lengths()) {
    names.push_back(c.names().substr(off, len));
    off += len;
  }
  EXPECT_EQ(names[c.peer(0)], tree->NodeName(static_cast<int>(flows[0].dst_host)));
  EXPECT_EQ(names[c.src_nic(1)], "mlx5_0");
  // Rewritten whole: a smaller batch after a bigger one holds only its own rows.
  held.resize(1);
  builder.FillHeld(held, epoch, batch);
  EXPECT_EQ(batch.columns().peer_size(), 1);
}

}  // namespace
}  // namespace fw::sim
