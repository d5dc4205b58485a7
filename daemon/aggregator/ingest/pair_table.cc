// Pair lookup, sharding and ingest for PairTable.
#include "daemon/aggregator/ingest/pair_table.h"

#include <algorithm>

#include "daemon/aggregator/ingest/source_runs.h"

namespace fw::aggregator {

PairTable::PairTable(const Clock& clock, std::shared_ptr<const FabricMap> map, size_t max_pairs,
                     std::shared_ptr<NameInterner> names)
    : clock_(clock),
      map_(std::move(map)),
      max_pairs_(max_pairs),
      names_(names ? std::move(names) : std::make_shared<NameInterner>()) {}

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
  if (map_) p.path_class = map_->PathsBetweenNodes(NameOf(src), NameOf(dst)).path_class;
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
  std::lock_guard<std::mutex> lock(shard.mu);
  const uint32_t index = FindOrCreateLocked(shard, s, d, t);
  if (index == kNoIndex) return std::nullopt;
  return PairHandle{static_cast<uint32_t>(ShardOf(s)), index, shard.pairs[index].generation};
}

void PairTable::RecordLocked(Pair& p, const ProbeSample& s, uint16_t src_port, uint32_t flow_id,
                             int64_t now_ns) {
  p.windows.Record(now_ns, s);
  const auto now_s = static_cast<uint32_t>(now_ns / 1'000'000'000);
  for (FlowSeen& f : p.flows) {
    if (f.src_port == src_port && f.flow_id == flow_id) {
      f.last_seen_s = now_s;
      return;
    }
  }
  if (p.flows.size() < kMaxFlowsPerPair) {
    p.flows.push_back(FlowSeen{src_port, flow_id, now_s});
    return;
  }
  // Full: the flow seen longest ago makes room (a re-plan changed the flows).
  auto oldest = std::min_element(p.flows.begin(), p.flows.end(), [](const auto& a, const auto& b) {
    return a.last_seen_s < b.last_seen_s;
  });
  *oldest = FlowSeen{src_port, flow_id, now_s};
}

bool PairTable::Record(const PairHandle& h, const ProbeSample& s, uint16_t src_port,
                       uint32_t flow_id, int64_t now_ns) {
  if (h.shard >= kShards) return false;
  Shard& shard = shards_[h.shard];
  std::lock_guard<std::mutex> lock(shard.mu);
  if (h.index >= shard.pairs.size()) return false;
  Pair& p = shard.pairs[h.index];
  if (!p.live || p.generation != h.generation) return false;
  RecordLocked(p, s, src_port, flow_id, now_ns);
  return true;
}

size_t PairTable::RecordBatch(std::span<const ProbeResult> results) {
  if (results.empty()) return 0;
  size_t recorded = 0;
  const int64_t now_ns = clock_.MonotonicNanos();
  SourceRuns<Shard> runs(*names_, shards_);
  for (const ProbeResult& r : results) {
    if (static_cast<int>(r.transport) >= kTransportCount) {
      rejected_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    runs.Enter(r);
    Shard& shard = runs.shard();
    uint32_t index = kNoIndex;
    if (const RecentPair* c = runs.Cached();
        c && c->transport == r.transport && c->dst == runs.dst() && c->index < shard.pairs.size() &&
        shard.pairs[c->index].live && shard.pairs[c->index].generation == c->generation) {
      index = c->index;
    }
    if (index == kNoIndex) {
      index = FindOrCreateLocked(shard, runs.src(), runs.dst(), r.transport);
      if (index == kNoIndex) {
        rejected_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      runs.Remember(RecentPair{runs.dst(), r.transport, index, shard.pairs[index].generation});
    }
    runs.Advance();
    RecordLocked(shard.pairs[index], ProbeSample{r.lost, r.rtt_ns, r.goodput_bps}, r.src_port,
                 r.flow_id, now_ns);
    ++recorded;
  }
  return recorded;
}

void PairTable::VisitLocked(const Pair& p, const std::function<void(const PairView&)>& fn) const {
  fn(PairView{NameOf(p.src), NameOf(p.dst), p.transport, p.path_class, p.flows, p.windows});
}

void PairTable::ForEachPair(const std::function<void(const PairView&)>& fn) const {
  for (const Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (const Pair& p : shard.pairs) {
      if (p.live) VisitLocked(p, fn);
    }
  }
}

void PairTable::ForEachPairFrom(std::string_view src,
                                const std::function<void(const PairView&)>& fn) const {
  const std::optional<NodeId> id = Find(src);
  if (!id) return;
  const Shard& shard = shards_[ShardOf(*id)];
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.by_source.find(*id);
  if (it == shard.by_source.end()) return;
  for (uint32_t index : it->second) VisitLocked(shard.pairs[index], fn);
}

bool PairTable::VisitPair(std::string_view src, std::string_view dst, Transport t,
                          const std::function<void(const PairView&)>& fn) const {
  const std::optional<NodeId> s = Find(src);
  const std::optional<NodeId> d = Find(dst);
  if (!s || !d) return false;
  const Shard& shard = shards_[ShardOf(*s)];
  std::lock_guard<std::mutex> lock(shard.mu);
  const auto it = shard.by_key.find(Key(*s, *d, t));
  if (it == shard.by_key.end()) return false;
  VisitLocked(shard.pairs[it->second], fn);
  return true;
}

std::vector<std::string> PairTable::SourceNodes() const {
  std::vector<NodeId> ids;
  for (const Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
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
    std::lock_guard<std::mutex> lock(shard.mu);
    for (uint32_t i = 0; i < shard.pairs.size(); ++i) {
      Pair& p = shard.pairs[i];
      if (!p.live || now_s - p.windows.LastRecordSecond() < idle_seconds) continue;
      shard.by_key.erase(Key(p.src, p.dst, p.transport));
      auto& list = shard.by_source[p.src];
      list.erase(std::remove(list.begin(), list.end(), i), list.end());
      if (list.empty()) {
        shard.by_source.erase(p.src);
        shard.recent.erase(p.src);  // a source with no pairs left has no batch worth caching
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
    std::lock_guard<std::mutex> lock(shard.mu);
    n += shard.by_key.size();
  }
  return n;
}

size_t PairTable::PairBytes() const {
  size_t bytes = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (const Pair& p : shard.pairs) {
      bytes += sizeof(Pair) + p.windows.HeapBytes() + p.flows.capacity() * sizeof(FlowSeen);
    }
  }
  return bytes;
}

}  // namespace fw::aggregator
