#include "daemon/aggregator/ingest/wire_convert.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <optional>

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

namespace {

// An RDMA endpoint from Hello, checked the way the agent checks a planned one
// (rdma_wire.cc EndpointFromProto): a bad one is left out of the plans, with a log line.
std::optional<RdmaPort> RdmaPortFromWire(const std::string& node, const v1::RdmaEndpoint& e) {
  const bool ib = e.link_layer() == "InfiniBand";
  const char* why = nullptr;
  if (!ib && e.link_layer() != "Ethernet") {
    why = "unknown link layer";
  } else if (e.port() < 1 || e.port() > 255 || e.gid_index() > 255 || e.lid() > 0xffff) {
    why = "port, GID index or LID out of range";
  } else if (e.gid().size() != 16 || e.qpn() == 0 || e.qpn() > 0xffffff) {
    why = "GID not 16 bytes or QPN out of range";
  } else if (e.device().empty() || e.device().size() > 64 || e.timestamps().size() > 32) {
    why = "device or timestamp source name empty or too long";
  } else if (ib ? e.lid() == 0 : e.gid() == std::string(16, '\0')) {
    why = "no LID (InfiniBand) or no GID (RoCE)";
  }
  if (why != nullptr) {
    spdlog::warn("msg=\"rdma endpoint refused\" node={} reason=\"{}\"", node, why);
    return std::nullopt;
  }
  return RdmaPort{e.device(),    e.port(), e.link_layer(), e.lid(),       e.gid(),
                  e.gid_index(), e.qpn(),  e.qkey(),       e.timestamps()};
}

}  // namespace

std::vector<AgentInfo> LiveAgents(const std::vector<NodeView>& nodes) {
  std::vector<AgentInfo> live;
  for (const NodeView& n : nodes) {
    if (!n.connected || !n.up) continue;
    AgentInfo a;
    a.node = n.name;
    for (const auto& e : n.endpoints) {
      if (e.transport() == v1::TRANSPORT_RDMA_UD) {
        if (std::optional<RdmaPort> port = RdmaPortFromWire(n.name, e.rdma())) {
          a.rdma.push_back(std::move(*port));
        }
        continue;
      }
      if (e.transport() != v1::TRANSPORT_UDP || e.address().empty() || e.port() > 65535) continue;
      a.endpoints.push_back({e.address(), static_cast<uint16_t>(e.port()), e.nic()});
    }
    live.push_back(std::move(a));
  }
  return live;
}

}  // namespace fw::aggregator
