// Refreshes the analyzer's metric series from its views.
#include "daemon/aggregator/api/analysis_metrics.h"

#include <set>

namespace fw::analysis {
namespace {

constexpr std::array<const char*, 15> kKinds = {
    "link_degraded",     "link_down",         "link_flapping",    "congestion",
    "switch_degraded",   "nic_degraded",      "nic_down",         "host_network",
    "port_errors",       "port_congestion",   "pcie_downtrained", "gpu_nic_locality",
    "topology_mismatch", "probe_unreachable", "collective_slow"};

}  // namespace

AnalysisMetrics::AnalysisMetrics(metrics::Registry& registry)
    : link_state_(registry.AddGauge("fabricwatch_link_state",
                                    "Link state as a StateSet: 1 for the current state.",
                                    {"link", "state"})),
      link_loss_(registry.AddGauge("fabricwatch_link_loss_ratio",
                                   "Loss ratio of the probes crossing the link (10 s window).",
                                   {"link"})),
      link_latency_(registry.AddGauge("fabricwatch_link_latency_inflation_ratio",
                                      "Mean RTT over the pairs' baseline for probes crossing the "
                                      "link (10 s window).",
                                      {"link"})),
      link_bandwidth_(registry.AddGauge(
          "fabricwatch_link_bandwidth_ratio",
          "Goodput of bandwidth probes crossing the link over their path class median.", {"link"})),
      findings_active_(registry.AddGauge("fabricwatch_findings_active",
                                         "Active findings by kind and severity.",
                                         {"kind", "severity"})),
      finding_active_(registry.AddGauge("fabricwatch_finding_active", "1 for each active finding.",
                                        {"kind", "severity", "location"})),
      tick_seconds_(
          registry
              .AddGauge("fabricwatch_analysis_tick_seconds", "Time the last analyzer tick took.")
              .WithLabels({})),
      ticks_(registry.AddCounter("fabricwatch_analysis_ticks_total", "Analyzer ticks.")
                 .WithLabels({})),
      flows_(registry
                 .AddGauge("fabricwatch_analysis_flows",
                           "Probe flows with data in the analyzer's short window.")
                 .WithLabels({})),
      cpu_saturated_bursts_(
          registry
              .AddGauge("fabricwatch_analysis_cpu_saturated_bursts",
                        "Low bandwidth bursts in the bandwidth window set aside as link evidence "
                        "because their prober's CPUs were saturated during them.")
              .WithLabels({})),
      store_errors_(registry
                        .AddCounter("fabricwatch_findings_store_errors_total",
                                    "Findings store errors (findings are kept in memory).")
                        .WithLabels({})),
      rdma_refused_(registry.AddCounter(
          "fabricwatch_analysis_rdma_series_refused_total",
          "RDMA UD series the analyzer did not create because its table was full (table: "
          "host_delay, rdma_loss; 65,536 series each).",
          {"table"})),
      rdma_host_delay_refused_(rdma_refused_.WithLabels({"host_delay"})),
      rdma_loss_refused_(rdma_refused_.WithLabels({"rdma_loss"})),
      between_tick_leads_(
          registry
              .AddCounter("fabricwatch_analysis_between_tick_leads_total",
                          "Escalation leads found between the analyzer's ticks: a lost probe just "
                          "ingested that the tick's lead rule names a link for.")
              .WithLabels({})),
      between_tick_findings_(
          registry
              .AddCounter("fabricwatch_analysis_between_tick_findings_total",
                          "Findings that fired between the analyzer's ticks: links whose escalated "
                          "probes passed the dense loss test as they arrived.")
              .WithLabels({})) {
  for (const char* kind : kKinds) {
    for (const char* severity : {"warning", "critical"}) {
      by_kind_[{kind, severity}] = &findings_active_.WithLabels({kind, severity});
    }
  }
}

void AnalysisMetrics::Update(const Analyzer& analyzer) {
  const std::vector<LinkView> links = analyzer.Links();
  if (links_.size() < links.size()) links_.resize(links.size());
  for (size_t i = 0; i < links.size(); ++i) {
    const LinkView& v = links[i];
    LinkSeries& s = links_[i];
    if (s.id != v.id) {  // first use (the map, and so the order, never changes)
      s.id = v.id;
      for (size_t k = 0; k < kLinkStates.size(); ++k) {
        s.state[k] = &link_state_.WithLabels({v.id, kLinkStates[k]});
      }
      s.loss = &link_loss_.WithLabels({v.id});
      s.latency = nullptr;
      s.bandwidth = nullptr;
    }
    for (size_t k = 0; k < kLinkStates.size(); ++k) s.state[k]->Set(v.state == kLinkStates[k]);
    s.loss->Set(v.loss_ratio);
    if (v.latency_inflation > 0) {
      if (!s.latency) s.latency = &link_latency_.WithLabels({v.id});
      s.latency->Set(v.latency_inflation);
    }
    if (v.bandwidth_ratio > 0) {
      if (!s.bandwidth) s.bandwidth = &link_bandwidth_.WithLabels({v.id});
      s.bandwidth->Set(v.bandwidth_ratio);
    }
  }

  for (auto& [key, gauge] : by_kind_) gauge->Set(0);
  std::set<std::tuple<std::string, std::string, std::string>> now_active;
  for (const TrackedFinding& f : analyzer.Findings(/*active_only=*/true)) {
    const std::string severity = SeverityName(f.finding.severity);
    auto it = by_kind_.find({f.finding.kind, severity});
    if (it == by_kind_.end()) {
      it = by_kind_
               .emplace(std::make_pair(f.finding.kind, severity),
                        &findings_active_.WithLabels({f.finding.kind, severity}))
               .first;
    }
    it->second->Add(1);
    auto key = std::make_tuple(f.finding.kind, severity, f.finding.location.id);
    auto [e, inserted] = exported_.try_emplace(key, nullptr);
    if (inserted || !e->second) {
      e->second = &finding_active_.WithLabels({f.finding.kind, severity, f.finding.location.id});
    }
    e->second->Set(1);
    now_active.insert(std::move(key));
  }
  for (auto it = exported_.begin(); it != exported_.end();) {
    if (now_active.count(it->first)) {
      ++it;
      continue;
    }
    const auto& [kind, severity, location] = it->first;
    finding_active_.Remove({kind, severity, location});
    it = exported_.erase(it);
  }

  const TickStats st = analyzer.stats();
  tick_seconds_.Set(st.last_tick_seconds);
  ticks_.Set(static_cast<double>(st.ticks));
  flows_.Set(static_cast<double>(st.flows));
  cpu_saturated_bursts_.Set(static_cast<double>(st.cpu_saturated_bursts));
  store_errors_.Set(static_cast<double>(st.store_errors));
  rdma_host_delay_refused_.Set(static_cast<double>(st.rdma_host_delay_refused));
  rdma_loss_refused_.Set(static_cast<double>(st.rdma_loss_refused));
  between_tick_leads_.Set(static_cast<double>(st.between_tick_leads));
  between_tick_findings_.Set(static_cast<double>(st.between_tick_findings));
}

}  // namespace fw::analysis
