// The agent's node view: samples port counters on a schedule, re-checks the node now and then, and
// publishes the raw node metrics of DESIGN.md plus self-health counters into a metrics Registry.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "daemon/agent/node/check_command.h"
#include "exporter/registry.h"
#include "probes/counters/ethtool_stats.h"
#include "probes/counters/sampler.h"

namespace fw::agent {

struct NodeMetricsOptions {
  CheckOptions check;  // sysfs root, hwloc source, profile, node name, counter options
  std::chrono::milliseconds sample_interval{1000};
  // How often discovery, PCIe and profile checks run again (ports are sampled every interval).
  std::chrono::seconds recheck_interval{300};
  // Passes between reads of the counters' slow tier (counters::SamplerOptions::slow_every).
  int counter_slow_every = 1;
};

// The latest results, copied out for the uplink (plain structs; see check_command.h and
// probes/counters/sampler.h for field meanings).
struct NodeSnapshot {
  uint64_t seq = 0;                                // counter passes so far; 0 before the first
  int64_t wall_ns = 0;                             // when the last pass finished
  std::shared_ptr<const NodeInventory> inventory;  // null until the first successful check
  std::vector<Finding> findings;                   // inventory findings + latest port findings
  std::vector<counters::PortSample> ports;         // latest pass, with rates
  std::string last_error;  // why the last check failed, empty when it succeeded
};

// Thread-safety: Start/Stop from one owner thread; Latest() from any thread. SampleNow() must not
// be called while the background thread runs (tests drive it instead of Start()).
class NodeMetrics {
 public:
  NodeMetrics(NodeMetricsOptions options, metrics::Registry& registry, const Clock& clock);
  ~NodeMetrics();
  NodeMetrics(const NodeMetrics&) = delete;
  NodeMetrics& operator=(const NodeMetrics&) = delete;

  // Runs the first check and pass, then samples every sample_interval on a thread. Returns the
  // first check's error (the thread still runs and keeps sampling counters).
  Status Start();
  void Stop();

  // One counter pass now (and a re-check when due). Returns the check error, if one ran and failed.
  Status SampleNow();

  NodeSnapshot Latest() const;

 private:
  struct PortSeries;
  Status Recheck();
  void PublishInventory(const NodeInventory& inv);
  void PublishPorts(const std::vector<counters::PortSample>& ports);
  void PublishSelf();
  void Loop();

  NodeMetricsOptions options_;
  const Clock& clock_;
  counters::EthtoolStatsReader ethtool_;  // used by sampler_ for pause counters
  counters::Sampler sampler_;             // owned by whichever thread samples
  std::unique_ptr<topology::NodeProfile> profile_;
  int64_t last_check_mono_ns_ = 0;
  bool checked_once_ = false;

  // Families, created once.
  metrics::Family<metrics::Gauge>& port_info_;
  metrics::Family<metrics::Gauge>& port_state_;
  metrics::Family<metrics::Gauge>& port_rate_;
  metrics::Family<metrics::Counter>& xmit_bytes_;
  metrics::Family<metrics::Counter>& rcv_bytes_;
  metrics::Family<metrics::Counter>& symbol_errors_;
  metrics::Family<metrics::Counter>& link_downed_;
  metrics::Family<metrics::Counter>& rcv_errors_;
  metrics::Family<metrics::Counter>& xmit_discards_;
  metrics::Family<metrics::Counter>& xmit_wait_;
  metrics::Family<metrics::Counter>& cnp_sent_;
  metrics::Family<metrics::Counter>& cnp_handled_;
  metrics::Family<metrics::Counter>& ecn_marked_;
  metrics::Family<metrics::Gauge>& affinity_;
  metrics::Family<metrics::Gauge>& pcie_speed_;
  metrics::Family<metrics::Gauge>& pcie_width_;
  metrics::Family<metrics::Counter>& read_errors_;
  metrics::Counter& resets_;
  metrics::Counter& wraps_;
  metrics::Counter& passes_;
  metrics::Counter& check_errors_;
  metrics::Gauge& pass_seconds_;

  // Series handles per sampled port, aligned with the sampler's port list; rebuilt on rescans.
  std::vector<PortSeries*> port_series_;
  std::vector<std::unique_ptr<PortSeries>> all_series_;
  std::vector<std::vector<std::string>> published_ports_;  // label values of live series
  uint64_t seen_rescans_ = ~uint64_t{0};
  std::vector<std::vector<std::string>> affinity_labels_, pcie_labels_;

  mutable Mutex mu_;
  NodeSnapshot latest_ FW_GUARDED_BY(mu_);
  std::vector<Finding> inventory_findings_ FW_GUARDED_BY(mu_);
  CondVar cv_;
  bool stop_ FW_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fw::agent
