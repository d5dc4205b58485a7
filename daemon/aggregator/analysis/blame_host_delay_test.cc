// Host-delay level: a high rdma_ud host delay names the host, or the one slow NIC of a host whose
// other NIC is quick; an observation an earlier level made for the same element gains evidence.
#include <gtest/gtest.h>

#include "daemon/aggregator/analysis/testing/blame_fixture.h"

namespace fw::analysis {
namespace {

HostDelayVerdict Verdict(NodeId node, const std::string& device, HostRole role, double median_ns,
                         bool high) {
  HostDelayVerdict v;
  v.node = node;
  v.device = device;
  v.role = role;
  v.samples = 40;
  v.median_ns = median_ns;
  v.fleet_median_ns = 10'000;
  v.high = high;
  return v;
}

TEST(BlameHostDelayLevel, SlowHostIsHostNetworkWithBothRoles) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.ev.host_delays = {Verdict(t.Id("a"), "mlx5_0", HostRole::kProber, 4e6, true),
                      Verdict(t.Id("a"), "mlx5_0", HostRole::kResponder, 2e6, true),
                      Verdict(t.Id("b"), "mlx5_0", HostRole::kProber, 1e4, false)};
  t.MakeBlamer().HostDelayLevel();
  ASSERT_EQ(t.ev.observations.size(), 1u);
  const Observation* o = t.Find("node:a");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->finding.kind, "host_network");
  EXPECT_EQ(o->finding.location.type, "node");
  EXPECT_DOUBLE_EQ(o->finding.evidence.at("prober_host_delay_ms"), 4.0);
  EXPECT_DOUBLE_EQ(o->finding.evidence.at("responder_host_delay_ms"), 2.0);
  EXPECT_DOUBLE_EQ(o->finding.evidence.at("fleet_prober_host_delay_ms"), 0.01);
  EXPECT_DOUBLE_EQ(o->finding.evidence.at("prober_host_delay_samples"), 40);
  EXPECT_NE(o->finding.summary.find("400x the fleet's 0.01 ms"), std::string::npos)
      << o->finding.summary;
  EXPECT_NE(o->finding.summary.find("not the fabric"), std::string::npos);
  EXPECT_GT(o->finding.confidence, 0.85);
}

TEST(BlameHostDelayLevel, OneSlowNicBesideAQuickOneIsNicDegraded) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.ev.host_delays = {Verdict(t.Id("d"), "mlx5_0", HostRole::kResponder, 1e4, false),
                      Verdict(t.Id("d"), "mlx5_1", HostRole::kResponder, 3e6, true),
                      Verdict(t.Id("d"), "mlx5_1", HostRole::kProber, 1e4, false)};
  t.MakeBlamer().HostDelayLevel();
  ASSERT_EQ(t.ev.observations.size(), 1u);
  const Observation* o = t.Find("nic:d/mlx5_1");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->finding.kind, "nic_degraded");
  EXPECT_EQ(o->finding.location.type, "nic");
  EXPECT_EQ(o->finding.location.device, "mlx5_1");
  EXPECT_DOUBLE_EQ(o->finding.evidence.at("responder_host_delay_ms"), 3.0);
  EXPECT_DOUBLE_EQ(o->finding.evidence.at("quick_devices"), 1);
  EXPECT_NE(o->finding.summary.find("while mlx5_0 on the same host is quick"), std::string::npos)
      << o->finding.summary;
}

TEST(BlameHostDelayLevel, AllNicsSlowOrUnnamedIsTheHost) {
  testing::BlameFixture t(testing::TwoLeafMap());
  t.ev.host_delays = {Verdict(t.Id("d"), "mlx5_0", HostRole::kProber, 3e6, true),
                      Verdict(t.Id("d"), "mlx5_1", HostRole::kProber, 3e6, true),
                      Verdict(t.Id("c"), "", HostRole::kProber, 2e6, true)};
  t.MakeBlamer().HostDelayLevel();
  ASSERT_EQ(t.ev.observations.size(), 2u);
  ASSERT_NE(t.Find("node:d"), nullptr);
  EXPECT_EQ(t.Find("node:d")->finding.kind, "host_network");
  EXPECT_NE(t.Find("node:d")->finding.summary.find("on mlx5_1"), std::string::npos);
  ASSERT_NE(t.Find("node:c"), nullptr);
}

TEST(BlameHostDelayLevel, AddsEvidenceToTheHostLevelsFindingAndQuietGivesNothing) {
  testing::BlameFixture t(testing::TwoLeafMap());
  HostStats& a = t.ev.hosts[t.Id("a")];
  a.out_bad = 16;
  a.noisy_out = true;
  a.noisy_out_by[static_cast<int>(Signal::kLatency)] = true;
  t.ev.host_delays = {Verdict(t.Id("a"), "mlx5_0", HostRole::kProber, 4e6, true),
                      Verdict(t.Id("b"), "mlx5_0", HostRole::kProber, 1e4, false)};
  blame::Blamer b = t.MakeBlamer();
  b.HostLevel();
  b.HostDelayLevel();
  ASSERT_EQ(t.ev.observations.size(), 1u);
  const Observation* o = t.Find("node:a");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->confirm_ticks, t.config.latency_confirm_ticks) << "the host level's, kept";
  EXPECT_DOUBLE_EQ(o->finding.evidence.at("bad_fraction_as_prober"), 0.8);
  EXPECT_DOUBLE_EQ(o->finding.evidence.at("prober_host_delay_ms"), 4.0);
  EXPECT_NE(o->finding.summary.find("RDMA host delays agree"), std::string::npos);

  testing::BlameFixture quiet(testing::TwoLeafMap());
  quiet.ev.host_delays = {Verdict(quiet.Id("a"), "mlx5_0", HostRole::kProber, 1e4, false)};
  quiet.MakeBlamer().HostDelayLevel();
  EXPECT_TRUE(quiet.ev.observations.empty());
}

}  // namespace
}  // namespace fw::analysis
