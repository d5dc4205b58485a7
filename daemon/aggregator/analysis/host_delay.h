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
  // Evidence that persists. A sample taken while either end's agent was in its first settle_s
  // after its session (re)started (NoteSessionStart) is not judged: a starting agent's own work,
  // and its peers' on a shared host, contend for the CPUs for a few seconds, and its exchanges and
  // first bursts with every peer come then. A node's own samples from before its latest session
  // are not judged either (the agent before the restart): a restarted slow host is judged on what
  // it measures now, not outvoted by its quick samples of before. And a high median is high only once the series' run
  // of high evidence spans persist_s: the samples each Judge() saw arrive had a median at or over
  // the high level (the floor and the fleet ratio), Judge after Judge, and its high samples'
  // arrivals span persist_s. A burst that one upload or two carried is not a slow host.
  double settle_s = 3;
  double persist_s = 2;
};

// One (node, device, role) with enough samples in the window.
struct HostDelayVerdict {
  aggregator::NodeId node = aggregator::kNoNode;
  std::string device;  // empty when the agent did not name it
  HostRole role = HostRole::kProber;
  uint32_t samples = 0;
  double median_ns = 0;
  double fleet_median_ns = 0;  // the median of the role's series' medians; 0 below fleet_min_series
  // The series' run of high evidence, from its first to its last high sample (0 when none).
  double high_span_s = 0;
  // The median is at or over the high level (floor and fleet ratio); `high` also needs the high
  // samples to span persist_s. Enough to set the host's bandwidth evidence aside, not to name it.
  bool over_level = false;
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
  // The agent of `node` said Hello (a new or resumed session): samples with it at either end that
  // arrive in the next HostDelayLimits::settle_s are not judged. Only the latest start is kept.
  void NoteSessionStart(aggregator::NodeId node, int64_t now_ns);
  // Every series with at least min_samples judged in the window (past its ends' settling),
  // judged; series idle for longer than the window are dropped. Sorted by (node, device, role).
  // Call on one thread, about every tick: each call also extends or ends each series' run of
  // high evidence with the samples that arrived since the previous call (persist_s).
  std::vector<HostDelayVerdict> Judge(int64_t now_ns, const HostDelayLimits& limits);
  uint64_t refused() const;

 private:
  struct Sample {
    int64_t at_ns = 0;  // arrival
    int64_t delay_ns = 0;
    aggregator::NodeId peer = aggregator::kNoNode;  // the probe's other end
  };
  struct Series {
    std::array<Sample, kRing> ring{};
    size_t next = 0;
    size_t size = 0;
    int64_t last_ns = 0;
    uint64_t added = 0;          // samples ever added; those past judged_added are fresh
    uint64_t judged_added = 0;   // `added` at the previous Judge
    // The run of high evidence over Judges (Judge): arrivals of its first and last high sample.
    bool in_run = false;
    int64_t run_first_ns = 0, run_last_ns = 0;
  };
  using Key = std::tuple<aggregator::NodeId, std::string, HostRole>;
  void Add(aggregator::NodeId node, const std::string& device, HostRole role, int64_t delay_ns,
           aggregator::NodeId peer, int64_t now_ns) FW_REQUIRES(mu_);
  // Whether `node`'s latest session started at most settle_ns before `at_ns` (and not after it).
  bool Settling(aggregator::NodeId node, int64_t at_ns, int64_t settle_ns) const FW_REQUIRES(mu_);
  // Whether `x` of `node`'s series is judged: it arrived at or after from_ns, after `node`'s
  // agent's latest session began, and neither end was settling then.
  bool Judged(const Sample& x, aggregator::NodeId node, int64_t from_ns, int64_t settle_ns) const
      FW_REQUIRES(mu_);

  mutable Mutex mu_;
  std::map<Key, Series> series_ FW_GUARDED_BY(mu_);
  std::map<aggregator::NodeId, int64_t> session_starts_ FW_GUARDED_BY(mu_);  // at most kMaxSeries
  uint64_t refused_ FW_GUARDED_BY(mu_) = 0;
};

}  // namespace fw::analysis
