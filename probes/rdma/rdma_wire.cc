// RDMA probes <-> fabricwatch.v1.
#include "probes/rdma/rdma_wire.h"

#include <cmath>
#include <cstring>

namespace fw::rdma {

namespace v1 = fabricwatch::v1;

namespace {

// The address fields RdmaEndpoint and RdmaRcEndpoint share, validated: a known link layer, port
// 1..255, a 16-byte GID, a non-zero 24-bit QPN, LID, GID index and device name in range.
template <typename P, typename E>
Status AddressFromProto(const P& p, E& e, const char* what) {
  if (p.link_layer() == "InfiniBand") {
    e.link_layer = LinkLayer::kInfiniBand;
  } else if (p.link_layer() == "Ethernet") {
    e.link_layer = LinkLayer::kEthernet;
  } else {
    return Status::InvalidArgument(std::string(what) + ": unknown link layer");
  }
  if (p.port() < 1 || p.port() > 255 || p.gid().size() != 16 || p.qpn() == 0 ||
      p.qpn() > 0xffffff || p.lid() > 0xffff || p.gid_index() > 255 || p.device().size() > 64) {
    return Status::InvalidArgument(std::string(what) + ": field out of range");
  }
  e.device = p.device();
  e.port = static_cast<uint8_t>(p.port());
  e.lid = static_cast<uint16_t>(p.lid());
  std::memcpy(e.gid.raw.data(), p.gid().data(), 16);
  e.gid_index = static_cast<int>(p.gid_index());
  e.qpn = p.qpn();
  return Status::Ok();
}

// The address fields RdmaEndpoint and RdmaRcEndpoint share, written from either endpoint type.
template <typename E, typename P>
void AddressToProto(const E& e, P* p) {
  p->set_device(e.device);
  p->set_port(e.port);
  p->set_link_layer(std::string(LinkLayerName(e.link_layer)));
  p->set_lid(e.lid);
  p->set_gid(std::string(reinterpret_cast<const char*>(e.gid.raw.data()), 16));
  p->set_gid_index(static_cast<uint32_t>(e.gid_index));
  p->set_qpn(e.qpn);
}

}  // namespace

void EndpointToProto(const UdEndpoint& e, TsSource source, v1::RdmaEndpoint* out) {
  AddressToProto(e, out);
  out->set_qkey(e.qkey);
  out->set_timestamps(std::string(TsSourceName(source)));
}

StatusOr<UdEndpoint> EndpointFromProto(const v1::RdmaEndpoint& p) {
  UdEndpoint e;
  Status st = AddressFromProto(p, e, "rdma endpoint");
  if (!st.ok()) return st;
  e.qkey = p.qkey();
  if (e.link_layer == LinkLayer::kInfiniBand && e.lid == 0) {
    return Status::InvalidArgument("rdma endpoint: InfiniBand without a LID");
  }
  if (e.link_layer == LinkLayer::kEthernet && e.gid.IsZero()) {
    return Status::InvalidArgument("rdma endpoint: RoCE without a GID");
  }
  return e;
}

void RcConnectToProto(const RcConnectMsg& m, v1::RdmaRcConnect* out) {
  out->set_peer(m.peer);
  out->set_reply(m.reply);
  out->set_peer_device(m.peer_device);
  const RcEndpoint& e = m.endpoint;
  v1::RdmaRcEndpoint* p = out->mutable_endpoint();
  AddressToProto(e, p);
  p->set_psn(e.psn);
  p->set_rkey(e.rkey);
  p->set_addr(e.addr);
  p->set_length(e.length);
}

StatusOr<RcConnectMsg> RcConnectFromProto(const v1::RdmaRcConnect& in) {
  if (in.peer().empty() || in.peer().size() > net::ProbeResult::kPeerNameMax) {
    return Status::InvalidArgument("rdma rc connect: bad peer name");
  }
  const v1::RdmaRcEndpoint& p = in.endpoint();
  if (in.peer_device().size() > 64) {
    return Status::InvalidArgument("rdma rc connect: bad peer device name");
  }
  RcConnectMsg m;
  m.peer = in.peer();
  m.reply = in.reply();
  m.peer_device = in.peer_device();
  RcEndpoint& e = m.endpoint;
  Status st = AddressFromProto(p, e, "rdma rc connect");
  if (!st.ok()) return st;
  if (p.psn() > 0xffffff || p.rkey() == 0 || p.length() == 0) {
    return Status::InvalidArgument("rdma rc connect: field out of range");
  }
  e.psn = p.psn();
  e.rkey = p.rkey();
  e.addr = p.addr();
  e.length = p.length();
  if (e.link_layer == LinkLayer::kInfiniBand && e.lid == 0 && e.gid.IsZero()) {
    return Status::InvalidArgument("rdma rc connect: InfiniBand without a LID or GID");
  }
  if (e.link_layer == LinkLayer::kEthernet && e.gid.IsZero()) {
    return Status::InvalidArgument("rdma rc connect: RoCE without a GID");
  }
  return m;
}

std::vector<RcPeerPlan> RcPeersFromPlan(const v1::ProbePlan& plan) {
  std::vector<RcPeerPlan> out;
  for (const v1::PlannedPeer& p : plan.peers()) {
    if (p.transport() != v1::TRANSPORT_RDMA_RC || p.node().empty()) continue;
    out.push_back({p.node(), p.src_nic(), p.dst_nic(), p.rdma_rc_round()});
  }
  return out;
}

std::vector<UdTarget> UdTargetsFromPlan(const v1::ProbePlan& plan, int* skipped) {
  std::vector<UdTarget> out;
  int bad = 0;
  for (const v1::PlannedPeer& p : plan.peers()) {
    if (p.transport() != v1::TRANSPORT_RDMA_UD) continue;
    auto e = p.has_rdma() ? EndpointFromProto(p.rdma())
                          : StatusOr<UdEndpoint>(Status::InvalidArgument("no endpoint"));
    if (!e.ok() || p.node().empty() || p.node().size() > net::ProbeResult::kPeerNameMax ||
        !(p.rate_pps() >= 0) || !std::isfinite(p.rate_pps())) {
      ++bad;
      continue;
    }
    UdTarget t;
    t.peer = p.node();
    t.local_device = p.src_nic();
    t.peer_device = p.dst_nic();
    t.remote = *e;
    t.flows = std::max(1, std::min(64, p.src_ports_size()));
    t.rate_hz = p.rate_pps() > 0 ? p.rate_pps() : 1.0;
    out.push_back(std::move(t));
  }
  if (skipped != nullptr) *skipped = bad;
  return out;
}

void ResultToProto(const RdmaProbeResult& r, v1::ProbeResult* out) {
  out->set_peer(std::string(r.base.PeerName()));
  if (r.base.transport == net::Transport::kRdmaRc) {
    // A burst: bytes and goodput like tcp_bw; rtt_ns is left 0 (the burst's span is no RTT).
    out->set_transport(v1::TRANSPORT_RDMA_RC);
    out->set_flow_id(r.base.flow_id);
    out->set_probe_seq(r.base.seq);
    out->set_lost(r.base.lost);
    out->set_bytes(r.base.bytes);
    out->set_goodput_bps(r.base.lost ? 0 : r.base.goodput_bps);
    out->set_sent_unix_ns(r.base.timestamp_ns);
    out->set_src_nic(std::string(r.LocalDevice()));
    out->set_dst_nic(std::string(r.PeerDevice()));
    out->set_cpu_busy_permille(r.base.cpu_busy_permille);
    out->set_cpu_peak_permille(r.base.cpu_peak_permille);
    out->set_cpu_pressure_permille(r.base.cpu_pressure_permille);
    return;
  }
  out->set_transport(v1::TRANSPORT_RDMA_UD);
  // The flow label stands in for the UDP source port; the aggregator takes ports up to 65535.
  out->set_src_port(r.flow_label <= 0xffff ? r.flow_label : 0);
  out->set_flow_id(r.base.flow_id);
  out->set_probe_seq(r.base.seq);
  out->set_lost(r.base.lost);
  out->set_rtt_ns(r.base.lost ? 0 : static_cast<uint64_t>(r.network_rtt_ns));
  out->set_bytes(r.base.bytes);
  out->set_sent_unix_ns(r.base.timestamp_ns);
  out->set_src_nic(std::string(r.LocalDevice()));
  out->set_dst_nic(std::string(r.PeerDevice()));
  if (!r.base.lost) {
    out->set_prober_host_ns(r.prober_host_ns);
    out->set_responder_host_ns(r.responder_host_ns);
    out->set_timestamp_source(std::string(TsSourceName(r.source)));
  }
}

std::string InventoryLine(const RdmaState& s) {
  if (!s.available) return "unavailable: " + s.detail;
  return "available: " + std::to_string(s.endpoints.size()) + " ports";
}

}  // namespace fw::rdma
