// The analyzer's view of the pair store: per-flow short windows, pair baselines and paths.
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

#include "daemon/aggregator/ingest/pair_table.h"
#include "daemon/aggregator/model/name_interner.h"
#include "daemon/aggregator/model/reported_probe.h"
#include "daemon/aggregator/plan/fabric_map.h"

namespace fw::analysis {

using aggregator::FabricMap;
using aggregator::kNoNode;
using aggregator::NodeId;
using aggregator::PathClass;
using aggregator::PathSet;
using aggregator::ReportedProbe;
using aggregator::Transport;

using aggregator::DeterministicPath;
using aggregator::PairBaseline;
using aggregator::PathResolver;

// What a flow did in the short window, at one tick.
struct FlowWindow {
  uint32_t probes = 0;
  uint32_t lost = 0;
  uint32_t rtt = 0;      // probes with an RTT (not lost, latency transports)
  uint32_t slow = 0;     // of those, above the pair's slow threshold
  double ratio_sum = 0;  // Σ rtt / baseline median over the `rtt` samples (0 without a baseline)
  uint32_t recent_probes = 0;  // the two complete seconds before the tick's second
  uint32_t recent_lost = 0;
  uint32_t recent_rtt = 0;  // ...and their RTT samples, and of those the slow ones
  uint32_t recent_slow = 0;
  uint32_t last_probes = 0;  // the one complete second before the tick's second
  uint32_t last_lost = 0;
  // The freshest probes: the two complete seconds and the tick's own second so far. Counts, not a
  // reading of a second, so an incomplete second is as good as a complete one; what the tick
  // knows of it is the freshest data there is (the dense loss test, Blamer::FreshLoss).
  uint32_t fresh_probes = 0;
  uint32_t fresh_lost = 0;
  uint32_t fresh_rtt = 0;  // ...and their RTT samples, and of those the slow ones
  uint32_t fresh_slow = 0;
  // Lost probes since the flow's last answered one, in arrival order (FlowSeen::lost_run): with
  // fresh probes, the flow loses every probe now.
  uint32_t lost_run = 0;
  double goodput_bps = 0;  // last bandwidth sample within the bandwidth window, else 0
  // That sample's prober host CPU busy share over the burst (all CPUs, the busiest one), in
  // [0.01, 1]; -1: not measured.
  double goodput_cpu_busy = -1;
  double goodput_cpu_peak = -1;
  // Its CPU pressure share (runnable tasks waited for a CPU) over the burst; -1: not measured.
  double goodput_cpu_pressure = -1;
};

struct PairRef {
  NodeId src = 0;
  NodeId dst = 0;
  Transport transport = Transport::kUdp;
  const PathSet& paths;    // path_class kUnknown when the map does not know the pair
  PairBaseline& baseline;  // the visitor may update `hold`
  uint32_t flows = 0;      // the pair's planned flows in this direction (Scan only; else 0)
};

struct FlowRef {
  uint16_t src_port = 0;
  uint32_t flow_id = 0;
  int32_t path = -1;  // resolved path index, -1 when every candidate path is possible
  // The flow's own candidate paths: its NIC pair's (its rail, leaves and access links) when its
  // results named NICs, else the pair's. `path` indexes these. Never null in a Scan.
  const PathSet* paths = nullptr;
  // The flows of its NIC pair (FlowSeen::nics) in this pair: what a plan entry toward the peer
  // holds, flow ids 0..n-1 (each NIC pair is its own entry). Scan and ScanFrom only; else 0.
  uint32_t nic_flows = 0;
};

// Thread-safe: a view of an aggregator::PairTable, which ingest writes once per batch and which
// holds each flow's one-second slots and each pair's baseline next to its windows.
class FlowTable {
 public:
  static constexpr int kSlots = aggregator::FlowSeen::kSlots;  // the 10 s short window
  static constexpr size_t kMaxFlowsPerPair = aggregator::PairTable::kMaxFlowsPerPair;

  // A view of `store`, which must outlive this. New flows of the store get their path from
  // `resolver` (empty: DeterministicPath with a deterministic map). A bandwidth sample counts for
  // `bandwidth_window_s`.
  FlowTable(aggregator::PairTable& store, PathResolver resolver, double bandwidth_window_s);
  // A table of its own (tests and benchmarks), fed by Ingest(). `map` may be null. `names` is the
  // interner whose ids results may carry; null gives the table its own.
  FlowTable(std::shared_ptr<const FabricMap> map, PathResolver resolver, double bandwidth_window_s,
            std::shared_ptr<aggregator::NameInterner> names = nullptr);

  // Records results that arrived at `now_ns` into a table of its own. With a shared store, ingest
  // records into the store instead (PairTable::RecordBatch).
  void Ingest(std::span<const ReportedProbe> results, int64_t now_ns);

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
  // The same for the pairs whose source is `src` only (a few flows read between ticks):
  // fn(pair, flow, window) for each flow with data in the window. Under a shard lock: fn must not
  // call back into the table.
  void ScanFrom(NodeId src, int64_t now_ns,
                const std::function<void(const PairRef&, const FlowRef&, const FlowWindow&)>& fn);

  // Calls fn for every pair whose source is `src`, with its baseline writable.
  void ForEachPairFrom(NodeId src, const std::function<void(const PairRef&)>& fn);
  // The same with the pair's long windows.
  void ForEachPairWindowsFrom(
      NodeId src, const std::function<void(const PairRef&, const aggregator::PairWindows&)>& fn);
  // The same for every pair.
  void ForEachPair(const std::function<void(const PairRef&)>& fn);

  std::optional<NodeId> FindNode(std::string_view name) const;
  // REQUIRES: id came from this table.
  std::string NodeName(NodeId id) const;
  size_t NodeCount() const;
  size_t PairCount() const;
  size_t FlowCount() const;
  // The flow records' memory (the rest of the store is the pair table's).
  size_t MemoryBytes() const;
  // Drops pairs with no result for `idle_s`; returns how many.
  size_t DropIdle(int64_t now_ns, int64_t idle_s = 660);

 private:
  FlowWindow WindowOf(const aggregator::FlowSeen& f, uint32_t now_s) const;

  std::unique_ptr<aggregator::PairTable> own_;  // null for a view
  aggregator::PairTable& store_;
  uint32_t bandwidth_window_s_;
};

}  // namespace fw::analysis
