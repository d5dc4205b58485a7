// Conversions between the RDMA probes and the wire contract (fabricwatch.v1), for the agent:
// endpoints in Hello, targets from ProbePlan, results in ProbeBatch. A separate library
// (fw_probes_rdma_wire) so that the probes themselves build without protobuf.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "fabricwatch.pb.h"
#include "probes/rdma/rdma_runner.h"
#include "probes/rdma/ud_mesh.h"

namespace fw::rdma {

void EndpointToProto(const UdEndpoint& e, TsSource source, fabricwatch::v1::RdmaEndpoint* out);
// Validates what came from the network: a known link layer, port 1..255, a 16-byte GID, a 24-bit
// QPN, a LID on InfiniBand and a non-zero GID on RoCE.
StatusOr<UdEndpoint> EndpointFromProto(const fabricwatch::v1::RdmaEndpoint& p);

// The plan's TRANSPORT_RDMA_UD peers as UD targets: one flow per src_ports entry (at least one),
// rate_pps per flow, the local NIC from src_nic. Peers without a valid endpoint are counted in
// `skipped` and left out.
std::vector<UdTarget> UdTargetsFromPlan(const fabricwatch::v1::ProbePlan& plan, int* skipped);

// RC connection messages (rc_peers.h). The parse validates what came from the network: a known
// link layer, port 1..255, a 16-byte GID, 24-bit QPN and PSN, a non-zero QPN, rkey and length,
// a LID on InfiniBand, a GID on RoCE, a peer name of at most 63 bytes.
void RcConnectToProto(const RcConnectMsg& m, fabricwatch::v1::RdmaRcConnect* out);
StatusOr<RcConnectMsg> RcConnectFromProto(const fabricwatch::v1::RdmaRcConnect& p);
// The plan's TRANSPORT_RDMA_RC peers: node, local NIC (src_nic), the peer's NIC (dst_nic).
std::vector<RcPeerPlan> RcPeersFromPlan(const fabricwatch::v1::ProbePlan& plan);

void ResultToProto(const RdmaProbeResult& r, fabricwatch::v1::ProbeResult* out);

// Hello's Inventory.rdma and the log line: "available: 2 ports" / "unavailable: <reason>".
std::string InventoryLine(const RdmaState& s);

}  // namespace fw::rdma
