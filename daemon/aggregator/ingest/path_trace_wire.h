// The agents' path traces (PathTraceReport) checked and turned into what the analyzer's
// TracedPaths records: the peer, the flow's source port and the hop addresses by TTL.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fabricwatch.pb.h"

namespace fw::aggregator {

// Why a trace was refused. The names are the `reason` label of
// fabricwatch_path_traces_refused_total (docs/metrics.md); keep them stable.
enum class TraceRefusal : uint8_t {
  kTransport,  // not UDP: other transports hash differently, the path would not be the flow's
  kPeer,       // no destination node, or a name longer than a node name may be
  kPort,       // a source or destination port of 0 or above 65535
  kAddress,    // a destination or hop address that is not a numeric IPv4 or IPv6 address
  kHops,       // more hops than TracedPaths keeps, a TTL of 0 or past it, or TTLs not increasing
  kTooMany,    // past the traces one report may carry
  kCount,
};
inline constexpr size_t kTraceRefusalCount = static_cast<size_t>(TraceRefusal::kCount);
std::string_view TraceRefusalName(TraceRefusal r);

// One accepted trace. hops[k] answered TTL k+1; "" is a silent hop (a TTL the report left out).
struct WireTrace {
  std::string dst_node;  // "" only on an echo: the prober is then named by dst_address
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  bool echo = false;  // an echo's trace: dst_port is the peer's probe source port
  std::string src_address;  // the NIC the trace left from ("" when the agent did not say)
  std::string dst_address;  // the peer NIC it went to
  std::vector<std::string> hops;
  bool reached_peer = false;
};

struct WireTraces {
  std::vector<WireTrace> traces;
  std::array<uint64_t, kTraceRefusalCount> refused{};
};

// The most hops a trace may carry (TracedPaths::kMaxHops) and traces a report may carry.
inline constexpr uint32_t kWireTraceMaxTtl = 32;
inline constexpr size_t kWireMaxTracesPerReport = 4096;

// Checks every trace of `report`; a trace with any bad field is refused as a whole and counted
// by its first fault, the others are returned in report order. Never fails as a whole.
WireTraces TracesFromWire(const fabricwatch::v1::PathTraceReport& report);

}  // namespace fw::aggregator
