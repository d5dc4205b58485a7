// Node snapshot → proto conversion.
#include "daemon/agent/node_report.h"

#include <cmath>
#include <limits>

#include "probes/topology/affinity.h"

namespace fw::agent {

namespace v1 = fabricwatch::v1;

namespace {

constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();

double Or(const std::optional<double>& v) { return v ? *v : kUnknown; }

int NumaOf(const topology::NodeTopology& topo, int node_index) {
  if (node_index < 0 || node_index >= static_cast<int>(topo.nodes.size())) return -1;
  const auto& numa = topo.nodes[node_index].numa;
  return numa.size() == 1 ? numa[0] : -1;
}

}  // namespace

v1::Inventory InventoryToProto(const NodeInventory& inv) {
  v1::Inventory out;
  const topology::NodeTopology& topo = inv.topology;
  out.set_hostname(inv.node);
  out.set_source(topo.source);
  out.set_packages(static_cast<uint32_t>(topo.packages));
  out.set_numa_nodes(static_cast<uint32_t>(topo.numa_nodes.size()));
  for (size_t i = 0; i < topo.gpus.size(); ++i) {
    const topology::Gpu& g = topo.gpus[i];
    v1::Gpu* pg = out.add_gpus();
    pg->set_bus_id(g.bdf);
    pg->set_name(g.model.empty() ? g.name : g.name + " " + g.model);
    pg->set_vendor_id(g.vendor_id);
    pg->set_device_id(g.device_id);
    pg->set_numa_node(NumaOf(topo, g.node_index));
    const topology::Affinity& aff = inv.affinity;
    if (i < aff.best_nics.size() && !aff.best_nics[i].empty()) {
      pg->set_best_nic(aff.best_nics[i][0]);
      if (aff.best_class[i]) pg->set_affinity_class(topology::PathClassName(*aff.best_class[i]));
    }
  }
  for (const topology::Nic& n : topo.nics) {
    v1::Nic* pn = out.add_nics();
    pn->set_bus_id(n.bdf);
    pn->set_device(n.name);
    if (!n.netdevs.empty()) pn->set_netdev(n.netdevs[0]);
    pn->set_vendor_id(n.vendor_id);
    pn->set_device_id(n.device_id);
    pn->set_numa_node(NumaOf(topo, n.node_index));
    for (const std::string& f : inv.fabric_nics) {
      if (f == n.name) pn->set_fabric(true);
    }
    for (const topology::PortFacts& p : inv.port_facts) {
      if (p.device != n.name) continue;
      pn->set_link_layer(p.link_layer);
      if (p.rate_gbps) pn->set_rate_gbps(*p.rate_gbps);
      break;
    }
  }
  return out;
}

v1::Finding FindingToProto(const Finding& f) {
  v1::Finding out;
  out.set_kind(f.kind);
  out.set_severity(SeverityName(f.severity));
  out.set_active(true);
  out.set_summary(f.summary);
  out.set_confidence(f.confidence);
  v1::Location* loc = out.mutable_location();
  loc->set_type(f.location.type);
  loc->set_id(f.location.id);
  loc->set_node(f.location.node);
  loc->set_device(f.location.device);
  loc->set_port(static_cast<uint32_t>(std::max(0, f.location.port)));
  for (const auto& [k, v] : f.evidence) (*out.mutable_evidence())[k] = v;
  return out;
}

namespace {

// The base's readings of `p`: the port at the same index when it is that port (the sampler keeps
// its ports' order), else the one of the same name; null when the base lacks it.
const CounterMapBase::Port* BasePort(const CounterMapBase& base, size_t index,
                                     const counters::PortSample& p) {
  auto same = [&](const CounterMapBase::Port& b) { return b.port == p.port && b.device == p.device; };
  if (index < base.ports.size() && same(base.ports[index])) return &base.ports[index];
  for (const CounterMapBase::Port& b : base.ports) {
    if (same(b)) return &b;
  }
  return nullptr;
}

// Whether counter `j` of a port goes into a partial map: readable, and not the base's value (a
// counter the base read under another name at that index, or lacks, counts as changed).
bool Changed(const CounterMapBase::Port* base, size_t j, const counters::CounterReading& c) {
  if (!c.valid) return false;
  if (base == nullptr || j >= base->readings.size()) return true;
  const CounterMapBase::Reading& b = base->readings[j];
  return !b.valid || b.value != c.value || b.name != c.name;
}

}  // namespace

v1::CounterBatch CounterBatchToProto(const NodeSnapshot& snap, const CounterMapBase* base) {
  if (base != nullptr && base->sampled_unix_ns == 0) base = nullptr;
  v1::CounterBatch out;
  out.set_sampled_unix_ns(snap.wall_ns);
  if (base != nullptr) out.set_counters_base_unix_ns(base->sampled_unix_ns);
  for (size_t i = 0; i < snap.ports.size(); ++i) {
    const counters::PortSample& p = snap.ports[i];
    const CounterMapBase::Port* base_port = base ? BasePort(*base, i, p) : nullptr;
    v1::PortSample* ps = out.add_ports();
    ps->set_device(p.device);
    ps->set_port(static_cast<uint32_t>(std::max(0, p.port)));
    ps->set_state(p.state);
    ps->set_phys_state(p.phys_state);
    ps->set_rate_gbps(Or(p.rate_gbps));
    ps->set_link_layer(p.link_layer);
    ps->set_xmit_bytes_per_s(Or(p.xmit_bytes_per_s));
    ps->set_rcv_bytes_per_s(Or(p.rcv_bytes_per_s));
    ps->set_congestion_ratio(Or(p.xmit_wait_ratio));
    ps->set_cnp_sent_per_s(Or(p.cnp_sent_per_s));
    ps->set_cnp_handled_per_s(Or(p.cnp_handled_per_s));
    ps->set_ecn_marked_per_s(Or(p.ecn_marked_per_s));
    // The error rate sums every error signal's rate; one unknown error rate makes the sum unknown
    // only if no error counter had a known rate.
    double errors = 0;
    bool any_known = false;
    for (size_t j = 0; j < p.counters.size(); ++j) {
      const counters::CounterReading& c = p.counters[j];
      if (Changed(base_port, j, c)) {  // without a base (base_port null): every readable one
        (*ps->mutable_counters())[c.name] = c.Scaled();
      }
      if (c.spec.error && c.rate) {
        errors += *c.rate;
        any_known = true;
      }
    }
    ps->set_error_rate(any_known ? errors : kUnknown);
  }
  return out;
}

void SetCounterMapBase(const NodeSnapshot& snap, CounterMapBase& base) {
  base.sampled_unix_ns = snap.wall_ns;
  base.ports.resize(snap.ports.size());
  for (size_t i = 0; i < snap.ports.size(); ++i) {
    const counters::PortSample& p = snap.ports[i];
    CounterMapBase::Port& b = base.ports[i];
    b.device = p.device;
    b.port = p.port;
    b.readings.resize(p.counters.size());
    for (size_t j = 0; j < p.counters.size(); ++j) {
      b.readings[j].name = p.counters[j].name;
      b.readings[j].valid = p.counters[j].valid;
      b.readings[j].value = p.counters[j].value;
    }
  }
}

v1::CounterBatch CounterBatcher::Next(const NodeSnapshot& snap, Clock::time_point now) {
  if (base_.sampled_unix_ns != 0 && now - last_full_ < full_every_) {
    return CounterBatchToProto(snap, &base_);
  }
  v1::CounterBatch out = CounterBatchToProto(snap);
  SetCounterMapBase(snap, base_);
  last_full_ = now;
  return out;
}

v1::CheckReport CheckReportToProto(const NodeSnapshot& snap) {
  v1::CheckReport out;
  if (snap.inventory) {
    NodeCheckResult result;
    result.inventory = *snap.inventory;
    result.ports = snap.ports;
    result.findings = snap.findings;
    out.set_json(CheckResultToJson(result).dump());
  }
  out.set_exit_code(snap.inventory ? ExitCodeForFindings(snap.findings) : 3);
  for (const Finding& f : snap.findings) *out.add_findings() = FindingToProto(f);
  return out;
}

}  // namespace fw::agent
