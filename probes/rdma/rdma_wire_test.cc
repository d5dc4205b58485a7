// The RDMA wire conversions: endpoints round-trip, bad endpoints from the network are refused.
#include "probes/rdma/rdma_wire.h"

#include <gtest/gtest.h>

namespace fw::rdma {
namespace {

namespace v1 = fabricwatch::v1;

UdEndpoint Roce() {
  UdEndpoint e;
  e.device = "mlx5_2";
  e.port = 1;
  e.link_layer = LinkLayer::kEthernet;
  e.gid.raw[10] = e.gid.raw[11] = 0xff;
  e.gid.raw[12] = 198;
  e.gid.raw[13] = 18;
  e.gid.raw[15] = 2;
  e.gid_index = 3;
  e.qpn = 0x1234;
  return e;
}

TEST(RdmaWire, EndpointsRoundTrip) {
  v1::RdmaEndpoint p;
  EndpointToProto(Roce(), TsSource::kNicRaw, &p);
  EXPECT_EQ(p.timestamps(), "nic_raw");
  auto e = EndpointFromProto(p);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->gid, Roce().gid);
  EXPECT_EQ(e->gid_index, 3);
  EXPECT_EQ(e->qpn, 0x1234u);
  EXPECT_EQ(e->qkey, kProbeQkey);
}

TEST(RdmaWire, BadEndpointsAreRefused) {
  v1::RdmaEndpoint good;
  EndpointToProto(Roce(), TsSource::kSoftware, &good);
  auto bad = [&](void (*m)(v1::RdmaEndpoint&)) {
    v1::RdmaEndpoint p = good;
    m(p);
    return !EndpointFromProto(p).ok();
  };
  EXPECT_TRUE(bad([](v1::RdmaEndpoint& p) { p.set_gid("short"); }));
  EXPECT_TRUE(bad([](v1::RdmaEndpoint& p) { p.set_qpn(0x1000000); }));
  EXPECT_TRUE(bad([](v1::RdmaEndpoint& p) { p.set_qpn(0); }));
  EXPECT_TRUE(bad([](v1::RdmaEndpoint& p) { p.set_port(0); }));
  EXPECT_TRUE(bad([](v1::RdmaEndpoint& p) { p.set_link_layer("iWARP"); }));
  EXPECT_TRUE(bad([](v1::RdmaEndpoint& p) { p.set_gid(std::string(16, '\0')); }));
  EXPECT_TRUE(bad([](v1::RdmaEndpoint& p) {
    p.set_link_layer("InfiniBand");
    p.set_lid(0);
  }));
}

TEST(RdmaWire, PlanPeersBecomeTargetsAndBadOnesAreSkipped) {
  v1::ProbePlan plan;
  auto* udp = plan.add_peers();
  udp->set_node("n1");
  udp->set_transport(v1::TRANSPORT_UDP);
  auto* ok = plan.add_peers();
  ok->set_node("n2");
  ok->set_transport(v1::TRANSPORT_RDMA_UD);
  ok->set_src_nic("mlx5_0");
  ok->set_rate_pps(10);
  ok->add_src_ports(1);
  ok->add_src_ports(2);
  EndpointToProto(Roce(), TsSource::kSoftware, ok->mutable_rdma());
  auto* no_ep = plan.add_peers();
  no_ep->set_node("n3");
  no_ep->set_transport(v1::TRANSPORT_RDMA_UD);
  int skipped = 0;
  auto t = UdTargetsFromPlan(plan, &skipped);
  EXPECT_EQ(skipped, 1);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].peer, "n2");
  EXPECT_EQ(t[0].local_device, "mlx5_0");
  EXPECT_EQ(t[0].flows, 2);
  EXPECT_EQ(t[0].rate_hz, 10);
}

TEST(RdmaWire, ResultsCarryTheSplit) {
  RdmaProbeResult r;
  r.base.SetPeer("n2");
  r.base.seq = 5;
  r.network_rtt_ns = 3000;
  r.prober_host_ns = 700;
  r.responder_host_ns = 900;
  r.source = TsSource::kNicWallclock;
  r.SetLocalDevice("mlx5_0");
  v1::ProbeResult p;
  ResultToProto(r, &p);
  EXPECT_EQ(p.transport(), v1::TRANSPORT_RDMA_UD);
  EXPECT_EQ(p.rtt_ns(), 3000u);
  EXPECT_EQ(p.prober_host_ns(), 700);
  EXPECT_EQ(p.responder_host_ns(), 900);
  EXPECT_EQ(p.timestamp_source(), "nic_wallclock");
  EXPECT_EQ(p.src_nic(), "mlx5_0");
  RdmaState none;
  none.detail = "ibv_get_device_list: x (errno 38)";
  EXPECT_EQ(InventoryLine(none), "unavailable: ibv_get_device_list: x (errno 38)");
}

}  // namespace
}  // namespace fw::rdma
