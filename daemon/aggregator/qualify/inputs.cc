// Probe-result tap and check-report clock for qualification suites.
#include "daemon/aggregator/qualify/inputs.h"

#include <algorithm>

namespace fw::qualify {
namespace {

// Bursts a collection keeps: an all-pairs schedule of 512 nodes is 130,816; periodic bursts of
// the fleet's plan land here too while a suite runs, a few more.
constexpr size_t kMaxBursts = 1 << 18;

uint64_t Key(aggregator::NodeId a, aggregator::NodeId b) {
  return (static_cast<uint64_t>(a) << 32) | static_cast<uint64_t>(b);
}

}  // namespace

double SustainedRttP99(const PairSamples& s) {
  const auto& [a, b] = s.halves;
  if (a.Count() < kMinHalfSamples || b.Count() < kMinHalfSamples) {
    return s.rtt.QuantileSeconds(0.99);
  }
  return std::min(a.QuantileSeconds(0.99), b.QuantileSeconds(0.99));
}

Collection::PairMap Collection::Snapshot(ProbeFamily family) const {
  MutexLock lock(mu_);
  return pairs_[static_cast<int>(family)];
}

std::map<BurstKey, BurstSample> Collection::Bursts(ProbeFamily family) const {
  MutexLock lock(mu_);
  return bursts_[static_cast<int>(family)];
}

void Collection::Reset() {
  MutexLock lock(mu_);
  for (PairMap& m : pairs_) {
    for (auto& [k, v] : m) v = PairSamples{};
  }
  for (auto& b : bursts_) b.clear();
  half_ = 0;
}

void Collection::StartSecondHalf() {
  MutexLock lock(mu_);
  half_ = 1;
}

void QualifyInputs::OnResults(std::span<const aggregator::ReportedProbe> results) {
  if (collecting_.load(std::memory_order_acquire) == 0) return;
  ReaderLock lock(mu_);
  for (const aggregator::ReportedProbe& r : results) {
    using aggregator::Transport;
    const Transport t = r.transport;
    const bool bw = t == Transport::kTcpBw || t == Transport::kRdmaRc;
    if ((t != Transport::kUdp && t != Transport::kRdmaUd && !bw) ||
        r.src_id == aggregator::kNoNode) {
      continue;
    }
    const int family = static_cast<int>(t == Transport::kRdmaUd || t == Transport::kRdmaRc
                                             ? ProbeFamily::kRdma
                                             : ProbeFamily::kIp);
    auto it = by_pair_.find(Key(r.src_id, r.dst_id));
    if (it == by_pair_.end()) continue;
    Collection* c = it->second.get();
    MutexLock cl(c->mu_);
    if (bw) {
      // Bounded: the suite asks each pair for a burst a round, and rounds are few.
      if (c->bursts_[family].size() < kMaxBursts) {
        c->bursts_[family][{r.src_id, r.dst_id, r.seq}] = {r.lost, r.goodput_bps, r.bytes};
      }
      continue;
    }
    PairSamples& s = c->pairs_[family][{r.src_id, r.dst_id}];
    if (r.late) {
      if (s.lost > 0) --s.lost;  // the loss reported earlier was answered after all
    } else {
      ++s.probes;
    }
    if (r.lost) {
      ++s.lost;
    } else if (r.rtt_ns > 0) {  // 0: answered, round trip unknown (docs/probes.md)
      s.rtt.Record(r.rtt_ns);
      s.halves[c->half_].Record(r.rtt_ns);
    }
  }
}

void QualifyInputs::OnCheckReport(const std::string& node) {
  MutexLock lock(checks_mu_);
  // Bounded by the agents that connect (an agent reports only for its own node).
  check_report_ns_[node] = clock_.MonotonicNanos();
}

std::optional<double> QualifyInputs::CheckReportAge(const std::string& node) const {
  MutexLock lock(checks_mu_);
  auto it = check_report_ns_.find(node);
  if (it == check_report_ns_.end()) return std::nullopt;
  return static_cast<double>(clock_.MonotonicNanos() - it->second) * 1e-9;
}

std::shared_ptr<Collection> QualifyInputs::Collect(const std::vector<aggregator::NodeId>& nodes) {
  auto c = std::make_shared<Collection>();
  {
    MutexLock cl(c->mu_);
    for (aggregator::NodeId a : nodes) {
      for (aggregator::NodeId b : nodes) {
        if (a != b) {
          for (Collection::PairMap& m : c->pairs_) m[{a, b}];
        }
      }
    }
  }
  WriterLock lock(mu_);
  collections_.push_back(c);
  for (aggregator::NodeId a : nodes) {
    for (aggregator::NodeId b : nodes) {
      if (a != b) by_pair_[Key(a, b)] = c;
    }
  }
  collecting_.store(static_cast<int>(collections_.size()), std::memory_order_release);
  return c;
}

void QualifyInputs::Release(const std::shared_ptr<Collection>& c) {
  WriterLock lock(mu_);
  std::erase(collections_, c);
  std::erase_if(by_pair_, [&](const auto& kv) { return kv.second == c; });
  collecting_.store(static_cast<int>(collections_.size()), std::memory_order_release);
}

}  // namespace fw::qualify
