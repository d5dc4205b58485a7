// The analyzer's Prometheus series: link states and measurements, active findings, and the
// analyzer's own health. Every series handle is created once and cached.
#pragma once

#include <array>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "daemon/aggregator/analysis/analyzer.h"
#include "exporter/registry.h"

namespace fw::analysis {

// Owns, in `registry`:
//   fabricwatch_link_state{link,state}              StateSet: 1 for the current state, 0 otherwise
//   fabricwatch_link_loss_ratio{link}
//   fabricwatch_link_latency_inflation_ratio{link}  (exported once measured)
//   fabricwatch_link_bandwidth_ratio{link}          (exported once measured)
//   fabricwatch_findings_active{kind,severity}      every known kind × severity, 0 when none
//   fabricwatch_finding_active{kind,severity,location}   1 while active; removed when resolved
//   fabricwatch_analysis_tick_seconds, fabricwatch_analysis_ticks_total,
//   fabricwatch_analysis_flows, fabricwatch_analysis_cpu_saturated_bursts,
//   fabricwatch_findings_store_errors_total
//   fabricwatch_analysis_between_tick_leads_total
//   fabricwatch_analysis_between_tick_findings_total
//   fabricwatch_analysis_rdma_series_refused_total{table}   host_delay | rdma_loss
// Cardinality is bounded by links and active findings, never by node pairs. Not thread-safe: call
// Update() from the tick thread after Analyzer::Tick().
class AnalysisMetrics {
 public:
  static constexpr std::array<const char*, 6> kLinkStates = {"ok",       "degraded",  "down",
                                                             "flapping", "congested", "unknown"};
  explicit AnalysisMetrics(metrics::Registry& registry);
  void Update(const Analyzer& analyzer);

 private:
  struct LinkSeries {
    std::string id;
    std::array<metrics::Gauge*, kLinkStates.size()> state{};
    metrics::Gauge* loss = nullptr;
    metrics::Gauge* latency = nullptr;
    metrics::Gauge* bandwidth = nullptr;
  };
  metrics::Family<metrics::Gauge>& link_state_;
  metrics::Family<metrics::Gauge>& link_loss_;
  metrics::Family<metrics::Gauge>& link_latency_;
  metrics::Family<metrics::Gauge>& link_bandwidth_;
  metrics::Family<metrics::Gauge>& findings_active_;
  metrics::Family<metrics::Gauge>& finding_active_;
  metrics::Gauge& tick_seconds_;
  metrics::Counter& ticks_;
  metrics::Gauge& flows_;
  metrics::Gauge& cpu_saturated_bursts_;
  metrics::Counter& store_errors_;
  metrics::Family<metrics::Counter>& rdma_refused_;
  metrics::Counter& rdma_host_delay_refused_;
  metrics::Counter& rdma_loss_refused_;
  metrics::Counter& between_tick_leads_;
  metrics::Counter& between_tick_findings_;

  std::vector<LinkSeries> links_;  // in map order, as Analyzer::Links() returns them
  std::map<std::pair<std::string, std::string>, metrics::Gauge*> by_kind_;
  // Exported finding_active series: (kind, severity, location) → handle.
  std::map<std::tuple<std::string, std::string, std::string>, metrics::Gauge*> exported_;
};

}  // namespace fw::analysis
