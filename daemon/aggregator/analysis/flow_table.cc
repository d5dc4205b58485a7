// Per-flow slot rings: ingest, window sums and the scan the analyzer runs every tick.
#include "daemon/aggregator/analysis/flow_table.h"

#include <algorithm>
#include <cmath>

#include "daemon/aggregator/ingest/source_runs.h"

namespace fw::analysis {
namespace {

// Seconds start at 1 so that 0 means "never recorded".
uint32_t SecondOf(int64_t now_ns) {
  return static_cast<uint32_t>(std::max<int64_t>(now_ns, 0) / 1'000'000'000) + 1;
}

template <typename T>
void SaturatingAdd(T& v, uint32_t add) {
  constexpr uint32_t kMax = static_cast<uint32_t>(static_cast<T>(~T{0}));
  v = static_cast<T>(std::min<uint32_t>(kMax, static_cast<uint32_t>(v) + add));
}

constexpr double kRatioClip = 64.0;
constexpr double kRatioScale = 32.0;

}  // namespace

std::optional<uint32_t> DeterministicPath(std::string_view, std::string_view, uint16_t,
                                          uint32_t flow_id, const PathSet& paths) {
  const size_t n = paths.PathCount();
  if (n == 0) return std::nullopt;
  return static_cast<uint32_t>(flow_id % n);
}

FlowTable::FlowTable(std::shared_ptr<const FabricMap> map, PathResolver resolver,
                     double bandwidth_window_s, std::shared_ptr<aggregator::NameInterner> names)
    : map_(std::move(map)),
      resolver_(std::move(resolver)),
      bandwidth_window_s_(static_cast<uint32_t>(std::max(1.0, bandwidth_window_s))),
      names_(names ? std::move(names) : std::make_shared<aggregator::NameInterner>()) {
  if (!resolver_ && map_ && map_->routing() == aggregator::Routing::kDeterministic) {
    resolver_ = DeterministicPath;
  }
}

std::optional<NodeId> FlowTable::FindNode(std::string_view name) const {
  return names_->Find(name);
}

std::string FlowTable::NodeName(NodeId id) const { return std::string(names_->NameOf(id)); }

size_t FlowTable::NodeCount() const { return names_->size(); }

uint32_t FlowTable::FindOrCreateLocked(Shard& shard, NodeId src, NodeId dst, Transport t) {
  const uint64_t key = Key(src, dst, t);
  if (auto it = shard.by_key.find(key); it != shard.by_key.end()) return it->second;
  uint32_t index;
  if (!shard.free.empty()) {
    index = shard.free.back();
    shard.free.pop_back();
  } else {
    index = static_cast<uint32_t>(shard.pairs.size());
    shard.pairs.emplace_back();
  }
  Pair& p = shard.pairs[index];
  p = Pair{};
  p.src = src;
  p.dst = dst;
  p.transport = t;
  p.live = true;
  if (map_) p.paths = map_->PathsBetweenNodes(names_->NameOf(src), names_->NameOf(dst));
  shard.by_key.emplace(key, index);
  shard.by_source[src].push_back(index);
  return index;
}

uint32_t FlowTable::FlowOfLocked(Pair& p, uint16_t src_port, uint32_t flow_id) {
  for (size_t i = 0; i < p.flows.size(); ++i) {
    if (p.flows[i].src_port == src_port && p.flows[i].flow_id == flow_id) {
      return static_cast<uint32_t>(i);
    }
  }
  Flow* f;
  if (p.flows.size() < kMaxFlowsPerPair) {
    f = &p.flows.emplace_back();
  } else {
    // Full: the flow seen longest ago makes room (a re-plan changed the flows).
    f = &*std::min_element(p.flows.begin(), p.flows.end(),
                           [](const Flow& a, const Flow& b) { return a.last_s < b.last_s; });
    *f = Flow{};
  }
  f->src_port = src_port;
  f->flow_id = flow_id;
  if (resolver_ && p.paths.PathCount() > 0) {
    const std::optional<uint32_t> path =
        resolver_(names_->NameOf(p.src), names_->NameOf(p.dst), src_port, flow_id, p.paths);
    if (path && *path < p.paths.PathCount() && *path <= INT16_MAX) {
      f->path = static_cast<int16_t>(*path);
    }
  }
  return static_cast<uint32_t>(f - p.flows.data());
}

void FlowTable::RecordLocked(Pair& p, Flow& f, const ProbeResult& r, uint32_t s) {
  if (f.last_s == 0 || s >= f.last_s + kSlots) {
    f.slots.fill(Slot{});
  } else if (s > f.last_s) {
    for (uint32_t x = f.last_s + 1; x <= s; ++x) f.slots[x % kSlots] = Slot{};
  } else if (f.last_s - s >= kSlots) {
    return;  // older than the window (cannot happen with one monotonic clock)
  }
  f.last_s = std::max(f.last_s, s);
  p.last_s = std::max(p.last_s, s);
  Slot& slot = f.slots[s % kSlots];
  SaturatingAdd(slot.probes, 1);
  if (r.lost) {
    SaturatingAdd(slot.lost, 1);
    return;
  }
  if (r.transport == Transport::kTcpBw) {
    if (r.goodput_bps > 0 && std::isfinite(r.goodput_bps)) {
      f.goodput_bps = static_cast<float>(r.goodput_bps);
      f.goodput_s = s;
    }
    return;
  }
  const PairBaseline& b = p.baseline;
  if (b.reference_s <= 0 || r.rtt_ns <= 0) return;
  const double rtt_s = static_cast<double>(r.rtt_ns) * 1e-9;
  SaturatingAdd(slot.judged, 1);
  const double ratio = std::min(kRatioClip, rtt_s / b.reference_s);
  SaturatingAdd(slot.ratio_q, static_cast<uint32_t>(ratio * kRatioScale));
  if (b.slow_threshold_s > 0 && rtt_s > b.slow_threshold_s) SaturatingAdd(slot.slow, 1);
}

void FlowTable::Ingest(std::span<const ProbeResult> results, int64_t now_ns) {
  if (results.empty()) return;
  const uint32_t s = SecondOf(now_ns);
  aggregator::SourceRuns<Shard> runs(*names_, shards_);
  for (const ProbeResult& r : results) {
    runs.Enter(r);
    Shard& shard = runs.shard();
    Pair* p = nullptr;
    Flow* f = nullptr;
    if (const RecentFlow* c = runs.Cached(); c && c->pair < shard.pairs.size()) {
      Pair& cp = shard.pairs[c->pair];
      if (cp.live && cp.dst == runs.dst() && cp.src == runs.src() && cp.transport == r.transport &&
          c->flow < cp.flows.size() && cp.flows[c->flow].src_port == r.src_port &&
          cp.flows[c->flow].flow_id == r.flow_id) {
        p = &cp;
        f = &cp.flows[c->flow];
      }
    }
    if (f == nullptr) {
      const uint32_t pair = FindOrCreateLocked(shard, runs.src(), runs.dst(), r.transport);
      p = &shard.pairs[pair];
      const uint32_t flow = FlowOfLocked(*p, r.src_port, r.flow_id);
      f = &p->flows[flow];
      runs.Remember(RecentFlow{pair, flow});
    }
    runs.Advance();
    RecordLocked(*p, *f, r, s);
  }
}

FlowWindow FlowTable::WindowOf(const Flow& f, uint32_t now_s) const {
  FlowWindow w;
  if (f.last_s == 0 || f.last_s + kSlots <= now_s) return w;
  const uint32_t hi = std::min(now_s, f.last_s);
  // Seconds count from 1, so in the first kSlots seconds the window starts at 1, not below 0.
  const uint32_t top = std::max(now_s, f.last_s);
  const uint32_t lo = top > kSlots - 1 ? top - (kSlots - 1) : 1;
  uint32_t ratio_q = 0;
  for (uint32_t sec = lo; sec <= hi; ++sec) {
    const Slot& slot = f.slots[sec % kSlots];
    w.probes += slot.probes;
    w.lost += slot.lost;
    w.rtt += slot.judged;
    w.slow += slot.slow;
    ratio_q += slot.ratio_q;
    if (sec + 2 >= now_s && sec < now_s) {
      w.recent_probes += slot.probes;
      w.recent_lost += slot.lost;
      if (sec + 1 == now_s) {
        w.last_probes = slot.probes;
        w.last_lost = slot.lost;
      }
    }
  }
  w.ratio_sum = ratio_q / kRatioScale;
  if (f.goodput_s != 0 && now_s - f.goodput_s <= bandwidth_window_s_) w.goodput_bps = f.goodput_bps;
  return w;
}

void FlowTable::Scan(int64_t now_ns, Visitor& visitor) {
  const uint32_t now_s = SecondOf(now_ns);
  for (Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (Pair& p : shard.pairs) {
      if (!p.live) continue;
      const PairRef ref{p.src, p.dst, p.transport, p.paths, p.baseline};
      visitor.BeginPair(ref);
      for (const Flow& f : p.flows) {
        const FlowWindow w = WindowOf(f, now_s);
        if (w.probes == 0 && w.goodput_bps == 0) continue;
        visitor.Flow(ref, FlowRef{f.src_port, f.flow_id, f.path}, w);
      }
      visitor.EndPair(ref);
    }
  }
}

void FlowTable::ForEachPairFrom(NodeId src, const std::function<void(const PairRef&)>& fn) {
  Shard& shard = shards_[src % kShards];
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.by_source.find(src);
  if (it == shard.by_source.end()) return;
  for (uint32_t index : it->second) {
    Pair& p = shard.pairs[index];
    fn(PairRef{p.src, p.dst, p.transport, p.paths, p.baseline});
  }
}

void FlowTable::ForEachPair(const std::function<void(const PairRef&)>& fn) {
  for (Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (Pair& p : shard.pairs) {
      if (p.live) fn(PairRef{p.src, p.dst, p.transport, p.paths, p.baseline});
    }
  }
}

size_t FlowTable::PairCount() const {
  size_t n = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    n += shard.by_key.size();
  }
  return n;
}

size_t FlowTable::FlowCount() const {
  size_t n = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (const Pair& p : shard.pairs) n += p.live ? p.flows.size() : 0;
  }
  return n;
}

size_t FlowTable::MemoryBytes() const {
  size_t bytes = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    // Pairs and flows, plus about 32 bytes per index entry (key, value, node pointer).
    bytes += shard.pairs.size() * (sizeof(Pair) + 2 * 32);
    for (const Pair& p : shard.pairs) bytes += p.flows.capacity() * sizeof(Flow);
  }
  return bytes;
}

size_t FlowTable::DropIdle(int64_t now_ns, int64_t idle_s) {
  const int64_t now_s = SecondOf(now_ns);
  size_t dropped = 0;
  for (Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (uint32_t i = 0; i < shard.pairs.size(); ++i) {
      Pair& p = shard.pairs[i];
      if (!p.live || now_s - static_cast<int64_t>(p.last_s) < idle_s) continue;
      shard.by_key.erase(Key(p.src, p.dst, p.transport));
      auto& list = shard.by_source[p.src];
      list.erase(std::remove(list.begin(), list.end(), i), list.end());
      if (list.empty()) {
        shard.by_source.erase(p.src);
        shard.recent.erase(p.src);  // a source with no pairs left has no batch worth caching
      }
      p = Pair{};
      shard.free.push_back(i);
      ++dropped;
    }
  }
  return dropped;
}

}  // namespace fw::analysis
