// RDMA host delays (docs/rdma.md): the agent splits each UD probe's round trip into the network
// RTT between the two NICs and the delays of the hosts themselves (the prober's posting and
// polling, the responder's turnaround). The network RTT feeds the flows like any RTT; the host
// delays are kept here, per node, device and role, and judged against the fleet's: a host that
// is slow to post, poll or answer is a host problem, not a link.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "common/mutex.h"
#include "daemon/aggregator/model/name_interner.h"
#include "daemon/aggregator/model/reported_probe.h"

namespace fw::analysis {

enum class HostRole : uint8_t {
  kProber = 0,     // posting the probe and polling its ack
  kResponder = 1,  // from the probe's arrival at its NIC to the ack's departure
};

struct HostDelayLimits {
  double window_s = 10;           // samples older than this are not judged
  uint32_t min_samples = 5;       // per (node, device, role) in the window
  double floor_ns = 1e6;          // a median under this is never high
  double fleet_ratio = 5;         // ...nor one under this many times the fleet's median
  uint32_t fleet_min_series = 3;  // fewer series than this: the floor alone judges
};

// One (node, device, role) with enough samples in the window.
struct HostDelayVerdict {
  aggregator::NodeId node = aggregator::kNoNode;
  std::string device;  // empty when the agent did not name it
  HostRole role = HostRole::kProber;
  uint32_t samples = 0;
  double median_ns = 0;
  double fleet_median_ns = 0;  // the median of the role's series' medians; 0 below fleet_min_series
  bool high = false;
};

// Thread-safe: Record() runs on ingest threads, Judge() on the tick thread.
class HostDelays {
 public:
  // Series beyond this many are not created (and counted): a bound on memory whatever agents send.
  static constexpr size_t kMaxSeries = 1 << 16;
  static constexpr size_t kRing = 32;  // the latest samples a series keeps

  // Keeps the host delays of answered rdma_ud results (the others carry none). Results must name
  // their nodes by id (ingest); those without are skipped.
  void Record(std::span<const aggregator::ReportedProbe> results, int64_t now_ns);
  // Every series with at least min_samples in the window, judged; series idle for longer than the
  // window are dropped. Sorted by (node, device, role).
  std::vector<HostDelayVerdict> Judge(int64_t now_ns, const HostDelayLimits& limits);
  uint64_t refused() const;

 private:
  struct Series {
    std::array<std::pair<int64_t, int64_t>, kRing> ring{};  // (arrival ns, delay ns)
    size_t next = 0;
    size_t size = 0;
    int64_t last_ns = 0;
  };
  using Key = std::tuple<aggregator::NodeId, std::string, HostRole>;
  void Add(aggregator::NodeId node, const std::string& device, HostRole role, int64_t delay_ns,
           int64_t now_ns) FW_REQUIRES(mu_);

  mutable Mutex mu_;
  std::map<Key, Series> series_ FW_GUARDED_BY(mu_);
  uint64_t refused_ FW_GUARDED_BY(mu_) = 0;
};

}  // namespace fw::analysis
