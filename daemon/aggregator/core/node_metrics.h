// Per-node probe aggregates for /metrics: RTT quantiles and loss per (node, transport).
#pragma once

#include <array>
#include <string>
#include <unordered_map>

#include "daemon/aggregator/core/pair_table.h"
#include "exporter/registry.h"

namespace fw::aggregator {

// Owns the families
//   fabricwatch_node_probe_rtt_seconds{node,transport,quantile}   quantile = 0.5, 0.99, 0.999
//   fabricwatch_node_probe_loss_ratio{node,transport}
// in `registry`, and refreshes them from a PairTable. A node's value merges every pair it probes
// from (it is the source) over one window: bounded by nodes × transports, never by pairs.
// Series without data in the window stop being exported. Not thread-safe: call Update() from one
// thread (the analyzer tick, or a Registry before-render hook).
class NodeProbeMetrics {
 public:
  explicit NodeProbeMetrics(metrics::Registry& registry, Window window = Window::k60s);

  // Cost: one merge of every pair's window slots; about 1 µs per pair on this machine.
  void Update(const PairTable& table, int64_t now_ns);

 private:
  struct Series {
    metrics::Gauge* p50 = nullptr;
    metrics::Gauge* p99 = nullptr;
    metrics::Gauge* p999 = nullptr;
    metrics::Gauge* loss = nullptr;
    bool rtt_exported = false;
    bool loss_exported = false;
  };
  using NodeSeries = std::array<Series, kTransportCount>;
  void SetOrRemove(const std::string& node, Transport t, Series& s, const LogHistogram& h,
                   uint64_t probes, uint64_t lost);

  metrics::Family<metrics::Gauge>& rtt_;
  metrics::Family<metrics::Gauge>& loss_;
  Window window_;
  std::unordered_map<std::string, NodeSeries> series_;
};

}  // namespace fw::aggregator
