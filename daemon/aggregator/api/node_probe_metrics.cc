// Refreshes the per-node probe gauges from the pair windows.
#include "daemon/aggregator/api/node_probe_metrics.h"

#include <algorithm>
#include <unordered_set>

namespace fw::aggregator {

NodeProbeMetrics::NodeProbeMetrics(metrics::Registry& registry, Window window)
    : rtt_(registry.AddGauge("fabricwatch_node_probe_rtt_seconds",
                             "Probe round-trip time quantiles over all peers a node probes, over "
                             "the last minute.",
                             {"node", "transport", "quantile"})),
      loss_(registry.AddGauge("fabricwatch_node_probe_loss_ratio",
                              "Fraction of a node's probes lost over the last minute.",
                              {"node", "transport"})),
      class_rtt_(registry.AddGauge("fabricwatch_path_class_probe_rtt_seconds",
                                   "Probe round-trip time quantiles over all pairs of a path class "
                                   "(intra_leaf, inter_leaf, unknown), over the last minute.",
                                   {"path_class", "transport", "quantile"})),
      class_loss_(registry.AddGauge("fabricwatch_path_class_probe_loss_ratio",
                                    "Fraction of the probes of a path class lost over the last "
                                    "minute.",
                                    {"path_class", "transport"})),
      window_(window) {}

void NodeProbeMetrics::SetOrRemove(metrics::Family<metrics::Gauge>& rtt,
                                   metrics::Family<metrics::Gauge>& loss, const std::string& key,
                                   Transport t, Series& s, const LogHistogram& h, uint64_t probes,
                                   uint64_t lost) {
  const std::string transport(TransportName(t));
  const std::array<std::pair<const char*, metrics::Gauge**>, 3> quantiles = {
      std::pair{"0.5", &s.p50}, std::pair{"0.99", &s.p99}, std::pair{"0.999", &s.p999}};
  if (h.Count() > 0) {
    // WithLabels() also revives a removed series; the handles are cached after the first call.
    if (!s.rtt_exported) {
      for (auto& [q, gauge] : quantiles) *gauge = &rtt.WithLabels({key, transport, q});
      s.rtt_exported = true;
    }
    s.p50->Set(h.QuantileSeconds(0.5));
    s.p99->Set(h.QuantileSeconds(0.99));
    s.p999->Set(h.QuantileSeconds(0.999));
  } else if (s.rtt_exported) {
    for (auto& [q, gauge] : quantiles) rtt.Remove({key, transport, q});
    s.rtt_exported = false;
  }
  if (probes > 0) {
    if (!s.loss_exported) {
      s.loss = &loss.WithLabels({key, transport});
      s.loss_exported = true;
    }
    s.loss->Set(static_cast<double>(lost) / static_cast<double>(probes));
  } else if (s.loss_exported) {
    loss.Remove({key, transport});
    s.loss_exported = false;
  }
}

void NodeProbeMetrics::Update(const PairTable& table, int64_t now_ns) {
  // One merge per pair, into its source node's per-class histograms; node and class totals are
  // then sums of those (per node, not per pair), so the class series add no per-pair work.
  Scratch& x = *scratch_;
  auto& node_class = x.node_class;
  auto& fleet_class = x.fleet_class;
  auto& node_probes = x.node_probes;
  auto& node_lost = x.node_lost;
  auto& fleet_probes = x.fleet_probes;
  auto& fleet_lost = x.fleet_lost;
  auto& node_hist = x.node_hist;
  for (auto& per_t : fleet_class) {
    for (auto& h : per_t) h.Clear();
  }
  fleet_probes = {};
  fleet_lost = {};
  std::unordered_set<std::string> seen;
  for (const std::string& node : table.SourceNodes()) {
    for (auto& per_t : node_class) {
      for (auto& h : per_t) h.Clear();
    }
    node_probes = {};
    node_lost = {};
    table.ForEachWindowsFrom(node, [&](Transport transport, PathClass path_class,
                                       const PairWindows& windows) {
      const auto t = static_cast<size_t>(transport);
      const auto c = std::min<size_t>(static_cast<size_t>(path_class), kPathClassCount - 1);
      windows.MergeInto(now_ns, window_, node_class[c][t], &node_probes[c][t], &node_lost[c][t]);
    });
    NodeSeries& ns = series_[node];
    for (int t = 0; t < kTransportCount; ++t) {
      LogHistogram& h = node_hist[t];
      h.Clear();
      uint64_t probes = 0, lost = 0;
      for (int c = 0; c < kPathClassCount; ++c) {
        if (node_probes[c][t] == 0 && node_class[c][t].Count() == 0) continue;
        h.Merge(node_class[c][t]);
        fleet_class[c][t].Merge(node_class[c][t]);
        probes += node_probes[c][t];
        lost += node_lost[c][t];
        fleet_probes[c][t] += node_probes[c][t];
        fleet_lost[c][t] += node_lost[c][t];
      }
      SetOrRemove(rtt_, loss_, node, static_cast<Transport>(t), ns[t], h, probes, lost);
    }
    seen.insert(node);
  }
  for (int c = 0; c < kPathClassCount; ++c) {
    const std::string name(PathClassName(static_cast<PathClass>(c)));
    for (int t = 0; t < kTransportCount; ++t) {
      SetOrRemove(class_rtt_, class_loss_, name, static_cast<Transport>(t), class_series_[c][t],
                  fleet_class[c][t], fleet_probes[c][t], fleet_lost[c][t]);
    }
  }
  // Nodes whose pairs were all dropped: stop exporting them.
  for (auto it = series_.begin(); it != series_.end();) {
    if (seen.contains(it->first)) {
      ++it;
      continue;
    }
    for (int t = 0; t < kTransportCount; ++t) {
      SetOrRemove(rtt_, loss_, it->first, static_cast<Transport>(t), it->second[t], LogHistogram(),
                  0, 0);
    }
    it = series_.erase(it);
  }
}

}  // namespace fw::aggregator
