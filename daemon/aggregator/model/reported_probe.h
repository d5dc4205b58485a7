// The plain record of one reported probe that the aggregator ingests; the gRPC layer converts wire
// messages to it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/aggregator/model/name_interner.h"

namespace fw::aggregator {

// How a probe travelled. The numeric values index per-transport arrays; keep kTransportCount last.
enum class Transport : uint8_t {
  kUdp = 0,
  kTcpConnect,
  kTcpBw,
  kRdmaUd,
  kRdmaRc,
  kCollective,
};
inline constexpr int kTransportCount = 6;

// "udp", "tcp_connect", "tcp_bw", "rdma_ud", "rdma_rc", "collective".
std::string_view TransportName(Transport t);
// The inverse of TransportName; nullopt for an unknown name.
std::optional<Transport> ParseTransport(std::string_view name);

// One probe outcome as the agent on `src_node` reported it, with both ends named. Not the agent's
// fw::net::ProbeResult (one prober's view: the peer only) nor the wire's v1::ProbeResult.
// RTTs are measured on the prober's own monotonic clock; no field holds a cross-host timestamp.
// The nodes are named either by id (ingest: src_id and dst_id set, the names may be empty) or by
// name (src_id == kNoNode; tests, tools). Ids belong to the NameInterner that the PairTable and
// the analyzer's FlowTable share, and a table given ids from another interner records garbage.
struct ReportedProbe {
  std::string src_node;
  std::string dst_node;
  NodeId src_id = kNoNode;
  NodeId dst_id = kNoNode;
  Transport transport = Transport::kUdp;
  uint16_t src_port = 0;  // the source port that selected the ECMP path
  uint32_t flow_id = 0;   // the planner's flow index for this peer
  uint64_t seq = 0;
  bool lost = false;         // timed out; rtt_ns is then meaningless
  // Takes back a loss reported earlier for this flow (ProbeResult.late): answered after all, rtt_ns
  // late. Never with lost; udp only (the decoder clears it elsewhere).
  bool late = false;
  int64_t rtt_ns = 0;        // round trip (latency transports) or burst duration (tcp_bw)
  uint64_t bytes = 0;        // bytes moved by the probe
  double goodput_bps = 0.0;  // tcp_bw only: bits per second; 0 elsewhere
  // rdma_ud only (docs/rdma.md): rtt_ns is then the network RTT, and the hosts' own delays are
  // split off: the prober's posting and polling, the responder's turnaround. 0: not measured.
  int64_t prober_host_ns = 0;
  int64_t responder_host_ns = 0;
  // Bursts (tcp_bw, rdma_rc): the prober host's CPU busy share over the burst, all CPUs and the
  // busiest one, in thousandths (1..1000); 0: not measured. A burst on a saturated host measures
  // the host, not the path (AnalysisConfig::bandwidth_cpu_busy_limit).
  uint16_t cpu_busy_permille = 0;
  uint16_t cpu_peak_permille = 0;
  // Bursts: the share of the burst's time (and its lead) during which runnable tasks on the
  // prober's host waited for a CPU (PSI), in thousandths; 0: not measured
  // (AnalysisConfig::bandwidth_cpu_pressure_limit).
  uint16_t cpu_pressure_permille = 0;
  std::string src_nic;  // the RDMA devices at either end, when the agent named them
  std::string dst_nic;
};

}  // namespace fw::aggregator
