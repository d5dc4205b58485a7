#include "daemon/aggregator/ingest/wire_convert.h"

#include <algorithm>
#include <cmath>

namespace fw::aggregator {

namespace v1 = fabricwatch::v1;

std::vector<PortSample> PortSamplesFromWire(const std::string& node,
                                            const v1::CounterBatch& batch) {
  auto known = [](double v) { return std::isfinite(v) ? v : 0.0; };
  std::vector<PortSample> out;
  out.reserve(static_cast<size_t>(batch.ports_size()));
  for (const v1::PortSample& p : batch.ports()) {
    PortSample s;
    s.node = node;
    s.device = p.device();
    s.port = static_cast<int>(p.port());
    s.congestion_ratio = known(p.congestion_ratio());
    s.cnp_rate = known(p.cnp_handled_per_s());
    s.ecn_rate = known(p.ecn_marked_per_s());
    s.error_rate = known(p.error_rate());
    s.up = p.state() == "ACTIVE";
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<Finding> FindingsFromWire(const std::string& node, const v1::CheckReport& report) {
  std::vector<Finding> findings;
  for (const v1::Finding& f : report.findings()) {
    Finding out;
    out.kind = f.kind();
    out.severity = f.severity() == "critical" ? Severity::kCritical : Severity::kWarning;
    out.location.type = f.location().type();
    out.location.id = f.location().id();
    out.location.node = node;
    out.location.device = f.location().device();
    out.location.port = static_cast<int>(f.location().port());
    out.summary = f.summary();
    for (const auto& [k, v] : f.evidence()) {
      if (std::isfinite(v)) out.evidence[k] = v;
    }
    out.confidence = std::isfinite(f.confidence()) ? std::clamp(f.confidence(), 0.0, 1.0) : 1.0;
    findings.push_back(std::move(out));
  }
  return findings;
}

std::vector<AgentInfo> LiveAgents(const std::vector<NodeView>& nodes) {
  std::vector<AgentInfo> live;
  for (const NodeView& n : nodes) {
    if (!n.connected || !n.up) continue;
    AgentInfo a;
    a.node = n.name;
    for (const auto& e : n.endpoints) {
      if (e.transport() != v1::TRANSPORT_UDP || e.address().empty() || e.port() > 65535) continue;
      a.endpoints.push_back({e.address(), static_cast<uint16_t>(e.port()), e.nic()});
    }
    live.push_back(std::move(a));
  }
  return live;
}

}  // namespace fw::aggregator
