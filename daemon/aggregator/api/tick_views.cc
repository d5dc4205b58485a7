#include "daemon/aggregator/api/tick_views.h"

namespace fw::aggregator {

TickViews::TickViews(metrics::Registry& registry)
    : node_probe_metrics_(registry),
      analysis_metrics_(registry),
      tick_seconds_(
          registry
              .AddGauge("fabricwatch_aggregator_tick_seconds", "Time the last analysis tick took.")
              .WithLabels({})),
      pairs_held_(registry
                      .AddGauge("fabricwatch_aggregator_pairs",
                                "Probe pairs whose windows the aggregator holds (updated every "
                                "10 s).")
                      .WithLabels({})),
      state_bytes_(registry.AddGauge(
          "fabricwatch_aggregator_state_bytes",
          "Memory held for per-pair and per-flow state, by table (updated every 10 s; the process "
          "RSS also holds sessions, buffers and malloc's free pages).",
          {"table"})),
      pair_bytes_(state_bytes_.WithLabels({"pairs"})),
      flow_bytes_(state_bytes_.WithLabels({"flows"})),
      ticks_(registry.AddCounter("fabricwatch_aggregator_ticks_total", "Analysis ticks run.")
                 .WithLabels({})) {}

void TickViews::Update(int64_t now, const PairTable& pairs, const analysis::Analyzer& analyzer) {
  analysis_metrics_.Update(analyzer);
  if (now - last_node_metrics_ns_ >= kNodeMetricsPeriodNs) {
    last_node_metrics_ns_ = now;
    node_probe_metrics_.Update(pairs, now);
  }
  if (now - last_table_sizes_ns_ >= kTableSizesPeriodNs) {
    last_table_sizes_ns_ = now;
    pairs_held_.Set(static_cast<double>(pairs.PairCount()));
    pair_bytes_.Set(static_cast<double>(pairs.PairBytes()));
    flow_bytes_.Set(static_cast<double>(analyzer.flows().MemoryBytes()));
  }
}

void TickViews::TickDone(double seconds) {
  tick_seconds_.Set(seconds);
  ticks_.Inc();
}

}  // namespace fw::aggregator
