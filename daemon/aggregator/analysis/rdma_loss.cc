#include "daemon/aggregator/analysis/rdma_loss.h"

#include <algorithm>
#include <set>
#include <utility>

#include "daemon/aggregator/analysis/tomography.h"

namespace fw::analysis {

using aggregator::kNoNode;
using aggregator::NodeId;
using aggregator::ReportedProbe;
using aggregator::Transport;

namespace {

constexpr int64_t kSecondNs = 1'000'000'000;
// Named devices per tick at most: each is one pass over the pairs.
constexpr size_t kMaxVerdicts = 64;

using Endpoint = std::pair<NodeId, std::string>;

struct DevicePair {
  size_t a = 0, b = 0;  // endpoint indices
  uint64_t probes = 0, lost = 0;
  std::array<uint64_t, 2> dir_lost{};  // [0]: probed by a, [1]: by b
  bool lossy = false;
  bool taken = false;  // explained by a device named before
};

}  // namespace

void RdmaLosses::Record(std::span<const ReportedProbe> results, int64_t now_ns) {
  // Most batches carry no rdma_ud result: they never take the lock.
  auto carries = [](const ReportedProbe& r) {
    return r.transport == Transport::kRdmaUd && r.src_id != kNoNode && r.dst_id != kNoNode;
  };
  if (std::none_of(results.begin(), results.end(), carries)) return;
  const int64_t second = now_ns / kSecondNs;
  MutexLock lock(mu_);
  for (const ReportedProbe& r : results) {
    if (!carries(r)) continue;
    Key key{r.src_id, r.src_nic, r.dst_id, r.dst_nic};
    auto it = series_.find(key);
    if (it == series_.end()) {
      if (series_.size() >= kMaxSeries) {
        ++refused_;
        continue;
      }
      it = series_.emplace(std::move(key), Series{}).first;
    }
    Series& s = it->second;
    Bucket& b = s.buckets[static_cast<size_t>(second) % kSeconds];
    if (b.second != second) b = Bucket{second, 0, 0};
    ++b.probes;
    b.lost += r.lost;
    s.last_ns = now_ns;
  }
}

std::vector<RdmaLossVerdict> RdmaLosses::Judge(int64_t now_ns, const RdmaLossLimits& limits) {
  const auto window_ns = static_cast<int64_t>(limits.window_s * 1e9);
  const int64_t oldest = (now_ns - window_ns) / kSecondNs;
  // Both directions of a device pair together: a port that drops either way is the same fault.
  std::map<Endpoint, size_t> index;
  std::vector<Endpoint> endpoints;
  std::map<std::pair<size_t, size_t>, DevicePair> by_pair;
  auto endpoint = [&](NodeId node, const std::string& device) {
    auto [it, fresh] = index.emplace(Endpoint{node, device}, endpoints.size());
    if (fresh) endpoints.push_back(it->first);
    return it->second;
  };
  {
    MutexLock lock(mu_);
    // An agent that does not name the peer's device (older agents leave dst_nic empty) must not
    // split a node's one port in two: an unnamed end is the node's device when it has one.
    std::map<NodeId, std::set<std::string>> named_devices;
    for (const auto& [key, s] : series_) {
      if (!std::get<1>(key).empty()) named_devices[std::get<0>(key)].insert(std::get<1>(key));
      if (!std::get<3>(key).empty()) named_devices[std::get<2>(key)].insert(std::get<3>(key));
    }
    auto device_of = [&named_devices](NodeId node, const std::string& device) -> std::string {
      if (!device.empty()) return device;
      auto it = named_devices.find(node);
      return it != named_devices.end() && it->second.size() == 1 ? *it->second.begin() : device;
    };
    for (auto it = series_.begin(); it != series_.end();) {
      const Series& s = it->second;
      if (now_ns - s.last_ns > window_ns) {
        it = series_.erase(it);
        continue;
      }
      uint64_t probes = 0, lost = 0;
      for (const Bucket& b : s.buckets) {
        if (b.second >= oldest) {
          probes += b.probes;
          lost += b.lost;
        }
      }
      const auto& [src, src_dev, dst, dst_dev] = it->first;
      size_t a = endpoint(src, device_of(src, src_dev)), b = endpoint(dst, device_of(dst, dst_dev));
      const int dir = a > b ? 1 : 0;
      if (a > b) std::swap(a, b);
      DevicePair& p = by_pair[{a, b}];
      p.a = a;
      p.b = b;
      p.probes += probes;
      p.lost += lost;
      p.dir_lost[dir] += lost;
      ++it;
    }
  }
  std::vector<DevicePair> pairs;
  std::vector<std::vector<size_t>> of(endpoints.size());  // endpoint -> its pairs
  for (auto& [key, p] : by_pair) {
    if (p.probes < limits.min_probes || p.a == p.b) continue;
    // A port that drops packets drops round trips both ways (a probe or its ack crosses it
    // either way); loss one way only is a peer that is not answering (down, restarting), not a
    // port.
    p.lossy = p.lost >= limits.lossy_min_lost &&
              static_cast<double>(p.lost) >= limits.lossy_ratio * static_cast<double>(p.probes) &&
              p.dir_lost[0] > 0 && p.dir_lost[1] > 0;
    of[p.a].push_back(pairs.size());
    of[p.b].push_back(pairs.size());
    pairs.push_back(p);
  }

  std::vector<RdmaLossVerdict> out;
  std::vector<bool> named(endpoints.size(), false);
  while (out.size() < kMaxVerdicts) {
    // Suspects: devices most of whose unexplained pairs are lossy. Candidates are suspects, most
    // lossy pairs first; a pair between two other suspects does not show a peer healthy.
    std::vector<std::pair<uint32_t, size_t>> order;
    std::vector<bool> suspect(endpoints.size(), false);
    for (size_t e = 0; e < endpoints.size(); ++e) {
      if (named[e]) continue;
      uint32_t lossy = 0, with_data = 0;
      for (size_t i : of[e]) {
        if (pairs[i].taken) continue;
        ++with_data;
        lossy += pairs[i].lossy;
      }
      if (lossy >= std::max<uint32_t>(1, limits.min_lossy_pairs) &&
          lossy >= limits.device_fraction * with_data) {
        suspect[e] = true;
        order.emplace_back(lossy, e);
      }
    }
    std::sort(order.begin(), order.end(), [](const auto& x, const auto& y) {
      return x.first > y.first || (x.first == y.first && x.second < y.second);
    });
    bool found = false;
    for (const auto& entry : order) {
      const size_t e = entry.second;
      RdmaLossVerdict v;
      std::set<size_t> peers;
      for (size_t i : of[e]) {
        const DevicePair& p = pairs[i];
        if (p.taken) continue;
        ++v.pairs;
        v.probes += p.probes;
        v.lost += p.lost;
        const size_t peer = p.a == e ? p.b : p.a;
        peers.insert(peer);
        if (p.lossy) {
          ++v.lossy_pairs;
          v.lossy_peers.push_back(endpoints[peer].first);
        }
      }
      // The peers' other pairs show their own ports healthy: the loss is this device's.
      std::set<size_t> others;
      for (size_t peer : peers) {
        for (size_t i : of[peer]) {
          const DevicePair& p = pairs[i];
          if (!p.taken && p.a != e && p.b != e && !suspect[p.a] && !suspect[p.b]) others.insert(i);
        }
      }
      uint64_t other_probes = 0, other_lost = 0;
      uint32_t other_lossy = 0;
      for (size_t i : others) {
        other_probes += pairs[i].probes;
        other_lost += pairs[i].lost;
        other_lossy += pairs[i].lossy;
      }
      if (others.empty() || other_lossy > limits.peers_clean_ratio * others.size()) continue;
      v.peer_pairs = static_cast<uint32_t>(others.size());
      v.peers_loss_ratio = static_cast<double>(other_lost) / static_cast<double>(other_probes);
      const double background = std::max(limits.background_floor, v.peers_loss_ratio);
      v.significance =
          PoissonSurprise(static_cast<double>(v.lost), static_cast<double>(v.probes) * background);
      if (v.significance < limits.significance) continue;
      v.node = endpoints[e].first;
      v.device = endpoints[e].second;
      for (size_t i : of[e]) pairs[i].taken = true;
      named[e] = true;
      out.push_back(std::move(v));
      found = true;
      break;
    }
    if (!found) break;
  }
  return out;
}

uint64_t RdmaLosses::refused() const {
  MutexLock lock(mu_);
  return refused_;
}

}  // namespace fw::analysis
