// Probe aggregates for /metrics: RTT quantiles and loss per (node, transport) and per
// (path class, transport).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <unordered_map>

#include "daemon/aggregator/ingest/pair_table.h"
#include "exporter/registry.h"

namespace fw::aggregator {

// Owns the families
//   fabricwatch_node_probe_rtt_seconds{node,transport,quantile}   quantile = 0.5, 0.99, 0.999
//   fabricwatch_node_probe_loss_ratio{node,transport}
//   fabricwatch_path_class_probe_rtt_seconds{path_class,transport,quantile}
//   fabricwatch_path_class_probe_loss_ratio{path_class,transport}
// in `registry`, and refreshes them from a PairTable. A node's value merges every pair it probes
// from (it is the source) over one window: bounded by nodes × transports, never by pairs. A path
// class's value merges every pair of that class (intra_leaf, inter_leaf, unknown without a map),
// so the fleet's in-leaf and cross-spine probes can be told apart: at most 3 × transports series.
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
  static constexpr int kPathClassCount = 3;
  // Sets the series `key` (node or path class) for transport `t` from `h`, `probes` and `lost`,
  // or removes them when there is no data.
  void SetOrRemove(metrics::Family<metrics::Gauge>& rtt, metrics::Family<metrics::Gauge>& loss,
                   const std::string& key, Transport t, Series& s, const LogHistogram& h,
                   uint64_t probes, uint64_t lost);

  metrics::Family<metrics::Gauge>& rtt_;
  metrics::Family<metrics::Gauge>& loss_;
  metrics::Family<metrics::Gauge>& class_rtt_;
  metrics::Family<metrics::Gauge>& class_loss_;
  std::array<NodeSeries, kPathClassCount> class_series_;
  // Update()'s histograms (about 160 KB: kept off the stack and reused).
  using PerTransport = std::array<LogHistogram, kTransportCount>;
  using Counts = std::array<uint64_t, kTransportCount>;
  struct Scratch {
    std::array<PerTransport, kPathClassCount> node_class, fleet_class;
    std::array<Counts, kPathClassCount> node_probes, node_lost, fleet_probes, fleet_lost;
    PerTransport node_hist;
  };
  std::unique_ptr<Scratch> scratch_ = std::make_unique<Scratch>();
  Window window_;
  std::unordered_map<std::string, NodeSeries> series_;
};

}  // namespace fw::aggregator
