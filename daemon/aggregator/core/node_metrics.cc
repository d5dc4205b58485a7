// Refreshes the per-node probe gauges from the pair windows.
#include "daemon/aggregator/core/node_metrics.h"

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
      window_(window) {}

void NodeProbeMetrics::SetOrRemove(const std::string& node, Transport t, Series& s,
                                   const LogHistogram& h, uint64_t probes, uint64_t lost) {
  const std::string transport(TransportName(t));
  const std::array<std::pair<const char*, metrics::Gauge**>, 3> quantiles = {
      std::pair{"0.5", &s.p50}, std::pair{"0.99", &s.p99}, std::pair{"0.999", &s.p999}};
  if (h.Count() > 0) {
    // WithLabels() also revives a removed series; the handles are cached after the first call.
    if (!s.rtt_exported) {
      for (auto& [q, gauge] : quantiles) *gauge = &rtt_.WithLabels({node, transport, q});
      s.rtt_exported = true;
    }
    s.p50->Set(h.QuantileSeconds(0.5));
    s.p99->Set(h.QuantileSeconds(0.99));
    s.p999->Set(h.QuantileSeconds(0.999));
  } else if (s.rtt_exported) {
    for (auto& [q, gauge] : quantiles) rtt_.Remove({node, transport, q});
    s.rtt_exported = false;
  }
  if (probes > 0) {
    if (!s.loss_exported) {
      s.loss = &loss_.WithLabels({node, transport});
      s.loss_exported = true;
    }
    s.loss->Set(static_cast<double>(lost) / static_cast<double>(probes));
  } else if (s.loss_exported) {
    loss_.Remove({node, transport});
    s.loss_exported = false;
  }
}

void NodeProbeMetrics::Update(const PairTable& table, int64_t now_ns) {
  std::array<LogHistogram, kTransportCount> hists;
  std::unordered_set<std::string> seen;
  for (const std::string& node : table.SourceNodes()) {
    std::array<uint64_t, kTransportCount> probes{}, lost{};
    for (auto& h : hists) h.Clear();
    table.ForEachPairFrom(node, [&](const PairView& v) {
      const auto t = static_cast<size_t>(v.transport);
      v.windows.MergeInto(now_ns, window_, hists[t], &probes[t], &lost[t]);
    });
    NodeSeries& ns = series_[node];
    for (int t = 0; t < kTransportCount; ++t) {
      SetOrRemove(node, static_cast<Transport>(t), ns[t], hists[t], probes[t], lost[t]);
    }
    seen.insert(node);
  }
  // Nodes whose pairs were all dropped: stop exporting them.
  for (auto it = series_.begin(); it != series_.end();) {
    if (seen.contains(it->first)) {
      ++it;
      continue;
    }
    for (int t = 0; t < kTransportCount; ++t) {
      SetOrRemove(it->first, static_cast<Transport>(t), it->second[t], LogHistogram(), 0, 0);
    }
    it = series_.erase(it);
  }
}

}  // namespace fw::aggregator
