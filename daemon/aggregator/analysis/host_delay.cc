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
  ++s.added;
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

bool HostDelays::Judged(const Sample& x, aggregator::NodeId node, int64_t from_ns,
                        int64_t settle_ns) const {
  if (x.at_ns < from_ns) return false;
  const auto start = session_starts_.find(node);
  // The node's own samples from before its agent's latest session describe the process before.
  if (start != session_starts_.end() && x.at_ns < start->second) return false;
  return !Settling(node, x.at_ns, settle_ns) && !Settling(x.peer, x.at_ns, settle_ns);
}

std::vector<HostDelayVerdict> HostDelays::Judge(int64_t now_ns, const HostDelayLimits& limits) {
  const auto window_ns = static_cast<int64_t>(limits.window_s * 1e9);
  const auto settle_ns = static_cast<int64_t>(limits.settle_s * 1e9);
  const auto persist_ns = static_cast<int64_t>(limits.persist_s * 1e9);
  const uint32_t min_samples = std::max<uint32_t>(1, limits.min_samples);
  // Each live series, with the samples that arrived since the previous Judge (not settling).
  struct Live {
    Series* s;
    HostRole role;
    std::vector<std::pair<int64_t, int64_t>> fresh;  // (arrival, delay)
    int verdict = -1;                                // index in `out`
  };
  std::vector<HostDelayVerdict> out;
  std::vector<Live> live;
  MutexLock lock(mu_);
  std::vector<double> delays;
  for (auto it = series_.begin(); it != series_.end();) {
    Series& s = it->second;
    if (now_ns - s.last_ns > window_ns) {
      it = series_.erase(it);
      continue;
    }
    const aggregator::NodeId node = std::get<0>(it->first);
    Live l{&s, std::get<2>(it->first), {}, -1};
    // The newest samples, newest first: those added since the previous Judge are fresh.
    const uint64_t fresh_n = std::min<uint64_t>(s.added - s.judged_added, s.size);
    for (uint64_t k = 0; k < fresh_n; ++k) {
      const Sample& x = s.ring[(s.next + kRing - 1 - k) % kRing];
      if (Judged(x, node, now_ns - window_ns, settle_ns)) {
        l.fresh.emplace_back(x.at_ns, x.delay_ns);
      }
    }
    s.judged_added = s.added;
    delays.clear();
    for (size_t i = 0; i < s.size; ++i) {
      const Sample& x = s.ring[i];
      if (Judged(x, node, now_ns - window_ns, settle_ns)) {
        delays.push_back(double(x.delay_ns));
      }
    }
    if (delays.size() >= min_samples) {
      HostDelayVerdict v;
      v.node = node;
      v.device = std::get<1>(it->first);
      v.role = l.role;
      v.samples = static_cast<uint32_t>(delays.size());
      v.median_ns = Median(delays);
      l.verdict = static_cast<int>(out.size());
      out.push_back(std::move(v));
    }
    live.push_back(std::move(l));
    ++it;
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
    const double level = std::max(limits.floor_ns, limits.fleet_ratio * fleet);
    for (Live& l : live) {
      if (l.role != role) continue;
      Series& s = *l.s;
      // The run of high evidence: every Judge's fresh samples with a median at or over the level
      // extend it (from the first to the last of their samples at or over it); fresh samples
      // under it end it. A Judge without fresh samples leaves it as it is.
      if (!l.fresh.empty()) {
        delays.clear();
        for (const auto& [at, delay] : l.fresh) delays.push_back(double(delay));
        if (Median(delays) >= level) {
          for (const auto& [at, delay] : l.fresh) {
            if (double(delay) < level) continue;
            if (!s.in_run) s.run_first_ns = s.run_last_ns = at;
            s.in_run = true;
            s.run_first_ns = std::min(s.run_first_ns, at);
            s.run_last_ns = std::max(s.run_last_ns, at);
          }
        } else {
          s.in_run = false;
        }
      }
      if (l.verdict < 0) continue;
      HostDelayVerdict& v = out[static_cast<size_t>(l.verdict)];
      v.fleet_median_ns = fleet;
      v.high_span_s = s.in_run ? double(s.run_last_ns - s.run_first_ns) * 1e-9 : 0;
      v.over_level = v.median_ns >= level;
      v.high = v.over_level &&
               (persist_ns <= 0 || (s.in_run && s.run_last_ns - s.run_first_ns >= persist_ns));
    }
  }
  return out;
}

uint64_t HostDelays::refused() const {
  MutexLock lock(mu_);
  return refused_;
}

}  // namespace fw::analysis
