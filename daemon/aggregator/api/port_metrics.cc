// Fleet port metrics.
#include "daemon/aggregator/api/port_metrics.h"

#include <cmath>

namespace fw::aggregator {

PortMetrics::PortMetrics(metrics::Registry& r)
    : up_(r.AddGauge("fabricwatch_nic_port_up",
                     "1 when the port is ACTIVE and its physical link is up.",
                     {"node", "device", "port"})),
      rate_(r.AddGauge("fabricwatch_nic_port_rate_gbps", "Port link rate in Gbit/s.",
                       {"node", "device", "port"})),
      errors_(r.AddGauge("fabricwatch_nic_port_error_rate",
                         "Sum of the port's error-counter rates, events/s (NaN: unknown, e.g. a "
                         "saturated counter).",
                         {"node", "device", "port"})),
      congestion_(r.AddGauge("fabricwatch_nic_port_congestion_ratio",
                             "Fraction of time the port waited to send (port_xmit_wait).",
                             {"node", "device", "port"})),
      samples_(r.AddCounter("fabricwatch_ingest_port_samples_total",
                            "Port samples received from agents.")
                   .WithLabels({})) {}

std::string PortMetrics::Key(const std::string& device, uint32_t port) {
  return device + "/" + std::to_string(port);
}

void PortMetrics::Update(const std::string& node, const fabricwatch::v1::CounterBatch& batch) {
  MutexLock lock(mu_);
  auto& ports = nodes_[node];
  std::map<std::string, bool> seen;
  for (const auto& p : batch.ports()) {
    std::string key = Key(p.device(), p.port());
    seen[key] = true;
    auto it = ports.find(key);
    std::vector<std::string> labels{node, p.device(), std::to_string(p.port())};
    if (it == ports.end()) {
      Series s{&up_.WithLabels(labels), &rate_.WithLabels(labels), &errors_.WithLabels(labels),
               &congestion_.WithLabels(labels), {}};
      it = ports.emplace(key, s).first;
    } else {
      // A port that comes back after being removed is exported again.
      up_.WithLabels(labels);
      rate_.WithLabels(labels);
      errors_.WithLabels(labels);
      congestion_.WithLabels(labels);
    }
    Series& s = it->second;
    s.state.up = p.state() == "ACTIVE" && (p.phys_state().empty() || p.phys_state() == "LinkUp");
    s.state.rate_gbps = p.rate_gbps();
    s.state.error_rate = p.error_rate();
    s.state.congestion_ratio = p.congestion_ratio();
    s.state.cnp_per_s = p.cnp_handled_per_s();
    s.state.ecn_per_s = p.ecn_marked_per_s();
    s.up->Set(s.state.up ? 1 : 0);
    s.rate->Set(s.state.rate_gbps);
    s.errors->Set(s.state.error_rate);
    s.congestion->Set(s.state.congestion_ratio);
    samples_.Inc();
  }
  for (auto it = ports.begin(); it != ports.end();) {
    if (seen.count(it->first)) {
      ++it;
      continue;
    }
    auto slash = it->first.rfind('/');
    std::vector<std::string> labels{node, it->first.substr(0, slash), it->first.substr(slash + 1)};
    up_.Remove(labels);
    rate_.Remove(labels);
    errors_.Remove(labels);
    congestion_.Remove(labels);
    it = ports.erase(it);
  }
}

void PortMetrics::RemoveNode(const std::string& node) {
  fabricwatch::v1::CounterBatch empty;
  Update(node, empty);
  MutexLock lock(mu_);
  nodes_.erase(node);
}

std::map<std::string, PortMetrics::PortState> PortMetrics::PortsOf(const std::string& node) const {
  MutexLock lock(mu_);
  std::map<std::string, PortState> out;
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return out;
  for (const auto& [k, s] : it->second) out[k] = s.state;
  return out;
}

}  // namespace fw::aggregator
