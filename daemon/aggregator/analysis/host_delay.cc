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
                     int64_t delay_ns, int64_t now_ns) {
  auto it = series_.find(Key{node, device, role});
  if (it == series_.end()) {
    if (series_.size() >= kMaxSeries) {
      ++refused_;
      return;
    }
    it = series_.emplace(Key{node, device, role}, Series{}).first;
  }
  Series& s = it->second;
  s.ring[s.next] = {now_ns, delay_ns};
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
    if (r.prober_host_ns > 0) Add(r.src_id, r.src_nic, HostRole::kProber, r.prober_host_ns, now_ns);
    if (r.responder_host_ns > 0) {
      Add(r.dst_id, r.dst_nic, HostRole::kResponder, r.responder_host_ns, now_ns);
    }
  }
}

std::vector<HostDelayVerdict> HostDelays::Judge(int64_t now_ns, const HostDelayLimits& limits) {
  const auto window_ns = static_cast<int64_t>(limits.window_s * 1e9);
  std::vector<HostDelayVerdict> out;
  {
    MutexLock lock(mu_);
    std::vector<double> recent;
    for (auto it = series_.begin(); it != series_.end();) {
      const Series& s = it->second;
      if (now_ns - s.last_ns > window_ns) {
        it = series_.erase(it);
        continue;
      }
      recent.clear();
      for (size_t i = 0; i < s.size; ++i) {
        if (now_ns - s.ring[i].first <= window_ns) recent.push_back(double(s.ring[i].second));
      }
      if (recent.size() >= std::max<uint32_t>(1, limits.min_samples)) {
        HostDelayVerdict v;
        v.node = std::get<0>(it->first);
        v.device = std::get<1>(it->first);
        v.role = std::get<2>(it->first);
        v.samples = static_cast<uint32_t>(recent.size());
        v.median_ns = Median(recent);
        out.push_back(std::move(v));
      }
      ++it;
    }
  }
  // Each role against its own fleet: a responder's turnaround includes a wakeup and a post that
  // a prober's poll does not.
  for (HostRole role : {HostRole::kProber, HostRole::kResponder}) {
    std::vector<double> medians;
    for (const HostDelayVerdict& v : out) {
      if (v.role == role) medians.push_back(v.median_ns);
    }
    const double fleet =
        medians.size() >= std::max<uint32_t>(1, limits.fleet_min_series) ? Median(medians) : 0;
    for (HostDelayVerdict& v : out) {
      if (v.role != role) continue;
      v.fleet_median_ns = fleet;
      v.high = v.median_ns >= limits.floor_ns && v.median_ns >= limits.fleet_ratio * fleet;
    }
  }
  return out;
}

uint64_t HostDelays::refused() const {
  MutexLock lock(mu_);
  return refused_;
}

}  // namespace fw::analysis
