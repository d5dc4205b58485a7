// Host-delay level: the host delays that rdma_ud probes split off their network RTT (host_delay.h).
// A host slow to post, poll or answer is named as such (host_network); when only one of its RDMA
// devices is slow while another in the same role is quick, that NIC is (nic_degraded). Neither is
// a link: the network RTT, measured between the NICs, goes to link localization on its own.
#include "daemon/aggregator/analysis/blamer.h"

namespace fw::analysis::blame {

namespace {

const char* RoleName(HostRole r) { return r == HostRole::kProber ? "prober" : "responder"; }

const char* RoleWork(HostRole r) {
  return r == HostRole::kProber ? "posting and polling its probes"
                                : "turning probes around (arrival at its NIC to the ack leaving)";
}

// "as prober (posting ...) 4.20 ms median over 30 probes, 840x the fleet's 0.005 ms" and evidence.
std::string DescribeDelay(const HostDelayVerdict& v, Finding& f) {
  const std::string role = RoleName(v.role);
  f.evidence[role + "_host_delay_ms"] = v.median_ns * 1e-6;
  f.evidence[role + "_host_delay_samples"] = v.samples;
  std::string out = "as " + role + " (" + RoleWork(v.role) + ") " +
                    Fmt("%.3g ms median over %.0f probes", v.median_ns * 1e-6, v.samples);
  if (v.fleet_median_ns > 0) {
    f.evidence["fleet_" + role + "_host_delay_ms"] = v.fleet_median_ns * 1e-6;
    out += Fmt(", %.0fx the fleet's %.3g ms", v.median_ns / v.fleet_median_ns,
               v.fleet_median_ns * 1e-6);
  }
  return out;
}

double ConfidenceOf(uint32_t samples) { return std::min(0.95, samples / (samples + 5.0)); }

}  // namespace

void Blamer::HostDelayLevel() {
  // By node, in the verdicts' order (node, device, role).
  std::map<NodeId, std::vector<const HostDelayVerdict*>> by_node;
  for (const HostDelayVerdict& v : ev_.host_delays) by_node[v.node].push_back(&v);
  for (const auto& [id, list] : by_node) {
    // A high device whose node has a quick device in the same role is that NIC; the rest is the
    // host's (one device, all devices, or devices the agent did not name).
    std::vector<const HostDelayVerdict*> host, quick_peers;
    std::vector<std::pair<const HostDelayVerdict*, std::vector<std::string>>> nics;
    for (const HostDelayVerdict* v : list) {
      if (!v->high) continue;
      std::vector<std::string> quick;
      for (const HostDelayVerdict* w : list) {
        if (w->role == v->role && !w->high && !w->device.empty()) quick.push_back(w->device);
      }
      if (v->device.empty() || quick.empty()) {
        host.push_back(v);
      } else {
        nics.emplace_back(v, std::move(quick));
      }
    }
    if (host.empty() && nics.empty()) continue;
    const std::string node = ctx_.names.NodeName(id);
    for (const auto& [v, quick] : nics) {
      Finding f;
      f.kind = "nic_degraded";
      f.severity = Severity::kWarning;
      f.location = FindingLocation{"nic", node + "/" + v->device, node, v->device, 0};
      std::string others;
      for (const std::string& d : quick) others += (others.empty() ? "" : ", ") + d;
      f.summary = "NIC " + v->device + " on " + node + " is slow with RDMA probes " +
                  DescribeDelay(*v, f) + ", while " + others +
                  " on the same host is quick in that role: the NIC, its driver or its "
                  "interrupt line, not the fabric (the network RTT is measured apart).";
      f.evidence["quick_devices"] = static_cast<double>(quick.size());
      f.confidence = ConfidenceOf(v->samples);
      Merge("nic:" + node + "/" + v->device, std::move(f));
    }
    if (host.empty()) continue;
    Finding f;
    f.kind = "host_network";
    f.severity = Severity::kWarning;
    f.location = FindingLocation{"node", node, node, "", 0};
    std::string parts;
    uint32_t samples = 0;
    for (const HostDelayVerdict* v : host) {
      parts += (parts.empty() ? "" : "; ") + DescribeDelay(*v, f);
      if (!v->device.empty()) parts += " on " + v->device;
      samples = std::max(samples, v->samples);
    }
    f.summary = node + "'s own RDMA host delay is high, " + parts +
                ": the host (CPU contention, interrupts, driver) delays these probes, not the "
                "fabric (the network RTT is measured apart, between the NICs).";
    f.confidence = ConfidenceOf(samples);
    Merge("node:" + node, std::move(f));
  }
}

void Blamer::Merge(const std::string& key, Finding f) {
  for (auto& [element, obs] : ev_.observations) {
    if (element != key) continue;
    // Named by an earlier level this tick: its kind stays, the delays add evidence.
    for (auto& [name, value] : f.evidence) obs.finding.evidence.emplace(name, value);
    obs.finding.summary += " RDMA host delays agree: " + f.summary;
    obs.finding.confidence = std::max(obs.finding.confidence, f.confidence);
    return;
  }
  Emit(key, std::move(f), false);
}

}  // namespace fw::analysis::blame
