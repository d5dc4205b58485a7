// PathTraceReport -> WireTrace, with the checks that keep a bad report out of the analyzer.
#include "daemon/aggregator/ingest/path_trace_wire.h"

#include <arpa/inet.h>

#include <optional>

namespace fw::aggregator {
namespace v1 = fabricwatch::v1;

namespace {

// Node names are DNS-like names (Hello.node is checked the same way).
constexpr size_t kMaxNodeName = 253;

bool NumericAddress(const std::string& s) {
  if (s.empty() || s.size() > 45) return false;
  in6_addr buf;
  return inet_pton(AF_INET, s.c_str(), &buf) == 1 || inet_pton(AF_INET6, s.c_str(), &buf) == 1;
}

std::optional<TraceRefusal> Check(const v1::PathTrace& t) {
  if (t.transport() != v1::TRANSPORT_UDP) return TraceRefusal::kTransport;
  // A responder may not know the name of a node that probes it; the intake names it by address.
  if ((t.dst_node().empty() && !t.echo()) || t.dst_node().size() > kMaxNodeName) {
    return TraceRefusal::kPeer;
  }
  if (t.src_port() == 0 || t.src_port() > 65535 || t.dst_port() == 0 || t.dst_port() > 65535) {
    return TraceRefusal::kPort;
  }
  if (!NumericAddress(t.dst_address())) return TraceRefusal::kAddress;
  if (!t.src_address().empty() && !NumericAddress(t.src_address())) return TraceRefusal::kAddress;
  if (t.hops_size() > static_cast<int>(kWireTraceMaxTtl)) return TraceRefusal::kHops;
  uint32_t last_ttl = 0;
  for (const v1::TraceHop& h : t.hops()) {
    if (h.ttl() <= last_ttl || h.ttl() > kWireTraceMaxTtl) return TraceRefusal::kHops;
    last_ttl = h.ttl();
    if (!h.address().empty() && !NumericAddress(h.address())) return TraceRefusal::kAddress;
  }
  return std::nullopt;
}

}  // namespace

std::string_view TraceRefusalName(TraceRefusal r) {
  switch (r) {
    case TraceRefusal::kTransport:
      return "transport";
    case TraceRefusal::kPeer:
      return "peer";
    case TraceRefusal::kPort:
      return "port";
    case TraceRefusal::kAddress:
      return "address";
    case TraceRefusal::kHops:
      return "hops";
    case TraceRefusal::kTooMany:
      return "too_many";
    case TraceRefusal::kCount:
      break;
  }
  return "unknown";
}

WireTraces TracesFromWire(const v1::PathTraceReport& report) {
  WireTraces out;
  const size_t n = static_cast<size_t>(report.traces_size());
  out.traces.reserve(std::min(n, kWireMaxTracesPerReport));
  for (size_t i = 0; i < n; ++i) {
    if (i >= kWireMaxTracesPerReport) {
      out.refused[static_cast<size_t>(TraceRefusal::kTooMany)] += n - i;
      break;
    }
    const v1::PathTrace& t = report.traces(static_cast<int>(i));
    if (std::optional<TraceRefusal> r = Check(t)) {
      ++out.refused[static_cast<size_t>(*r)];
      continue;
    }
    WireTrace w;
    w.dst_node = t.dst_node();
    w.src_port = static_cast<uint16_t>(t.src_port());
    w.dst_port = static_cast<uint16_t>(t.dst_port());
    w.echo = t.echo();
    w.src_address = t.src_address();
    w.dst_address = t.dst_address();
    w.reached_peer = t.status() == v1::TRACE_STATUS_REACHED_PEER;
    if (t.hops_size() > 0) w.hops.resize(t.hops(t.hops_size() - 1).ttl());
    for (const v1::TraceHop& h : t.hops()) w.hops[h.ttl() - 1] = h.address();
    out.traces.push_back(std::move(w));
  }
  return out;
}

}  // namespace fw::aggregator
