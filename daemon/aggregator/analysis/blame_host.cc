// Host level: hosts whose own probes, or the probes to them, are bad while the other direction is
// clean are named as noisy hosts (host_network).
#include "daemon/aggregator/analysis/blamer.h"

namespace fw::analysis::blame {

void Blamer::HostLevel() {
  for (NodeId id = 0; id < ev_.hosts.size(); ++id) {
    const HostStats& h = ev_.hosts[id];
    if (!h.noisy_out && !h.noisy_in) continue;
    const std::string name = ctx_.names.NodeName(id);
    noisy_.insert(id);
    Finding f;
    f.kind = "host_network";
    f.severity = Severity::kWarning;
    f.location = FindingLocation{"node", name, name, "", 0};
    const double out = h.out_flows ? double(h.out_bad) / h.out_flows : 0;
    const double in = h.in_flows ? double(h.in_bad) / h.in_flows : 0;
    f.evidence = {{"bad_fraction_as_prober", out},
                  {"bad_fraction_as_target", in},
                  {"flows_as_prober", h.out_flows},
                  {"flows_as_target", h.in_flows}};
    const auto& by = h.noisy_out ? h.noisy_out_by : h.noisy_in_by;
    std::string signals;
    for (int s = 0; s < kSignalCount; ++s) {
      f.evidence[std::string("noisy_") + SignalName(static_cast<Signal>(s))] = by[s] ? 1 : 0;
      if (by[s]) signals += (signals.empty() ? "" : ", ") + std::string(SignalName(Signal(s)));
    }
    f.confidence = std::clamp(std::abs(out - in), 0.0, 0.99);
    const double mine = h.noisy_out ? out : in, other = h.noisy_out ? in : out;
    f.summary = name + (h.noisy_out ? "'s own probes are noisy (" : " answers probes badly (") +
                signals + "): " + Fmt("%.0f%% of the peers it ", 100 * mine) +
                (h.noisy_out ? "probes" : "is probed by") +
                Fmt(" look bad while only %.0f%% in the other direction do; the host (CPU "
                    "contention, interrupts, NIC driver) is the likely cause, not the fabric.",
                    100 * other);
    // Latency alone waits as long as latency alone does elsewhere: when the aggregator falls
    // behind, a host's own results and its peers' results about it arrive seconds apart, so a
    // queueing episode on its cable reads as slow in one role only for a while (17 such
    // findings in an 11-minute saturated 16,000-agent run). Loss or bandwidth stay quick.
    const bool latency_only = by[static_cast<int>(Signal::kLatency)] &&
                              !by[static_cast<int>(Signal::kLoss)] &&
                              !by[static_cast<int>(Signal::kBandwidth)];
    Emit("node:" + name, std::move(f), false, latency_only ? c_.latency_confirm_ticks : 0);
  }
}

}  // namespace fw::analysis::blame
