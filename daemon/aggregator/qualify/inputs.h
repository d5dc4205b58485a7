// What qualification suites read from ingest: probe results of the pairs a running suite measures,
// and when each node last sent its local checks. Fed by the aggregator's ingest threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "daemon/aggregator/model/log_histogram.h"
#include "daemon/aggregator/model/name_interner.h"
#include "daemon/aggregator/model/reported_probe.h"

namespace fw::qualify {

// One ordered pair's latency results while a suite collects: all of them, and split into the
// measurement's halves (Collection::StartSecondHalf), so that a judge can tell a tail that held
// through the whole window from one that a single stall of a busy host made.
struct PairSamples {
  uint64_t probes = 0;
  uint64_t lost = 0;
  aggregator::LogHistogram rtt;
  aggregator::LogHistogram halves[2];
};

// The RTT p99 (seconds) that one direction of a pair held through the whole measurement: the
// lower of its two halves' p99s. A fault of the path (a queue, a shaper, a slow NIC or link)
// raises both halves; a few stalls of a busy host (prober or reflector not scheduled for some
// milliseconds) land in one half and raise that half's p99 alone. When a half has fewer than
// kMinHalfSamples results, the whole window's p99. NaN: no RTT.
constexpr uint64_t kMinHalfSamples = 20;
double SustainedRttP99(const PairSamples& s);

// One bandwidth burst's result (tcp_bw): seq is the round that asked for it.
struct BurstSample {
  bool lost = false;
  double goodput_bps = 0;
  uint64_t bytes = 0;
};
using BurstKey = std::tuple<aggregator::NodeId, aggregator::NodeId, uint64_t>;  // src, dst, seq

// Which probes a result belongs to: the host stack's (UDP latency, tcp_bw bursts) or the RDMA
// NIC's (rdma_ud latency, rdma_rc write bursts).
enum class ProbeFamily : uint8_t { kIp, kRdma };

// A suite's collection: every ordered pair among its nodes, each probe family apart.
class Collection {
 public:
  using PairMap = std::map<std::pair<aggregator::NodeId, aggregator::NodeId>, PairSamples>;
  // The pairs' latency results so far, keyed (src id, dst id).
  PairMap Snapshot(ProbeFamily family = ProbeFamily::kIp) const;
  // The pairs' bandwidth bursts so far, the latest per (src, dst, seq).
  std::map<BurstKey, BurstSample> Bursts(ProbeFamily family = ProbeFamily::kIp) const;
  // Forgets what was collected (the end of a ramp); results go into the first half again.
  void Reset();
  // Results from now on go into PairSamples::halves[1].
  void StartSecondHalf();

 private:
  friend class QualifyInputs;
  mutable Mutex mu_;
  PairMap pairs_[2] FW_GUARDED_BY(mu_);  // by ProbeFamily
  std::map<BurstKey, BurstSample> bursts_[2] FW_GUARDED_BY(mu_);  // a few per pair at most
  int half_ FW_GUARDED_BY(mu_) = 0;
};

// Thread-safe. Ingest calls OnResults for every decoded batch; with no suite collecting that costs
// one atomic load.
class QualifyInputs {
 public:
  explicit QualifyInputs(const Clock& clock) : clock_(clock) {}

  void OnResults(std::span<const aggregator::ReportedProbe> results);
  void OnCheckReport(const std::string& node);
  // Seconds since `node`'s last check report, nullopt if none arrived since the start.
  std::optional<double> CheckReportAge(const std::string& node) const;

  // Starts collecting the ordered pairs among `nodes` (ids) until Release(). A pair watched by
  // two collections records into the newer one (overlapping suites never run at once).
  std::shared_ptr<Collection> Collect(const std::vector<aggregator::NodeId>& nodes);
  void Release(const std::shared_ptr<Collection>& c);

 private:
  const Clock& clock_;
  std::atomic<int> collecting_{0};
  mutable SharedMutex mu_;
  // Live collections and, for each (src, dst) they watch, the collection to record into.
  std::vector<std::shared_ptr<Collection>> collections_ FW_GUARDED_BY(mu_);
  std::unordered_map<uint64_t, std::shared_ptr<Collection>> by_pair_ FW_GUARDED_BY(mu_);
  mutable Mutex checks_mu_;
  std::unordered_map<std::string, int64_t> check_report_ns_ FW_GUARDED_BY(checks_mu_);  // monotonic
};

}  // namespace fw::qualify
