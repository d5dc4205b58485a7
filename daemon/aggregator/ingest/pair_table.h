// The pair store: every probe pair's windows (for /api/v1/pairs and the node metrics) and its
// flows' short-window slots and baseline (for the analyzer), written once per batch, with a cheap
// ingest path by pre-resolved handle or compact key.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "daemon/aggregator/ingest/pair_windows.h"
#include "daemon/aggregator/ingest/source_pair_index.h"
#include "daemon/aggregator/ingest/source_runs.h"
#include "daemon/aggregator/model/name_interner.h"
#include "daemon/aggregator/model/reported_probe.h"
#include "daemon/aggregator/plan/fabric_map.h"

namespace fw::aggregator {

// Names a pair slot. Stays valid until the pair is dropped by DropIdle(); a stale handle is
// detected by its generation and ignored.
struct PairHandle {
  uint32_t shard = 0;
  uint32_t index = 0;
  uint32_t generation = 0;
};

// One second of a flow's short window.
struct FlowSlot {
  uint8_t probes = 0;
  uint8_t lost = 0;
  uint8_t slow = 0;
  uint8_t judged = 0;    // RTT samples compared with a baseline
  uint16_t ratio_q = 0;  // Σ min(rtt/reference, kRatioClip) in 1/kRatioScale units, saturating
};

// One NIC pair that results of a node pair named (ReportedProbe::src_nic, dst_nic), other than the
// pair's own (the nodes' first common rail), with the candidate paths between those NICs: each
// rail of a multi-rail host has its own leaves and spines.
struct NicPair {
  std::string src_nic;
  std::string dst_nic;
  PathSet paths;  // FabricMap::PathsBetweenNics: the node pair's paths when the map lacks a NIC
};

// One distinct flow (NIC pair, source port, flow id) seen on a pair: its short window as one-second
// slots, the path it takes when known, and its last bandwidth sample.
struct FlowSeen {
  static constexpr int kSlots = 10;  // one-second slots: the 10 s short window
  static constexpr double kRatioClip = 64.0;
  static constexpr double kRatioScale = 32.0;

