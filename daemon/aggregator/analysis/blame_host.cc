// Host level: hosts whose own probes, or the probes to them, are bad while the other direction is
// clean are named as noisy hosts (host_network), and so are hosts whose CPUs were saturated or
// under CPU pressure during their bandwidth bursts, whose low goodput the analyzer set aside as
// link evidence.
#include "daemon/aggregator/analysis/blamer.h"

namespace fw::analysis::blame {
namespace {

// The CPU evidence of a host whose low bursts were set aside, and the sentence that says it.
bool CpuSaturated(const HostStats& h, const AnalysisConfig& c) {
  return h.cpu_saturated_bursts > 0 &&
         h.cpu_saturated_bursts >= static_cast<uint32_t>(std::max(1, c.host_cpu_saturated_bursts));
}

void AddCpuEvidence(const HostStats& h, Finding& f) {
  const double n = h.cpu_saturated_bursts;
  const double busy_n = n - h.cpu_pressure_bursts;
  f.evidence["cpu_saturated_bursts"] = n;
  f.evidence["bursts"] = h.bursts;
  if (busy_n > 0) f.evidence["cpu_busy"] = h.cpu_busy_sum / busy_n;
  if (h.cpu_peak_max >= 0) f.evidence["cpu_busiest"] = h.cpu_peak_max;
  if (h.cpu_pressure_bursts > 0) {
    f.evidence["cpu_pressure_bursts"] = h.cpu_pressure_bursts;
    f.evidence["cpu_pressure"] = h.cpu_pressure_sum / h.cpu_pressure_bursts;
  }
  f.evidence["bandwidth_ratio"] = h.cpu_bw_ratio_sum / n;
}

// The mean of the shares that set the bursts aside (busy or pressure): the finding's confidence.
double CpuConfidence(const HostStats& h) {
  return std::clamp((h.cpu_busy_sum + h.cpu_pressure_sum) / h.cpu_saturated_bursts, 0.0, 0.99);
}

// The finding's sentence: the mean busy share (and the busiest CPU) of the bursts the busy rule
// set aside, the mean pressure share of those the pressure rule set aside, each with its count
// when a host has both kinds; then the goodput they reached and why no link is blamed.
std::string CpuSentence(const std::string& name, const HostStats& h, double window_s) {
  const double n = h.cpu_saturated_bursts;
  const double pressure_n = h.cpu_pressure_bursts;
  const double busy_n = n - pressure_n;
  std::string what;
  if (busy_n > 0) {
    what = Fmt("'s CPUs were %.0f%% busy on average", 100 * h.cpu_busy_sum / busy_n) +
           (h.cpu_peak_max >= 0 ? Fmt(" (its busiest CPU %.0f%%)", 100 * h.cpu_peak_max) : "");
  }
  if (pressure_n > 0) {
    what += (busy_n > 0 ? Fmt(" during %.0f, and its", busy_n) : std::string("'s")) +
            Fmt(" CPU pressure was %.0f%% on average (the share of the time around each burst "
                "during which its runnable tasks waited for a CPU)",
                100 * h.cpu_pressure_sum / pressure_n);
    if (busy_n > 0) what += Fmt(" during %.0f,", pressure_n);
  }
  const bool both = busy_n > 0 && pressure_n > 0;
  return name + what +
         (both ? Fmt(" of its %.0f bandwidth bursts", h.bursts)
               : Fmt(" during %.0f of its %.0f bandwidth bursts", n, h.bursts)) +
         Fmt(" in the last %.0f s, which reached %.2f of the expected goodput: the host limited "
             "them, not the fabric, and they are not counted against any link.",
             window_s, h.cpu_bw_ratio_sum / n);
}

}  // namespace

void Blamer::HostLevel() {
  for (NodeId id = 0; id < ev_.hosts.size(); ++id) {
    const HostStats& h = ev_.hosts[id];
    const bool cpu = CpuSaturated(h, c_);
    if (!h.noisy_out && !h.noisy_in && !cpu) continue;
    const std::string name = ctx_.names.NodeName(id);
    Finding f;
    f.kind = "host_network";
    f.severity = Severity::kWarning;
    f.location = FindingLocation{"node", name, name, "", 0};
    if (!h.noisy_out && !h.noisy_in) {
      // Saturated CPUs alone: the figures of its set-aside bursts.
      AddCpuEvidence(h, f);
      f.confidence = CpuConfidence(h);
      f.summary = CpuSentence(name, h, c_.bandwidth_window_s);
      Emit("node:" + name, std::move(f), false);
      continue;
    }
    noisy_.insert(id);
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
    if (cpu) {
      AddCpuEvidence(h, f);
      f.summary += " " + CpuSentence(name, h, c_.bandwidth_window_s);
    }
    // Latency alone waits as long as latency alone does elsewhere: when the aggregator falls
    // behind, a host's own results and its peers' results about it arrive seconds apart, so a
    // queueing episode on its cable reads as slow in one role only for a while (17 such
    // findings in an 11-minute saturated 16,000-agent run). Loss or bandwidth stay quick.
    const bool latency_only = by[static_cast<int>(Signal::kLatency)] &&
                              !by[static_cast<int>(Signal::kLoss)] &&
                              !by[static_cast<int>(Signal::kBandwidth)] && !cpu;
    Emit("node:" + name, std::move(f), false, latency_only ? c_.latency_confirm_ticks : 0);
  }
}

}  // namespace fw::analysis::blame
