// Fleet-level NIC port metrics from agents' counter samples (bounded by nodes × ports).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "exporter/registry.h"
#include "fabricwatch.pb.h"

namespace fw::aggregator {

// Thread-safe. Series handles are resolved once per (node, device, port) and cached.
class PortMetrics {
 public:
  explicit PortMetrics(metrics::Registry& registry);

  // Publishes the batch's ports; ports the node no longer reports stop being exported.
  void Update(const std::string& node, const fabricwatch::v1::CounterBatch& batch);
  // The node is gone: stop exporting its ports.
  void RemoveNode(const std::string& node);

  // Latest per-port signals for the analyzer and the API.
  struct PortState {
    bool up = false;
    double rate_gbps = 0;
    double error_rate = 0;        // NaN when unknown
    double congestion_ratio = 0;  // NaN when unknown
    double cnp_per_s = 0, ecn_per_s = 0;
  };
  std::map<std::string, PortState> PortsOf(const std::string& node) const;

 private:
  struct Series {
    metrics::Gauge* up;
    metrics::Gauge* rate;
    metrics::Gauge* errors;
    metrics::Gauge* congestion;
    PortState state;
  };
  static std::string Key(const std::string& device, uint32_t port);

  metrics::Family<metrics::Gauge>& up_;
  metrics::Family<metrics::Gauge>& rate_;
  metrics::Family<metrics::Gauge>& errors_;
  metrics::Family<metrics::Gauge>& congestion_;
  metrics::Counter& samples_;
  mutable Mutex mu_;
  std::map<std::string, std::map<std::string, Series>> nodes_ FW_GUARDED_BY(mu_);
};

}  // namespace fw::aggregator
