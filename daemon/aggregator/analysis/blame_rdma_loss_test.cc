// RDMA loss level: a device named by RdmaLosses becomes nic_degraded on that NIC and supersedes its
// pairs' pair findings.
#include <gtest/gtest.h>

#include "daemon/aggregator/analysis/testing/blame_fixture.h"

namespace fw::analysis {
namespace {

RdmaLossVerdict Lossy(NodeId node, const std::string& device, std::vector<NodeId> peers) {
  RdmaLossVerdict v;
  v.node = node;
  v.device = device;
  v.pairs = static_cast<uint32_t>(peers.size());
  v.lossy_pairs = v.pairs;
  v.probes = 40;
  v.lost = 30;
  v.peer_pairs = 1;
  v.significance = 20;
  v.lossy_peers = std::move(peers);
  return v;
}

TEST(BlameRdmaLossLevel, NamesTheNicAndSupersedesItsPairs) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.ev.rdma_losses = {Lossy(t.Id("b"), "mlx5_0", {t.Id("a"), t.Id("c")})};
  t.MakeBlamer(false).RdmaLossLevel();
  ASSERT_EQ(t.ev.observations.size(), 1u);
  const Observation* o = t.Find("nic:b/mlx5_0");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->finding.kind, "nic_degraded");
  EXPECT_EQ(o->finding.severity, Severity::kCritical);
  EXPECT_EQ(o->finding.location.type, "nic");
  EXPECT_EQ(o->finding.location.device, "mlx5_0");
  EXPECT_DOUBLE_EQ(o->finding.evidence.at("rdma_loss_ratio"), 0.75);
  EXPECT_DOUBLE_EQ(o->finding.evidence.at("rdma_lossy_pairs"), 2);
  EXPECT_NE(o->finding.summary.find("loses 75% of its RDMA UD probes (30 of 40) toward 2 of its 2"),
            std::string::npos)
      << o->finding.summary;
  EXPECT_EQ(t.ev.superseded, (std::vector<std::string>{"pair:a~b", "pair:b~c"}));
}

TEST(BlameRdmaLossLevel, AnUnnamedDeviceIsTheHostsPort) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.ev.rdma_losses = {Lossy(t.Id("c"), "", {t.Id("a"), t.Id("b")})};
  t.MakeBlamer(false).RdmaLossLevel();
  const Observation* o = t.Find("node:c");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->finding.kind, "host_network");
  EXPECT_NE(o->finding.summary.find("c's RDMA port loses"), std::string::npos);
}

}  // namespace
}  // namespace fw::analysis
