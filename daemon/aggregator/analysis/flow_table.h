// Per-flow short-window counters for the analyzer: the ingest side of detection and localization.
#pragma once

#include <array>
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

#include "daemon/aggregator/plan/fabric_map.h"
#include "daemon/aggregator/model/name_interner.h"
#include "daemon/aggregator/model/probe_result.h"

namespace fw::analysis {

using aggregator::FabricMap;
using aggregator::kNoNode;
using aggregator::NodeId;
using aggregator::PathClass;
using aggregator::PathSet;
using aggregator::ProbeResult;
using aggregator::Transport;

// Picks the one path (an index into PathSet::core->paths) a flow takes, when it can be known;
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

// Baseline of one pair, maintained by the analyzer from the long window.
struct PairBaseline {
  float median_s = 0;  // the pair's own long-window median; 0 until ready
  float mad_s = 0;
  float reference_s = 0;       // what RTT ratios are taken against: own median, else the class's
  float slow_threshold_s = 0;  // 0: latency is not judged for this pair
  bool hold = false;           // the pair looks bad: keep the baseline as it is
};

// What a flow did in the short window, at one tick.
struct FlowWindow {
  uint32_t probes = 0;
  uint32_t lost = 0;
  uint32_t rtt = 0;      // probes with an RTT (not lost, latency transports)
  uint32_t slow = 0;     // of those, above the pair's slow threshold
  double ratio_sum = 0;  // Σ rtt / baseline median over the `rtt` samples (0 without a baseline)
  uint32_t recent_probes = 0;  // the two complete seconds before the tick's second
  uint32_t recent_lost = 0;
  uint32_t last_probes = 0;  // the one complete second before the tick's second
  uint32_t last_lost = 0;
  double goodput_bps = 0;  // last bandwidth sample within the bandwidth window, else 0
};

struct PairRef {
  NodeId src = 0;
  NodeId dst = 0;
  Transport transport = Transport::kUdp;
  const PathSet& paths;    // path_class kUnknown when the map does not know the pair
  PairBaseline& baseline;  // the visitor may update `hold`
};

struct FlowRef {
  uint16_t src_port = 0;
  uint32_t flow_id = 0;
  int32_t path = -1;  // resolved path index, -1 when every candidate path is possible
};

// Thread-safe. Shards by source node like PairTable; a batch from one agent takes one lock.
class FlowTable {
 public:
  static constexpr int kSlots = 10;  // one-second slots: the 10 s short window
  static constexpr int kShards = 16;
  static constexpr size_t kMaxFlowsPerPair = 64;

  // `map` may be null. `resolver` may be empty; with a deterministic map DeterministicPath is
  // used when it is. `names` is the interner whose ids results may carry (the PairTable's); null
  // gives the table its own.
  FlowTable(std::shared_ptr<const FabricMap> map, PathResolver resolver, double bandwidth_window_s,
            std::shared_ptr<aggregator::NameInterner> names = nullptr);

  // Records results that arrived at `now_ns` (aggregator monotonic time). Results may name their
  // nodes by id (ids of the table's interner) or by name; see ProbeResult.
  void Ingest(std::span<const ProbeResult> results, int64_t now_ns);

  // Receives every pair and its flows with data in the window. Called under a shard lock: must
  // not call back into the table.
  class Visitor {
   public:
    virtual ~Visitor() = default;
    virtual void BeginPair(const PairRef& pair) = 0;
    virtual void Flow(const PairRef& pair, const FlowRef& flow, const FlowWindow& w) = 0;
    // The last moment the pair's baseline may be written in this scan.
    virtual void EndPair(const PairRef& pair) = 0;
  };
  void Scan(int64_t now_ns, Visitor& visitor);

  // Calls fn for every pair whose source is `src`, with its baseline writable.
  void ForEachPairFrom(NodeId src, const std::function<void(const PairRef&)>& fn);
  // The same for every pair.
  void ForEachPair(const std::function<void(const PairRef&)>& fn);

  std::optional<NodeId> FindNode(std::string_view name) const;
  // REQUIRES: id came from this table.
  std::string NodeName(NodeId id) const;
  size_t NodeCount() const;
  size_t PairCount() const;
  size_t FlowCount() const;
  size_t MemoryBytes() const;
  // Drops pairs with no result for `idle_s`; returns how many.
  size_t DropIdle(int64_t now_ns, int64_t idle_s = 660);

 private:
  struct Slot {
    uint8_t probes = 0;
    uint8_t lost = 0;
    uint8_t slow = 0;
    uint8_t judged = 0;    // RTT samples compared with a baseline
    uint16_t ratio_q = 0;  // Σ min(rtt/median, 64) in 1/32 units, saturating
  };
  struct Flow {
    uint16_t src_port = 0;
    int16_t path = -1;
    uint32_t flow_id = 0;
    uint32_t last_s = 0;  // second of the last record; 0 = none
    uint32_t goodput_s = 0;
    float goodput_bps = 0;
    std::array<Slot, kSlots> slots{};
  };
  struct Pair {
    NodeId src = 0;
    NodeId dst = 0;
    Transport transport = Transport::kUdp;
    bool live = false;
    uint32_t last_s = 0;
    PathSet paths;
    PairBaseline baseline;
    std::vector<Flow> flows;
  };
  // Where result k of a source's previous batch went: a pair slot and a flow in it. Agents send
  // the same rows in the same order every second, so checking that slot's key replaces the
  // hash lookup of the pair and the search for the flow (the lookup was 13% of the aggregator's
  // CPU at 4,000 agents). A slot reused for another pair or flow fails the check.
  struct RecentFlow {
    uint32_t pair = 0;
    uint32_t flow = 0;
  };
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<NodeId, std::vector<RecentFlow>> recent;   // GUARDED_BY(mu); by source
    std::unordered_map<uint64_t, uint32_t> by_key;                // GUARDED_BY(mu)
    std::unordered_map<NodeId, std::vector<uint32_t>> by_source;  // GUARDED_BY(mu)
    std::deque<Pair> pairs;                                       // GUARDED_BY(mu)
    std::vector<uint32_t> free;                                   // GUARDED_BY(mu)
  };

  static uint64_t Key(NodeId src, NodeId dst, Transport t) {
    return (static_cast<uint64_t>(src) << 35) | (static_cast<uint64_t>(dst) << 6) |
           static_cast<uint64_t>(t);
  }
  // REQUIRES: shard.mu held. Both return an index: of the pair in shard.pairs, of the flow in
  // p.flows.
  uint32_t FindOrCreateLocked(Shard& shard, NodeId src, NodeId dst, Transport t);
  uint32_t FlowOfLocked(Pair& p, uint16_t src_port, uint32_t flow_id);
  static void RecordLocked(Pair& p, Flow& f, const ProbeResult& r, uint32_t now_s);
  FlowWindow WindowOf(const Flow& f, uint32_t now_s) const;

  std::shared_ptr<const FabricMap> map_;
  PathResolver resolver_;
  uint32_t bandwidth_window_s_;
  std::shared_ptr<aggregator::NameInterner> names_;
  std::array<Shard, kShards> shards_;
};

}  // namespace fw::analysis
