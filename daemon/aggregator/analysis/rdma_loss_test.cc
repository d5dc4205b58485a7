// RdmaLosses: rdma_ud outcomes per device pair, and the device their lossy pairs share.
#include "daemon/aggregator/analysis/rdma_loss.h"

#include <gtest/gtest.h>

#include <vector>

namespace fw::analysis {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

using aggregator::NodeId;
using aggregator::ReportedProbe;

// `n` probes a second for `seconds` from src to dst, every `lose_every`-th lost (0: none).
void Probe(RdmaLosses& l, NodeId src, NodeId dst, int lose_every, int seconds = 10,
           const std::string& src_nic = "mlx5_0", const std::string& dst_nic = "mlx5_0") {
  for (int s = 0; s < seconds; ++s) {
    ReportedProbe r;
    r.src_id = src;
    r.dst_id = dst;
    r.transport = aggregator::Transport::kRdmaUd;
    r.src_nic = src_nic;
    r.dst_nic = dst_nic;
    r.lost = lose_every > 0 && s % lose_every == 0;
    l.Record({&r, 1}, s * kSecond);
  }
}

// Every ordered pair of `nodes` probes, and each pair touching `bad` loses every 2nd probe.
void Mesh(RdmaLosses& l, const std::vector<NodeId>& nodes, NodeId bad) {
  for (NodeId a : nodes) {
    for (NodeId b : nodes) {
      if (a != b) Probe(l, a, b, a == bad || b == bad ? 2 : 0);
    }
  }
}

TEST(RdmaLosses, ThreeNodesTheSharedDeviceIsNamed) {
  RdmaLosses l;
  Mesh(l, {0, 1, 2}, 1);
  const std::vector<RdmaLossVerdict> v = l.Judge(9 * kSecond, {});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].node, 1u);
  EXPECT_EQ(v[0].device, "mlx5_0");
  EXPECT_EQ(v[0].pairs, 2u);
  EXPECT_EQ(v[0].lossy_pairs, 2u);
  EXPECT_EQ(v[0].probes, 40u);
  EXPECT_EQ(v[0].lost, 20u);
  EXPECT_EQ(v[0].peer_pairs, 1u);
  EXPECT_DOUBLE_EQ(v[0].peers_loss_ratio, 0);
  EXPECT_GE(v[0].significance, 9);
  EXPECT_EQ(v[0].lossy_peers, (std::vector<NodeId>{0, 2}));
}

TEST(RdmaLosses, CleanFleetAndSpreadLossNameNothing) {
  RdmaLosses clean;
  Mesh(clean, {0, 1, 2, 3}, 99);
  EXPECT_TRUE(clean.Judge(9 * kSecond, {}).empty());
  // Every pair loses: no device is distinguishable (its peers' other pairs are lossy too).
  RdmaLosses all;
  for (NodeId a : {0u, 1u, 2u}) {
    for (NodeId b : {0u, 1u, 2u}) {
      if (a != b) Probe(all, a, b, 2);
    }
  }
  EXPECT_TRUE(all.Judge(9 * kSecond, {}).empty());
  // Two nodes only: nothing shows the peer healthy.
  RdmaLosses two;
  Probe(two, 0, 1, 2);
  Probe(two, 1, 0, 2);
  EXPECT_TRUE(two.Judge(9 * kSecond, {}).empty());
}

TEST(RdmaLosses, PeersOfADownNodeAreNotNamed) {
  // Node 2 is down: its peers' probes to it are lost, and it sends none (its old, clean probes
  // are still in the window). One-way loss is no port fault.
  RdmaLosses l;
  Mesh(l, {0, 1, 2, 3}, 99);
  Probe(l, 0, 2, 1);
  Probe(l, 1, 2, 1);
  Probe(l, 3, 2, 1);
  EXPECT_TRUE(l.Judge(9 * kSecond, {}).empty());
}

TEST(RdmaLosses, OnlyTheLossyDeviceOfATwoNicHostIsNamed) {
  RdmaLosses l;
  // Node 0 has mlx5_0 (lossy) and mlx5_1 (clean), each on its own rail with nodes 1 and 2.
  for (NodeId peer : {1u, 2u}) {
    Probe(l, 0, peer, 2, 10, "mlx5_0", "mlx5_0");
    Probe(l, peer, 0, 2, 10, "mlx5_0", "mlx5_0");
    Probe(l, 0, peer, 0, 10, "mlx5_1", "mlx5_1");
    Probe(l, peer, 0, 0, 10, "mlx5_1", "mlx5_1");
  }
  Probe(l, 1, 2, 0);
  Probe(l, 2, 1, 0);
  const std::vector<RdmaLossVerdict> v = l.Judge(9 * kSecond, {});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].node, 0u);
  EXPECT_EQ(v[0].device, "mlx5_0");
}

TEST(RdmaLosses, AnUnnamedPeerDeviceIsTheNodesOnlyDevice) {
  RdmaLosses l;
  for (NodeId a : {0u, 1u, 2u}) {
    for (NodeId b : {0u, 1u, 2u}) {
      if (a != b) Probe(l, a, b, a == 1 || b == 1 ? 2 : 0, 10, "mlx5_0", "");
    }
  }
  const std::vector<RdmaLossVerdict> v = l.Judge(9 * kSecond, {});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].node, 1u);
  EXPECT_EQ(v[0].device, "mlx5_0");
  EXPECT_EQ(v[0].lossy_pairs, 2u);
}

TEST(RdmaLosses, TwoBadDevicesInALargerFleetAreBothNamed) {
  RdmaLosses l;
  const std::vector<NodeId> nodes{0, 1, 2, 3, 4, 5};
  for (NodeId a : nodes) {
    for (NodeId b : nodes) {
      const bool bad = a == 1 || b == 1 || a == 4 || b == 4;
      if (a != b) Probe(l, a, b, bad ? 2 : 0);
    }
  }
  const std::vector<RdmaLossVerdict> v = l.Judge(9 * kSecond, {});
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].node, 1u);
  EXPECT_EQ(v[1].node, 4u);
}

TEST(RdmaLosses, OldResultsAgeOutAndFewProbesSayNothing) {
  RdmaLosses l;
  Mesh(l, {0, 1, 2}, 1);
  EXPECT_TRUE(l.Judge(40 * kSecond, {}).empty());
  RdmaLosses few;
  Mesh(few, {0, 1, 2}, 1);
  RdmaLossLimits strict;
  strict.min_probes = 50;
  EXPECT_TRUE(few.Judge(9 * kSecond, strict).empty());
  // Results without node ids are not kept.
  ReportedProbe r;
  r.transport = aggregator::Transport::kRdmaUd;
  r.lost = true;
  few.Record({&r, 1}, 0);
  EXPECT_EQ(few.refused(), 0u);
}

}  // namespace
}  // namespace fw::analysis
