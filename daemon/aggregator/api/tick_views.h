// The metrics views the aggregator's tick refreshes: analysis metrics every tick, per-node and
// per-path-class probe metrics every kNodeMetricsPeriodNs, table sizes every kTableSizesPeriodNs,
// and the tick's own cost.
#pragma once

#include <cstdint>

#include "daemon/aggregator/analysis/analyzer.h"
#include "daemon/aggregator/api/analysis_metrics.h"
#include "daemon/aggregator/api/node_probe_metrics.h"
#include "daemon/aggregator/ingest/pair_table.h"
#include "exporter/registry.h"

namespace fw::aggregator {

// Not thread-safe: the tick thread only.
class TickViews {
 public:
  explicit TickViews(metrics::Registry& registry);

  // After the analyzer's tick.
  void Update(int64_t now_ns, const PairTable& pairs, const analysis::Analyzer& analyzer);
  // The tick took `seconds`.
  void TickDone(double seconds);

 private:
  // Both walk every pair (~600,000 at 16,000 agents): per-node series every few seconds are
  // enough for a scrape, and table sizes change with expiry, which runs every 10 s.
  static constexpr int64_t kNodeMetricsPeriodNs = 5'000'000'000;
  static constexpr int64_t kTableSizesPeriodNs = 10'000'000'000;
  NodeProbeMetrics node_probe_metrics_;
  analysis::AnalysisMetrics analysis_metrics_;
  metrics::Gauge& tick_seconds_;
  metrics::Gauge& pairs_held_;
  metrics::Family<metrics::Gauge>& state_bytes_;
  metrics::Gauge& pair_bytes_;
  metrics::Gauge& flow_bytes_;
  metrics::Counter& ticks_;
  int64_t last_node_metrics_ns_ = 0;
  int64_t last_table_sizes_ns_ = 0;
};

}  // namespace fw::aggregator
