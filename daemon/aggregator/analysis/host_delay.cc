#include "daemon/aggregator/analysis/host_delay.h"

#include <algorithm>
#include <array>

namespace fw::analysis {

using aggregator::kNoNode;
using aggregator::ReportedProbe;
using aggregator::Transport;

namespace {

double Median(std::vector<double>& v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  return (*std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid)) + hi) / 2;
}

}  // namespace

void HostDelays::Add(aggregator::NodeId node, const std::string& device, HostRole role,
                     int64_t delay_ns, aggregator::NodeId peer, int64_t now_ns) {
  auto it = series_.find(Key{node, device, role});
  if (it == series_.end()) {
    if (series_.size() >= kMaxSeries) {
      ++refused_;
      return;
    }
    it = series_.emplace(Key{node, device, role}, Series{}).first;
  }
  Series& s = it->second;
  s.ring[s.next] = Sample{now_ns, delay_ns, peer};
  s.next = (s.next + 1) % kRing;
  s.size = std::min(s.size + 1, kRing);
  s.last_ns = now_ns;
}

void HostDelays::Record(std::span<const ReportedProbe> results, int64_t now_ns) {
  // Most batches carry no rdma_ud result: they never take the lock.
  auto carries = [](const ReportedProbe& r) {
    return r.transport == Transport::kRdmaUd && !r.lost && r.src_id != kNoNode &&
           r.dst_id != kNoNode && (r.prober_host_ns > 0 || r.responder_host_ns > 0);
  };
  if (std::none_of(results.begin(), results.end(), carries)) return;
  MutexLock lock(mu_);
  for (const ReportedProbe& r : results) {
    if (!carries(r)) continue;
    // A prober on software timestamps cannot split its own delay off (it reports 0, inside the
    // network RTT); its peer's turnaround is still measured.
    if (r.prober_host_ns > 0) {
      Add(r.src_id, r.src_nic, HostRole::kProber, r.prober_host_ns, r.dst_id, now_ns);
    }
    if (r.responder_host_ns > 0) {
      Add(r.dst_id, r.dst_nic, HostRole::kResponder, r.responder_host_ns, r.src_id, now_ns);
    }
  }
}

void HostDelays::NoteSessionStart(aggregator::NodeId node, int64_t now_ns) {
  if (node == kNoNode) return;
  MutexLock lock(mu_);
  auto it = session_starts_.find(node);
  if (it != session_starts_.end()) {
    it->second = now_ns;
  } else if (session_starts_.size() < kMaxSeries) {
    session_starts_.emplace(node, now_ns);
  } else {
    ++refused_;
  }
}

bool HostDelays::Settling(aggregator::NodeId node, int64_t at_ns, int64_t settle_ns) const {
  const auto it = session_starts_.find(node);
  return it != session_starts_.end() && at_ns >= it->second && at_ns - it->second < settle_ns;
}

std::vector<HostDelayVerdict> HostDelays::Judge(int64_t now_ns, const HostDelayLimits& limits) {
  const auto window_ns = static_cast<int64_t>(limits.window_s * 1e9);
  const auto settle_ns = static_cast<int64_t>(limits.settle_s * 1e9);
  std::vector<HostDelayVerdict> out;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> judged;  // out[i]'s (arrival, delay)
  {
    MutexLock lock(mu_);
    std::vector<std::pair<int64_t, int64_t>> recent;
    std::vector<double> delays;
    for (auto it = series_.begin(); it != series_.end();) {
      const Series& s = it->second;
      if (now_ns - s.last_ns > window_ns) {
        it = series_.erase(it);
        continue;
      }
      recent.clear();
      const aggregator::NodeId node = std::get<0>(it->first);
      for (size_t i = 0; i < s.size; ++i) {
        const Sample& x = s.ring[i];
        if (now_ns - x.at_ns > window_ns || Settling(node, x.at_ns, settle_ns) ||
            Settling(x.peer, x.at_ns, settle_ns)) {
          continue;
        }
        recent.emplace_back(x.at_ns, x.delay_ns);
      }
      if (recent.size() >= std::max<uint32_t>(1, limits.min_samples)) {
        HostDelayVerdict v;
        v.node = node;
        v.device = std::get<1>(it->first);
        v.role = std::get<2>(it->first);
        v.samples = static_cast<uint32_t>(recent.size());
        delays.clear();
        for (const auto& [at, delay] : recent) delays.push_back(double(delay));
        v.median_ns = Median(delays);
        out.push_back(std::move(v));
        judged.push_back(recent);
      }
      ++it;
    }
  }
  // Each role against its own fleet: a responder's turnaround includes a wakeup and a post that
  // a prober's poll does not.
  const auto persist_ns = static_cast<int64_t>(limits.persist_s * 1e9);
  for (HostRole role : {HostRole::kProber, HostRole::kResponder}) {
    std::vector<double> medians;
    for (const HostDelayVerdict& v : out) {
      if (v.role == role) medians.push_back(v.median_ns);
    }
    const double fleet =
        medians.size() >= std::max<uint32_t>(1, limits.fleet_min_series) ? Median(medians) : 0;
    const double level = std::max(limits.floor_ns, limits.fleet_ratio * fleet);
    for (size_t i = 0; i < out.size(); ++i) {
      HostDelayVerdict& v = out[i];
      if (v.role != role) continue;
      v.fleet_median_ns = fleet;
      int64_t first = 0, last = 0;
      bool any = false;
      for (const auto& [at, delay] : judged[i]) {
        if (double(delay) < level) continue;
        first = any ? std::min(first, at) : at;
        last = any ? std::max(last, at) : at;
        any = true;
      }
      v.high_span_s = double(last - first) * 1e-9;
      v.high = v.median_ns >= level && last - first >= persist_ns;
    }
  }
  return out;
}

uint64_t HostDelays::refused() const {
  MutexLock lock(mu_);
  return refused_;
}

}  // namespace fw::analysis
