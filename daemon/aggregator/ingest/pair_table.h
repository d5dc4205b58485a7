// Every probe pair's windows, with a cheap ingest path by pre-resolved handle or compact key.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "daemon/aggregator/plan/fabric_map.h"
#include "daemon/aggregator/model/name_interner.h"
#include "daemon/aggregator/ingest/pair_windows.h"
#include "daemon/aggregator/model/probe_result.h"

namespace fw::aggregator {

// Names a pair slot. Stays valid until the pair is dropped by DropIdle(); a stale handle is
// detected by its generation and ignored.
struct PairHandle {
  uint32_t shard = 0;
  uint32_t index = 0;
  uint32_t generation = 0;
};

// One distinct flow (source port) seen on a pair.
struct FlowSeen {
  uint16_t src_port = 0;
  uint32_t flow_id = 0;
  uint32_t last_seen_s = 0;  // aggregator monotonic seconds
};

// A read-only view of one pair, handed to visitors under the pair's shard lock.
struct PairView {
  std::string_view src;
  std::string_view dst;
  Transport transport;
  PathClass path_class;
  const std::vector<FlowSeen>& flows;
  const PairWindows& windows;
};

// Thread-safe. Pairs are spread over shards by source node; each shard has its own mutex, so
// agents reporting for different nodes rarely contend. A batch from one agent (one source node)
// takes one shard lock once. Node names are interned once into NodeIds, in an interner that the
// aggregator shares with the analyzer's FlowTable, so that ingest resolves a name once per batch
// for both.
class PairTable {
 public:
  static constexpr int kShards = 16;
  static constexpr size_t kMaxFlowsPerPair = 64;

  static constexpr size_t kDefaultMaxPairs = 4'000'000;

  // `map` may be null (no fabric map: every pair has path class unknown). `clock` must outlive
  // this. Past `max_pairs` pairs, results for new pairs are rejected (and counted), so a flood of
  // made-up destination names cannot exhaust memory. `names` is the interner whose ids results
  // may carry; null gives the table its own.
  PairTable(const Clock& clock, std::shared_ptr<const FabricMap> map,
            size_t max_pairs = kDefaultMaxPairs, std::shared_ptr<NameInterner> names = nullptr);

  // The interner of this table's NodeIds (thread-safe; share it with tables fed the same ids).
  const std::shared_ptr<NameInterner>& names() const { return names_; }

  // Finds or creates the pair. Costs two string hashes; cache the handle on hot paths. nullopt
  // when the table is full or the transport is not a known value.
  std::optional<PairHandle> Resolve(std::string_view src, std::string_view dst, Transport t);
  // Records one sample at `now_ns` (aggregator monotonic time). Returns false for a stale handle.
  bool Record(const PairHandle& h, const ProbeSample& s, uint16_t src_port, uint32_t flow_id,
              int64_t now_ns);
  // Resolves and records a batch with one clock read. Results may mix source nodes, and may name
  // nodes by id (ids of names()) or by name (see ProbeResult). Returns how many were recorded; the
  // others (unknown transport, table full) are counted in Rejected().
  size_t RecordBatch(std::span<const ProbeResult> results);
  bool Record(const ProbeResult& r) {
    return RecordBatch(std::span<const ProbeResult>(&r, 1)) == 1;
  }
  // Results refused since construction (export as a counter).
  uint64_t Rejected() const { return rejected_.load(std::memory_order_relaxed); }

  // Calls fn for every pair (unordered), holding one shard lock at a time. fn must not call back
  // into this table.
  void ForEachPair(const std::function<void(const PairView&)>& fn) const;
  // Calls fn for every pair whose source is `src` (fast: pairs are indexed by source).
  void ForEachPairFrom(std::string_view src, const std::function<void(const PairView&)>& fn) const;
  // Calls fn for one pair if it exists; returns whether it did. Creates nothing.
  bool VisitPair(std::string_view src, std::string_view dst, Transport t,
                 const std::function<void(const PairView&)>& fn) const;
  // Source node names that have at least one pair, in first-seen order.
  std::vector<std::string> SourceNodes() const;

  // Drops pairs with no result for `idle_seconds` (default: longer than the longest window).
  // Returns how many were dropped.
  size_t DropIdle(int64_t now_ns, int64_t idle_seconds = 660);

  size_t PairCount() const;
  // Memory held for pairs: the pair objects plus their heap (buckets, flows), without the small
  // per-pair index entries.
  size_t PairBytes() const;
  const Clock& clock() const { return clock_; }

 private:
  struct Pair {
    NodeId src = 0;
    NodeId dst = 0;
    Transport transport = Transport::kUdp;
    PathClass path_class = PathClass::kUnknown;
    bool live = false;
    uint32_t generation = 0;
    std::vector<FlowSeen> flows;
    PairWindows windows;
  };
  // Where result k of a source's previous batch went. Agents send their peers in the same order
  // every second, so result k of the next batch usually names the same pair: comparing an id
  // replaces looking the pair up (measured: ~17% of the aggregator's ingest CPU at 4,000 agents).
  struct RecentPair {
    NodeId dst = kNoNode;
    Transport transport = Transport::kUdp;
    uint32_t index = 0;
    uint32_t generation = 0;
  };
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<NodeId, std::vector<RecentPair>> recent;   // GUARDED_BY(mu); by source
    std::unordered_map<uint64_t, uint32_t> by_key;                // GUARDED_BY(mu)
    std::unordered_map<NodeId, std::vector<uint32_t>> by_source;  // GUARDED_BY(mu)
    std::deque<Pair> pairs;                                       // GUARDED_BY(mu); stable
    std::vector<uint32_t> free;                                   // GUARDED_BY(mu)
  };

  static uint64_t Key(NodeId src, NodeId dst, Transport t) {
    return (static_cast<uint64_t>(src) << 35) | (static_cast<uint64_t>(dst) << 6) |
           static_cast<uint64_t>(t);
  }
  static int ShardOf(NodeId src) { return static_cast<int>(src % kShards); }
  NodeId Intern(std::string_view name);
  std::optional<NodeId> Find(std::string_view name) const;
  std::string_view NameOf(NodeId id) const;
  // REQUIRES: shard.mu held. kNoIndex when the table is full.
  uint32_t FindOrCreateLocked(Shard& shard, NodeId src, NodeId dst, Transport t);
  static void RecordLocked(Pair& p, const ProbeSample& s, uint16_t src_port, uint32_t flow_id,
                           int64_t now_ns);
  void VisitLocked(const Pair& p, const std::function<void(const PairView&)>& fn) const;

  const Clock& clock_;
  std::shared_ptr<const FabricMap> map_;
  const size_t max_pairs_;
  std::atomic<size_t> pair_count_{0};
  std::atomic<uint64_t> rejected_{0};
  std::shared_ptr<NameInterner> names_;
  std::array<Shard, kShards> shards_;
};

}  // namespace fw::aggregator
