// Pair lookup, sharding and ingest for PairTable.
#include "daemon/aggregator/ingest/pair_table.h"

#include <algorithm>
#include <cmath>

#include "daemon/aggregator/ingest/source_runs.h"

namespace fw::aggregator {
namespace {

template <typename T>
void SaturatingAdd(T& v, uint32_t add) {
  constexpr uint32_t kMax = static_cast<uint32_t>(static_cast<T>(~T{0}));
  v = static_cast<T>(std::min<uint32_t>(kMax, static_cast<uint32_t>(v) + add));
}

// Thousandths (0: not measured) to FlowSeen's percent, at least 1 when measured.
uint8_t CpuPercent(uint16_t permille) {
  if (permille == 0) return 0;
  return static_cast<uint8_t>(std::clamp((permille + 5) / 10, 1, 100));
}

}  // namespace

std::optional<uint32_t> DeterministicPath(std::string_view, std::string_view, uint16_t,
                                          uint32_t flow_id, const PathSet& paths) {
  const size_t n = paths.PathCount();
  if (n == 0) return std::nullopt;
  return static_cast<uint32_t>(flow_id % n);
}

PairTable::PairTable(const Clock& clock, std::shared_ptr<const FabricMap> map, size_t max_pairs,
                     std::shared_ptr<NameInterner> names)
    : clock_(clock),
      map_(std::move(map)),
      max_pairs_(max_pairs),
      names_(names ? std::move(names) : std::make_shared<NameInterner>()) {
  SetPathResolver(nullptr);
}

void PairTable::SetPathResolver(PathResolver resolver) {
  resolver_ = std::move(resolver);
  if (!resolver_ && map_ && map_->routing() == Routing::kDeterministic) {
    resolver_ = DeterministicPath;
  }
}

NodeId PairTable::Intern(std::string_view name) { return names_->Intern(name); }

std::optional<NodeId> PairTable::Find(std::string_view name) const { return names_->Find(name); }

std::string_view PairTable::NameOf(NodeId id) const { return names_->NameOf(id); }

uint32_t PairTable::FindOrCreateLocked(Shard& shard, NodeId src, NodeId dst, Transport t) {
  const uint64_t key = Key(src, dst, t);
  if (auto it = shard.by_key.find(key); it != shard.by_key.end()) return it->second;
  if (pair_count_.fetch_add(1, std::memory_order_relaxed) >= max_pairs_) {
    pair_count_.fetch_sub(1, std::memory_order_relaxed);
    return kNoIndex;
  }
  uint32_t index;
  if (!shard.free.empty()) {
    index = shard.free.back();
    shard.free.pop_back();
  } else {
    index = static_cast<uint32_t>(shard.pairs.size());
    shard.pairs.emplace_back();
  }
  Pair& p = shard.pairs[index];
  const uint32_t generation = p.generation + 1;
  p = Pair{};
  p.generation = generation;
  p.src = src;
  p.dst = dst;
  p.transport = t;
  p.live = true;
  if (map_) {
    p.paths = map_->PathsBetweenNodes(NameOf(src), NameOf(dst));
    const auto& links = map_->links();
    if (p.paths.src_access < links.size() && p.paths.dst_access < links.size()) {
      p.own_src_nic = &map_->host_nics()[links[p.paths.src_access].host_nic].nic;
      p.own_dst_nic = &map_->host_nics()[links[p.paths.dst_access].host_nic].nic;
    }
  }
  shard.by_key.emplace(key, index);
  shard.by_source[src].push_back(index);
  return index;
}

std::optional<PairHandle> PairTable::Resolve(std::string_view src, std::string_view dst,
                                             Transport t) {
  if (static_cast<int>(t) >= kTransportCount) return std::nullopt;
  const NodeId s = Intern(src);
  const NodeId d = Intern(dst);
  Shard& shard = shards_[ShardOf(s)];
  MutexLock lock(shard.mu);
  const uint32_t index = FindOrCreateLocked(shard, s, d, t);
  if (index == kNoIndex) return std::nullopt;
  return PairHandle{static_cast<uint32_t>(ShardOf(s)), index, shard.pairs[index].generation};
}

bool PairTable::OwnNics(const Pair& p, std::string_view src_nic, std::string_view dst_nic) {
  if ((src_nic.empty() && dst_nic.empty()) || !p.own_src_nic || !p.own_dst_nic) return true;
  return *p.own_src_nic == src_nic && *p.own_dst_nic == dst_nic;
}

uint8_t PairTable::NicsOfLocked(Pair& p, std::string_view src_nic, std::string_view dst_nic) {
  if (OwnNics(p, src_nic, dst_nic)) return 0;
  if (!p.nic_pairs) p.nic_pairs = std::make_unique<std::vector<NicPair>>();
  std::vector<NicPair>& pairs = *p.nic_pairs;
  for (size_t k = 0; k < pairs.size(); ++k) {
    if (pairs[k].src_nic == src_nic && pairs[k].dst_nic == dst_nic) {
      return static_cast<uint8_t>(k + 1);
    }
  }
  if (pairs.size() >= kMaxNicPairs) return 0;
  NicPair& added = pairs.emplace_back();
  added.src_nic = src_nic;
  added.dst_nic = dst_nic;
  added.paths = map_->PathsBetweenNics(NameOf(p.src), src_nic, NameOf(p.dst), dst_nic);
  return static_cast<uint8_t>(pairs.size());
}

bool PairTable::SameNicsLocked(const Pair& p, const FlowSeen& f, const ReportedProbe& r) {
  if (f.nics == 0) return OwnNics(p, r.src_nic, r.dst_nic);
  const NicPair& n = (*p.nic_pairs)[f.nics - 1];
  return n.src_nic == r.src_nic && n.dst_nic == r.dst_nic;
}

uint32_t PairTable::FlowOfLocked(Pair& p, uint16_t src_port, uint32_t flow_id, uint8_t nics) {
  for (size_t i = 0; i < p.flows.size(); ++i) {
    if (p.flows[i].src_port == src_port && p.flows[i].flow_id == flow_id &&
        p.flows[i].nics == nics) {
      return static_cast<uint32_t>(i);
    }
  }
  FlowSeen* f;
  if (p.flows.size() < kMaxFlowsPerPair) {
    f = &p.flows.emplace_back();
  } else {
    // Full: the flow seen longest ago makes room (a re-plan changed the flows).
    f = &*std::min_element(p.flows.begin(), p.flows.end(),
                           [](const auto& a, const auto& b) { return a.last_s < b.last_s; });
    *f = FlowSeen{};
  }
  f->src_port = src_port;
  f->flow_id = flow_id;
  f->nics = nics;
  const PathSet& paths = nics == 0 ? p.paths : (*p.nic_pairs)[nics - 1].paths;
  if (resolver_ && paths.PathCount() > 0) {
    const std::optional<uint32_t> path =
        resolver_(NameOf(p.src), NameOf(p.dst), src_port, flow_id, paths);
    if (path && *path < paths.PathCount() && *path <= INT16_MAX) {
      f->path = static_cast<int16_t>(*path);
    }
  }
  return static_cast<uint32_t>(f - p.flows.data());
}

void PairTable::RecordLocked(Pair& p, FlowSeen& f, const ProbeSample& sample, Transport t,
                             int64_t now_ns) {
  p.windows.Record(now_ns, sample);
  const uint32_t s = FlowSecond(now_ns);
  constexpr uint32_t kSlots = FlowSeen::kSlots;
  if (f.last_s == 0 || s >= f.last_s + kSlots) {
    f.slots.fill(FlowSlot{});
    f.lost_run = 0;
  } else if (s > f.last_s) {
    for (uint32_t x = f.last_s + 1; x <= s; ++x) f.slots[x % kSlots] = FlowSlot{};
  } else if (f.last_s - s >= kSlots) {
    return;  // older than the window (cannot happen with one monotonic clock)
  }
  f.last_s = std::max(f.last_s, s);
  FlowSlot& slot = f.slots[s % kSlots];
  if (sample.late) {
    // A loss reported on a round-trip timeout, answered within the fixed one after all: the
    // flow's newest recorded loss in the window becomes an answered probe (it was reported within
    // the last fixed timeout, so it is that one or one of its seconds' neighbours), and the echo's
    // round trip is judged in this second like any other.
    for (uint32_t back = 0; back < kSlots && back < s; ++back) {
      FlowSlot& x = f.slots[(s - back) % kSlots];
      if (x.lost > 0) {
        --x.lost;
        break;
      }
    }
  } else {
    SaturatingAdd(slot.probes, 1);
  }
  if (sample.lost) {
    SaturatingAdd(slot.lost, 1);
    if (f.lost_run < UINT8_MAX) ++f.lost_run;
    return;
  }
  f.lost_run = 0;
  if (t == Transport::kTcpBw || t == Transport::kRdmaRc) {  // bursts: goodput, no RTT
    if (sample.goodput_bps > 0 && std::isfinite(sample.goodput_bps)) {
      f.goodput_bps = static_cast<float>(sample.goodput_bps);
      f.goodput_s = s;
      f.goodput_cpu_busy_pct = CpuPercent(sample.cpu_busy_permille);
      f.goodput_cpu_peak_pct = CpuPercent(sample.cpu_peak_permille);
      f.goodput_cpu_pressure_pct = CpuPercent(sample.cpu_pressure_permille);
    }
    return;
  }
  const PairBaseline& b = p.baseline;
  if (b.reference_s <= 0 || sample.rtt_ns <= 0) return;
  const double rtt_s = static_cast<double>(sample.rtt_ns) * 1e-9;
  SaturatingAdd(slot.judged, 1);
  const double ratio = std::min(FlowSeen::kRatioClip, rtt_s / b.reference_s);
  SaturatingAdd(slot.ratio_q, static_cast<uint32_t>(ratio * FlowSeen::kRatioScale));
  if (b.slow_threshold_s > 0 && rtt_s > b.slow_threshold_s) SaturatingAdd(slot.slow, 1);
}

bool PairTable::Record(const PairHandle& h, const ProbeSample& s, uint16_t src_port,
                       uint32_t flow_id, int64_t now_ns) {
  if (h.shard >= kShards) return false;
  Shard& shard = shards_[h.shard];
  MutexLock lock(shard.mu);
  if (h.index >= shard.pairs.size()) return false;
  Pair& p = shard.pairs[h.index];
  if (!p.live || p.generation != h.generation) return false;
  RecordLocked(p, p.flows[FlowOfLocked(p, src_port, flow_id)], s, p.transport, now_ns);
  return true;
}

size_t PairTable::RecordBatch(std::span<const ReportedProbe> results) {
  if (results.empty()) return 0;
  return RecordBatch(results, clock_.MonotonicNanos());
}

void PairTable::PrefetchAheadLocked(const Shard& shard, const SourceRuns<Shard>& runs,
                                    int64_t now_ns) {
  // Each result's pair, flow and window slots are cold lines of their own (~156,000 pairs at
  // 4,000 agents): waiting for each in turn was most of the pair table's time. The positions
  // ahead usually name what the source's previous batch named there; their lines are asked for in
  // three steps, each reading only what the step before it fetched.
  constexpr size_t kAheadPair = 4, kAheadLines = 2, kAheadBuckets = 1;
  // at[d]: the pair that the position d ahead went to last time, or null.
  std::array<const Pair*, kAheadPair + 1> at{};
  for (const size_t d : {kAheadBuckets, kAheadLines, kAheadPair}) {
    const RecentPair* e = runs.Ahead(d);
    if (e != nullptr && e->index < shard.pairs.size()) at[d] = &shard.pairs[e->index];
  }
  if (const Pair* p = at[kAheadPair]) {
    __builtin_prefetch(p);
    __builtin_prefetch(reinterpret_cast<const char*>(p) + 64);
  }
  if (const Pair* p = at[kAheadLines]) {
    const uint32_t flow = runs.Ahead(kAheadLines)->flow;
    if (flow < p->flows.size()) {
      const FlowSeen* f = &p->flows[flow];
      __builtin_prefetch(f, 1);
      __builtin_prefetch(reinterpret_cast<const char*>(f + 1) - 1, 1);
    }
    if (p->own_dst_nic != nullptr) __builtin_prefetch(p->own_dst_nic);
    p->windows.Prefetch(now_ns);
  }
  if (const Pair* p = at[kAheadBuckets]) p->windows.PrefetchBuckets(now_ns);
}

size_t PairTable::RecordBatch(std::span<const ReportedProbe> results, int64_t now_ns) {
  size_t recorded = 0;
  SourceRuns<Shard> runs(*names_, shards_);
  // The current source's SourcePairIndex (in its shard, whose lock `runs` holds).
  NodeId index_src = kNoNode;
  SourcePairIndex* source_index = nullptr;
  for (const ReportedProbe& r : results) {
    if (static_cast<int>(r.transport) >= kTransportCount) {
      rejected_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    runs.Enter(r);
    Shard& shard = runs.shard();
    shard.mu.AssertHeld();  // SourceRuns holds it from Enter() until the source changes
    PrefetchAheadLocked(shard, runs, now_ns);
    Pair* p = nullptr;
    FlowSeen* f = nullptr;
    const RecentPair* c = runs.Cached();
    if (c && c->transport == r.transport && c->dst == runs.dst() && c->index < shard.pairs.size()) {
      Pair& cp = shard.pairs[c->index];
      if (cp.live && cp.generation == c->generation) {
        p = &cp;
        if (c->flow < cp.flows.size() && cp.flows[c->flow].src_port == r.src_port &&
            cp.flows[c->flow].flow_id == r.flow_id && SameNicsLocked(cp, cp.flows[c->flow], r)) {
          f = &cp.flows[c->flow];
        }
      }
    }
    if (f == nullptr) {
      uint32_t index;
      if (p != nullptr) {
        index = c->index;
      } else {
        // The source's own index first (one small block per batch), then the shard's map.
        if (index_src != runs.src()) {
          index_src = runs.src();
          source_index = &shard.pair_index[index_src];
        }
        index = kNoIndex;
        if (const SourcePairIndex::Hit* h = source_index->Find(runs.dst(), r.transport);
            h != nullptr && h->index < shard.pairs.size()) {
          const Pair& hint = shard.pairs[h->index];
          if (hint.live && hint.generation == h->generation && hint.src == runs.src() &&
              hint.dst == runs.dst() && hint.transport == r.transport) {
            index = h->index;
          }
        }
        if (index == kNoIndex) {
          index = FindOrCreateLocked(shard, runs.src(), runs.dst(), r.transport);
          if (index == kNoIndex) {
            rejected_.fetch_add(1, std::memory_order_relaxed);
            continue;
          }
          const auto live = shard.by_source.find(index_src);
          source_index->Put(runs.dst(), r.transport, {index, shard.pairs[index].generation},
                            live == shard.by_source.end() ? 0 : live->second.size());
        }
        p = &shard.pairs[index];
      }
      const uint32_t flow =
          FlowOfLocked(*p, r.src_port, r.flow_id, NicsOfLocked(*p, r.src_nic, r.dst_nic));
      f = &p->flows[flow];
      runs.Remember(RecentPair{runs.dst(), r.transport, index, p->generation, flow});
    }
    runs.Advance();
    RecordLocked(*p, *f,
                 ProbeSample{r.lost, r.rtt_ns, r.goodput_bps, r.cpu_busy_permille,
                             r.cpu_peak_permille, r.cpu_pressure_permille, r.late},
                 r.transport, now_ns);
    ++recorded;
  }
  return recorded;
}

void PairTable::VisitLocked(const Pair& p, const std::function<void(const PairView&)>& fn) const {
  fn(PairView{NameOf(p.src), NameOf(p.dst), p.transport, p.paths.path_class, p.flows, p.windows});
}

void PairTable::ForEachPair(const std::function<void(const PairView&)>& fn) const {
  for (const Shard& shard : shards_) {
    MutexLock lock(shard.mu);
    for (const Pair& p : shard.pairs) {
      if (p.live) VisitLocked(p, fn);
    }
  }
}

void PairTable::ForEachPairOfSource(std::string_view src,
                                    const std::function<void(const Pair&)>& fn) const {
  const std::optional<NodeId> id = Find(src);
  if (!id) return;
  const Shard& shard = shards_[ShardOf(*id)];
  MutexLock lock(shard.mu);
  auto it = shard.by_source.find(*id);
  if (it == shard.by_source.end()) return;
  for (uint32_t index : it->second) fn(shard.pairs[index]);
}

void PairTable::ForEachPairFrom(std::string_view src,
                                const std::function<void(const PairView&)>& fn) const {
  ForEachPairOfSource(src, [&](const Pair& p) { VisitLocked(p, fn); });
}

void PairTable::ForEachWindowsFrom(
    std::string_view src,
    const std::function<void(Transport, PathClass, const PairWindows&)>& fn) const {
  ForEachPairOfSource(src, [&](const Pair& p) { fn(p.transport, p.paths.path_class, p.windows); });
}

bool PairTable::VisitPair(std::string_view src, std::string_view dst, Transport t,
                          const std::function<void(const PairView&)>& fn) const {
  const std::optional<NodeId> s = Find(src);
  const std::optional<NodeId> d = Find(dst);
  if (!s || !d) return false;
  const Shard& shard = shards_[ShardOf(*s)];
  MutexLock lock(shard.mu);
  const auto it = shard.by_key.find(Key(*s, *d, t));
  if (it == shard.by_key.end()) return false;
  VisitLocked(shard.pairs[it->second], fn);
  return true;
}

PairFlows PairTable::FlowsOf(Pair& p) {
  return PairFlows{p.src,   p.dst,          p.transport, p.paths, p.baseline,
                   p.flows, NicPairsOf(p), p.windows};
}

namespace {
// Asks for the first `bytes` of `p` ahead of their use (at most kPrefetchLines cache lines).
constexpr size_t kPrefetchLines = 8;
void PrefetchBytes(const void* p, size_t bytes) {
  const auto* c = static_cast<const char*>(p);
  for (size_t off = 0; off < std::min(bytes, kPrefetchLines * 64); off += 64) {
    __builtin_prefetch(c + off);
  }
}
}  // namespace

void PairTable::ForEachPairFlows(const std::function<void(const PairFlows&)>& fn) {
  // A walk over every flow (the analyzer's tick) waits on memory: each pair's flows are an
  // allocation of their own. The flows of the pair after next and the pair record after that are
  // asked for ahead, so that their loads overlap the visits of the pairs before them.
  constexpr size_t kAheadFlows = 2, kAheadPair = 4;
  for (Shard& shard : shards_) {
    MutexLock lock(shard.mu);
    const size_t n = shard.pairs.size();
    for (size_t i = 0; i < n; ++i) {
      if (i + kAheadPair < n) PrefetchBytes(&shard.pairs[i + kAheadPair], 2 * 64);
      if (i + kAheadFlows < n) {
        const std::vector<FlowSeen>& ahead = shard.pairs[i + kAheadFlows].flows;
        PrefetchBytes(ahead.data(), ahead.size() * sizeof(FlowSeen));
      }
      Pair& p = shard.pairs[i];
      if (p.live) fn(FlowsOf(p));
    }
  }
}

void PairTable::ForEachPairFlowsFrom(NodeId src, const std::function<void(const PairFlows&)>& fn) {
  Shard& shard = shards_[ShardOf(src)];
  MutexLock lock(shard.mu);
  auto it = shard.by_source.find(src);
  if (it == shard.by_source.end()) return;
  for (uint32_t index : it->second) {
    Pair& p = shard.pairs[index];
    fn(FlowsOf(p));
  }
}

std::vector<std::string> PairTable::SourceNodes() const {
  std::vector<NodeId> ids;
  for (const Shard& shard : shards_) {
    MutexLock lock(shard.mu);
    for (const auto& [id, list] : shard.by_source) {
      if (!list.empty()) ids.push_back(id);
    }
  }
  std::sort(ids.begin(), ids.end());
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (NodeId id : ids) out.emplace_back(NameOf(id));
  return out;
}

size_t PairTable::DropIdle(int64_t now_ns, int64_t idle_seconds) {
  const int64_t now_s = now_ns / 1'000'000'000;
  size_t dropped = 0;
  for (Shard& shard : shards_) {
    MutexLock lock(shard.mu);
    for (uint32_t i = 0; i < shard.pairs.size(); ++i) {
      Pair& p = shard.pairs[i];
      if (!p.live || now_s - p.windows.LastRecordSecond() < idle_seconds) continue;
      shard.by_key.erase(Key(p.src, p.dst, p.transport));
      auto& list = shard.by_source[p.src];
      list.erase(std::remove(list.begin(), list.end(), i), list.end());
      if (list.empty()) {
        shard.by_source.erase(p.src);
        shard.recent.erase(p.src);  // a source with no pairs left has no batch worth caching
        shard.pair_index.erase(p.src);
      }
      const uint32_t generation = p.generation;
      p = Pair{};  // releases the buckets' memory
      p.generation = generation;
      shard.free.push_back(i);
      pair_count_.fetch_sub(1, std::memory_order_relaxed);
      ++dropped;
    }
  }
  return dropped;
}

size_t PairTable::PairCount() const {
  size_t n = 0;
  for (const Shard& shard : shards_) {
    MutexLock lock(shard.mu);
    n += shard.by_key.size();
  }
  return n;
}

size_t PairTable::FlowCount() const {
  size_t n = 0;
  for (const Shard& shard : shards_) {
    MutexLock lock(shard.mu);
    for (const Pair& p : shard.pairs) n += p.live ? p.flows.size() : 0;
  }
  return n;
}

size_t PairTable::PairBytes() const {
  size_t bytes = 0;
  for (const Shard& shard : shards_) {
    MutexLock lock(shard.mu);
    for (const Pair& p : shard.pairs) bytes += sizeof(Pair) + p.windows.HeapBytes();
  }
  return bytes;
}

size_t PairTable::FlowBytes() const {
  size_t bytes = 0;
  for (const Shard& shard : shards_) {
    MutexLock lock(shard.mu);
    for (const Pair& p : shard.pairs) {
      bytes += p.flows.capacity() * sizeof(FlowSeen);
      if (p.nic_pairs) bytes += p.nic_pairs->capacity() * sizeof(NicPair);
    }
  }
  return bytes;
}

}  // namespace fw::aggregator
