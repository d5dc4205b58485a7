// Turns counter samples into findings a person can act on.
#include "probes/counters/port_checks.h"

#include <cmath>
#include <cstdio>

namespace fw::counters {
namespace {

std::string Fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), v >= 100 || v == std::floor(v) ? "%.0f" : "%.2g", v);
  return buf;
}

Finding PortFinding(const PortSample& s, const std::string& node, const char* kind, Severity sev) {
  Finding f;
  f.kind = kind;
  f.severity = sev;
  f.location = {"nic", node + "/" + s.device + "/" + std::to_string(s.port), node, s.device,
                s.port};
  return f;
}

std::string Where(const PortSample& s) { return s.device + " port " + std::to_string(s.port); }

}  // namespace

std::vector<Finding> CheckPorts(const std::vector<PortSample>& samples, const std::string& node,
                                const PortCheckOptions& o) {
  std::vector<Finding> out;
  for (const PortSample& s : samples) {
    if (s.vanished) {
      Finding f = PortFinding(s, node, "nic_down", Severity::kCritical);
      f.summary = Where(s) +
                  " disappeared from sysfs while being read; check dmesg for a PCIe or firmware "
                  "error on the HCA";
      out.push_back(std::move(f));
      continue;
    }
    for (const CounterReading& c : s.counters) {
      if (!c.spec.error || !c.valid) continue;
      if (c.saturated) {
        Finding f = PortFinding(s, node, "port_errors", Severity::kWarning);
        f.summary = Where(s) + ": " + c.name + " saturated at " + std::to_string(c.value) +
                    ", so the counter can no longer show new " + std::string(c.spec.what) +
                    "; clear the port counters (perfquery -x) to see them again";
        f.evidence[c.name] = static_cast<double>(c.value);
        f.evidence["saturated"] = 1;
        out.push_back(std::move(f));
        continue;
      }
      if (!c.rate || *c.rate <= 0) continue;
      const bool link_drop = c.spec.role == CounterRole::kLinkDowned;
      const Severity sev =
          link_drop || *c.rate >= o.error_critical_per_s ? Severity::kCritical : Severity::kWarning;
      Finding f = PortFinding(s, node, "port_errors", sev);
      f.summary =
          Where(s) + ": " + c.name + " rose by " + std::to_string(c.delta.raw) + " in " +
          Fmt(s.interval_s) + " s (" + Fmt(*c.rate) + "/s); " +
          (link_drop ? "the link went down and retrained: check the cable and the switch port"
                     : "check the cable, the transceiver and the switch port");
      f.evidence[c.name + "_per_s"] = *c.rate;
      f.evidence[c.name] = static_cast<double>(c.value);
      out.push_back(std::move(f));
    }
    if (s.xmit_wait_ratio && *s.xmit_wait_ratio >= o.xmit_wait_warning) {
      Finding f = PortFinding(
          s, node, "port_congestion",
          *s.xmit_wait_ratio >= o.xmit_wait_critical ? Severity::kCritical : Severity::kWarning);
      f.summary = Where(s) + " waited to transmit " + Fmt(100 * *s.xmit_wait_ratio) +
                  "% of the time (port_xmit_wait): the fabric behind it is congested or a peer "
                  "is slow to take data";
      f.evidence["xmit_wait_ratio"] = *s.xmit_wait_ratio;
      f.confidence = 0.8;  // rests on the tick-size assumption
      out.push_back(std::move(f));
    }
    auto roce = [&](const std::optional<double>& rate, double warn, const char* counter,
                    const char* what) {
      if (!rate || *rate < warn) return;
      Finding f = PortFinding(s, node, "port_congestion", Severity::kWarning);
      f.summary = Where(s) + " " + what + " " + Fmt(*rate) + "/s (" + counter +
                  "): RoCE congestion control is throttling traffic; look for an incast or a "
                  "congested switch queue";
      f.evidence[std::string(counter) + "_per_s"] = *rate;
      out.push_back(std::move(f));
    };
    roce(s.cnp_handled_per_s, o.cnp_handled_warning_per_s, "rp_cnp_handled", "handled CNPs at");
    roce(s.ecn_marked_per_s, o.ecn_marked_warning_per_s, "np_ecn_marked_roce_packets",
         "received ECN-marked packets at");
  }
  return out;
}

}  // namespace fw::counters