  uint16_t src_port = 0;
  int16_t path = -1;  // index into the pair's PathSet::core->paths; -1: any equal-cost path
  uint32_t flow_id = 0;
  uint32_t last_s = 0;  // FlowSecond() of the last record; 0 = none
  uint32_t goodput_s = 0;
  float goodput_bps = 0;
  std::array<FlowSlot, kSlots> slots{};
  // 0: the pair's paths (the results named no NIC, or the NICs of those paths, or the pair has no
  // map paths); k: the pair's NIC pair k-1. Two rails may use the same source ports and flow ids:
  // the NIC pair keeps their flows apart.
  uint8_t nics = 0;
  // The last bandwidth sample's prober CPU busy share in percent (1..100; all CPUs, the busiest
  // one) and its CPU pressure share in percent; 0: not measured. Fit the struct's padding.
  uint8_t goodput_cpu_busy_pct = 0;
  uint8_t goodput_cpu_peak_pct = 0;
  uint8_t goodput_cpu_pressure_pct = 0;
  // Lost probes recorded since the flow's last answered one (a late echo answers), saturating:
  // how long the flow has lost every probe, in the order its results arrived. 0 once the window
  // is empty (its seconds all left it).
  uint8_t lost_run = 0;
};

// The store's seconds for flows: aggregator monotonic seconds + 1, so that 0 means "never".
inline uint32_t FlowSecond(int64_t now_ns) {
  return static_cast<uint32_t>(std::max<int64_t>(now_ns, 0) / 1'000'000'000) + 1;
}

// Baseline of one pair, maintained by the analyzer from the long window; ingest reads it to judge
// each RTT sample.
struct PairBaseline {
  float median_s = 0;  // the pair's own long-window median; 0 until ready
  float mad_s = 0;
  float reference_s = 0;       // what RTT ratios are taken against: own median, else the class's
  float slow_threshold_s = 0;  // 0: latency is not judged for this pair
  bool hold = false;           // the pair looks bad: keep the baseline as it is
};

// Picks the one path (an index into PathSet::core->paths) a flow takes, when it can be known;
// `paths` are the flow's own (its NIC pair's, else the pair's);
// nullopt leaves the flow with every equal-cost path as a candidate. Called once per new flow,
// under a table lock: must be fast and must not call back into the table.
using PathResolver = std::function<std::optional<uint32_t>(std::string_view src,
                                                           std::string_view dst, uint16_t src_port,
                                                           uint32_t flow_id, const PathSet& paths)>;

// The convention for `routing: deterministic` maps: flow i of a pair takes path i mod n, with the
// paths in FabricMap's (sorted) order. The planner and the fleet simulator follow it.
std::optional<uint32_t> DeterministicPath(std::string_view src, std::string_view dst,
                                          uint16_t src_port, uint32_t flow_id,
                                          const PathSet& paths);

// One pair as the analyzer sees it, handed to visitors under the pair's shard lock; the visitor
// may write the baseline.
struct PairFlows {
  NodeId src = 0;
  NodeId dst = 0;
  Transport transport = Transport::kUdp;
  const PathSet& paths;  // path_class kUnknown when the map does not know the pair
  PairBaseline& baseline;
  std::span<const FlowSeen> flows;
  std::span<const NicPair> nic_pairs;  // FlowSeen::nics k > 0 is nic_pairs[k - 1]
  const PairWindows& windows;          // the pair's long windows (baselines read the 600 s one)
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
// takes one shard lock once. Node names are interned once into NodeIds, in an interner shared with
// ingest, so that ingest resolves a name once per batch.
//
// Each pair holds both what /api/v1/pairs shows (windows up to 600 s, the flows seen) and what the
// analyzer reads (per-flow 10 s slots, the pair's paths and baseline): one lookup and one lock per
// result feed both.
class PairTable {
 public:
  static constexpr int kShards = 16;
  static constexpr size_t kMaxFlowsPerPair = 64;
  // NIC pairs kept per node pair besides its own (8 rails each way is 64); results naming more
  // take the pair's paths.
  static constexpr size_t kMaxNicPairs = 64;

  static constexpr size_t kDefaultMaxPairs = 4'000'000;

  // `map` may be null (no fabric map: every pair has path class unknown). `clock` must outlive
  // this. Past `max_pairs` pairs, results for new pairs are rejected (and counted), so a flood of
  // made-up destination names cannot exhaust memory. `names` is the interner whose ids results
  // may carry; null gives the table its own.
  PairTable(const Clock& clock, std::shared_ptr<const FabricMap> map,
            size_t max_pairs = kDefaultMaxPairs, std::shared_ptr<NameInterner> names = nullptr);

  // The interner of this table's NodeIds (thread-safe; share it with tables fed the same ids).
  const std::shared_ptr<NameInterner>& names() const { return names_; }
  const std::shared_ptr<const FabricMap>& map() const { return map_; }

  // How new flows get their path. Without one (and with a deterministic map) DeterministicPath is
  // used. Call before the first result is recorded.
  void SetPathResolver(PathResolver resolver);

  // Finds or creates the pair. Costs two string hashes; cache the handle on hot paths. nullopt
  // when the table is full or the transport is not a known value.
  std::optional<PairHandle> Resolve(std::string_view src, std::string_view dst, Transport t);
  // Records one sample at `now_ns` (aggregator monotonic time). Returns false for a stale handle.
  bool Record(const PairHandle& h, const ProbeSample& s, uint16_t src_port, uint32_t flow_id,
              int64_t now_ns);
  // Resolves and records a batch with one clock read. Results may mix source nodes, and may name
  // nodes by id (ids of names()) or by name (see ReportedProbe). Returns how many were recorded;
  // the others (unknown transport, table full) are counted in Rejected().
  size_t RecordBatch(std::span<const ReportedProbe> results);
  // The same, arrived at `now_ns` (aggregator monotonic time).
  size_t RecordBatch(std::span<const ReportedProbe> results, int64_t now_ns);
  bool Record(const ReportedProbe& r) {
    return RecordBatch(std::span<const ReportedProbe>(&r, 1)) == 1;
  }
  // Results refused since construction (export as a counter).
  uint64_t Rejected() const { return rejected_.load(std::memory_order_relaxed); }

  // Calls fn for every pair (unordered), holding one shard lock at a time. fn must not call back
  // into this table.
  void ForEachPair(const std::function<void(const PairView&)>& fn) const;
  // Calls fn for every pair whose source is `src` (fast: pairs are indexed by source).
  void ForEachPairFrom(std::string_view src, const std::function<void(const PairView&)>& fn) const;
  // Calls fn with the transport, path class and windows of every pair whose source is `src`: what
  // per-node aggregates read, without resolving the nodes' names (two interner lookups per pair).
  void ForEachWindowsFrom(
      std::string_view src,
      const std::function<void(Transport, PathClass, const PairWindows&)>& fn) const;
  // Calls fn for one pair if it exists; returns whether it did. Creates nothing.
  bool VisitPair(std::string_view src, std::string_view dst, Transport t,
                 const std::function<void(const PairView&)>& fn) const;
  // Source node names that have at least one pair, in first-seen order.
  std::vector<std::string> SourceNodes() const;

  // The analyzer's access: every pair (or every pair from `src`) with its flows and a writable
  // baseline, one shard lock at a time. fn must not call back into this table.
  void ForEachPairFlows(const std::function<void(const PairFlows&)>& fn);
  void ForEachPairFlowsFrom(NodeId src, const std::function<void(const PairFlows&)>& fn);

  // Drops pairs with no result for `idle_seconds` (default: longer than the longest window).
  // Returns how many were dropped.
  size_t DropIdle(int64_t now_ns, int64_t idle_seconds = 660);

  size_t PairCount() const;
  size_t FlowCount() const;
  // Memory held for pairs: the pair objects plus their windows' heap, without the flows and the
  // small per-pair index entries.
  size_t PairBytes() const;
  // Memory held for the pairs' flow records.
  size_t FlowBytes() const;
  const Clock& clock() const { return clock_; }

 private:
  struct Pair {
    NodeId src = 0;
    NodeId dst = 0;
    Transport transport = Transport::kUdp;
    bool live = false;
    uint32_t generation = 0;
    PathSet paths;
    // The NIC names of `paths` (the map's strings), null when the pair has no map paths: checked
    // for every result that names NICs, so kept at hand.
    const std::string* own_src_nic = nullptr;
    const std::string* own_dst_nic = nullptr;
    PairBaseline baseline;
    std::vector<FlowSeen> flows;
    // Allocated at the first result naming another NIC pair than the pair's own: single-NIC fleets
    // pay one pointer per pair.
    std::unique_ptr<std::vector<NicPair>> nic_pairs;
    PairWindows windows;
  };
  // Where result k of a source's previous batch went: a pair slot and a flow in it. Agents send
  // their peers in the same order every second, so result k of the next batch usually names the
  // same pair and flow: comparing ids replaces looking the pair up and searching its flows
  // (measured: ~17% of the aggregator's ingest CPU at 4,000 agents). A slot reused for another
  // pair fails the generation check.
  struct RecentPair {
    NodeId dst = kNoNode;
    Transport transport = Transport::kUdp;
    uint32_t index = 0;
    uint32_t generation = 0;
    uint32_t flow = 0;
  };
  struct Shard {
    mutable Mutex mu;
    std::unordered_map<NodeId, std::vector<RecentPair>> recent FW_GUARDED_BY(mu);  // by source
    std::unordered_map<uint64_t, uint32_t> by_key FW_GUARDED_BY(mu);
    // By source: where its pairs are, for batches whose rows differ from the source's previous
    // batch (`recent` then misses: plans with fractional rates send other flows each batch).
    std::unordered_map<NodeId, SourcePairIndex> pair_index FW_GUARDED_BY(mu);
    std::unordered_map<NodeId, std::vector<uint32_t>> by_source FW_GUARDED_BY(mu);
    std::deque<Pair> pairs FW_GUARDED_BY(mu);  // stable
    std::vector<uint32_t> free FW_GUARDED_BY(mu);
  };

  static uint64_t Key(NodeId src, NodeId dst, Transport t) {
    return (static_cast<uint64_t>(src) << 35) | (static_cast<uint64_t>(dst) << 6) |
           static_cast<uint64_t>(t);
  }
  static int ShardOf(NodeId src) { return static_cast<int>(src % kShards); }
  NodeId Intern(std::string_view name);
  std::optional<NodeId> Find(std::string_view name) const;
  std::string_view NameOf(NodeId id) const;
  // kNoIndex when the table is full.
  uint32_t FindOrCreateLocked(Shard& shard, NodeId src, NodeId dst, Transport t)
      FW_REQUIRES(shard.mu);
  // REQUIRES: the shard's lock held (by `runs`). Asks for the memory of the results a few
  // positions ahead of `runs`' current one, where the source's previous batch went; changes
  // nothing.
  void PrefetchAheadLocked(const Shard& shard, const SourceRuns<Shard>& runs, int64_t now_ns)
      FW_REQUIRES(shard.mu);
  // REQUIRES: the pair's shard lock held. The FlowSeen::nics of a result naming these NICs (the
  // NIC pair is added when new).
  uint8_t NicsOfLocked(Pair& p, std::string_view src_nic, std::string_view dst_nic);
  // REQUIRES: the pair's shard lock held. Whether flow `f` of `p` is the NIC pair a result names.
  static bool SameNicsLocked(const Pair& p, const FlowSeen& f, const ReportedProbe& r);
  // The NICs of the pair's own paths match these names; true when its paths are not mapped (NIC
  // names cannot change them then).
  static bool OwnNics(const Pair& p, std::string_view src_nic, std::string_view dst_nic);
  static std::span<const NicPair> NicPairsOf(const Pair& p) {
    return p.nic_pairs ? std::span<const NicPair>(*p.nic_pairs) : std::span<const NicPair>();
  }
  // REQUIRES: the pair's shard lock held. The view of `p` that ForEachPairFlows* hand out (its
  // baseline writable).
  static PairFlows FlowsOf(Pair& p);
  // REQUIRES: the pair's shard lock held. The index of the flow in p.flows, created if new (the
  // flow seen longest ago makes room when the pair is full).
  uint32_t FlowOfLocked(Pair& p, uint16_t src_port, uint32_t flow_id, uint8_t nics = 0);
  // REQUIRES: the pair's shard lock held.
  static void RecordLocked(Pair& p, FlowSeen& f, const ProbeSample& s, Transport t, int64_t now_ns);
  void VisitLocked(const Pair& p, const std::function<void(const PairView&)>& fn) const;
  // Calls fn for every pair whose source is `src`, under its shard's lock.
  void ForEachPairOfSource(std::string_view src, const std::function<void(const Pair&)>& fn) const;

  const Clock& clock_;
  std::shared_ptr<const FabricMap> map_;
  const size_t max_pairs_;
  PathResolver resolver_;  // set before ingest starts, read-only after
  std::atomic<size_t> pair_count_{0};
  std::atomic<uint64_t> rejected_{0};
  std::shared_ptr<NameInterner> names_;
  std::array<Shard, kShards> shards_;
};

}  // namespace fw::aggregator
