// The RDMA wire conversions: endpoints round-trip, bad endpoints from the network are refused.
#include "probes/rdma/rdma_wire.h"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

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
  ok->set_dst_nic("mlx5_2");
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
  EXPECT_EQ(t[0].peer_device, "mlx5_2");
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
  r.SetPeerDevice("mlx5_2");
  v1::ProbeResult p;
  ResultToProto(r, &p);
  EXPECT_EQ(p.transport(), v1::TRANSPORT_RDMA_UD);
  EXPECT_EQ(p.rtt_ns(), 3000u);
  EXPECT_EQ(p.prober_host_ns(), 700);
  EXPECT_EQ(p.responder_host_ns(), 900);
  EXPECT_EQ(p.timestamp_source(), "nic_wallclock");
  EXPECT_EQ(p.src_nic(), "mlx5_0");
  EXPECT_EQ(p.dst_nic(), "mlx5_2");
  RdmaState none;
  none.detail = "ibv_get_device_list: x (errno 38)";
  EXPECT_EQ(InventoryLine(none), "unavailable: ibv_get_device_list: x (errno 38)");
}

TEST(RdmaWire, RcConnectRoundTripsAndBadOnesAreRefused) {
  RcConnectMsg m;
  m.peer = "node-b";
  m.reply = true;
  m.peer_device = "mlx5_3";
  RcEndpoint& e = m.endpoint;
  e.device = "mlx5_0";
  e.port = 1;
  e.link_layer = LinkLayer::kInfiniBand;
  e.lid = 7;
  e.qpn = 0x123;
  e.psn = 0xabcdef;
  e.rkey = 0x5a000011;
  e.addr = 0x7f0012340000;
  e.length = 1u << 20;
  v1::RdmaRcConnect p;
  RcConnectToProto(m, &p);
  auto back = RcConnectFromProto(p);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->peer, "node-b");
  EXPECT_TRUE(back->reply);
  EXPECT_EQ(back->endpoint.qpn, 0x123u);
  EXPECT_EQ(back->endpoint.psn, 0xabcdefu);
  EXPECT_EQ(back->endpoint.rkey, e.rkey);
  EXPECT_EQ(back->endpoint.addr, e.addr);
  EXPECT_EQ(back->endpoint.length, e.length);
  EXPECT_EQ(back->endpoint.lid, 7);
  EXPECT_EQ(back->peer_device, "mlx5_3");
  for (auto breaker : std::vector<std::function<void(v1::RdmaRcConnect&)>>{
           [](auto& q) { q.mutable_endpoint()->set_qpn(1u << 24); },
           [](auto& q) { q.mutable_endpoint()->set_psn(1u << 24); },
           [](auto& q) { q.mutable_endpoint()->set_rkey(0); },
           [](auto& q) { q.mutable_endpoint()->set_length(0); },
           [](auto& q) { q.mutable_endpoint()->set_gid("short"); },
           [](auto& q) { q.mutable_endpoint()->set_link_layer("Token Ring"); },
           [](auto& q) { q.mutable_endpoint()->set_lid(0); },
           [](auto& q) { q.set_peer(""); },
           [](auto& q) { q.set_peer(std::string(64, 'x')); },
           [](auto& q) { q.set_peer_device(std::string(65, 'x')); },
       }) {
    v1::RdmaRcConnect bad = p;
    breaker(bad);
    EXPECT_FALSE(RcConnectFromProto(bad).ok()) << bad.ShortDebugString();
  }
}

TEST(RdmaWire, RcPlanPeersAndResults) {
  v1::ProbePlan plan;
  v1::PlannedPeer* rc = plan.add_peers();
  rc->set_node("node-b");
  rc->set_transport(v1::TRANSPORT_RDMA_RC);
  rc->set_src_nic("mlx5_0");
  rc->set_dst_nic("mlx5_1");
  plan.add_peers()->set_transport(v1::TRANSPORT_RDMA_UD);
  auto peers = RcPeersFromPlan(plan);
  ASSERT_EQ(peers.size(), 1u);
  EXPECT_EQ(peers[0].peer, "node-b");
  EXPECT_EQ(peers[0].local_device, "mlx5_0");
  EXPECT_EQ(peers[0].remote_device, "mlx5_1");

  RdmaProbeResult r;
  r.base.SetPeer("node-b");
  r.base.transport = net::Transport::kRdmaRc;
  r.base.bytes = 4u << 20;
  r.base.goodput_bps = 97e9;
  r.base.rtt_ns = 345'000;
  r.SetLocalDevice("mlx5_0");
  r.SetPeerDevice("mlx5_1");
  r.base.flow_id = 4242;
  v1::ProbeResult out;
  ResultToProto(r, &out);
  EXPECT_EQ(out.transport(), v1::TRANSPORT_RDMA_RC);
  EXPECT_EQ(out.dst_nic(), "mlx5_1");
  EXPECT_EQ(out.flow_id(), 4242u);
  EXPECT_EQ(out.bytes(), 4u << 20);
  EXPECT_DOUBLE_EQ(out.goodput_bps(), 97e9);
  EXPECT_EQ(out.rtt_ns(), 0u);
  EXPECT_EQ(out.src_nic(), "mlx5_0");
}

}  // namespace
}  // namespace fw::rdma
