// Per-flow window sums and the scan the analyzer runs every tick, over the pair store.
#include "daemon/aggregator/analysis/flow_table.h"

#include <algorithm>
#include <array>

#include "common/clock.h"

namespace fw::analysis {

using aggregator::FlowSecond;
using aggregator::FlowSeen;
using aggregator::FlowSlot;
using aggregator::PairFlows;

FlowTable::FlowTable(aggregator::PairTable& store, PathResolver resolver, double bandwidth_window_s)
    : store_(store), bandwidth_window_s_(static_cast<uint32_t>(std::max(1.0, bandwidth_window_s))) {
  store_.SetPathResolver(std::move(resolver));
}

FlowTable::FlowTable(std::shared_ptr<const FabricMap> map, PathResolver resolver,
                     double bandwidth_window_s, std::shared_ptr<aggregator::NameInterner> names)
    : own_(std::make_unique<aggregator::PairTable>(RealClock::Get(), std::move(map),
                                                   aggregator::PairTable::kDefaultMaxPairs,
                                                   std::move(names))),
      store_(*own_),
      bandwidth_window_s_(static_cast<uint32_t>(std::max(1.0, bandwidth_window_s))) {
  store_.SetPathResolver(std::move(resolver));
}

void FlowTable::Ingest(std::span<const ReportedProbe> results, int64_t now_ns) {
  if (results.empty()) return;
  store_.RecordBatch(results, now_ns);
}

std::optional<NodeId> FlowTable::FindNode(std::string_view name) const {
  return store_.names()->Find(name);
}

std::string FlowTable::NodeName(NodeId id) const { return std::string(store_.names()->NameOf(id)); }

size_t FlowTable::NodeCount() const { return store_.names()->size(); }

FlowWindow FlowTable::WindowOf(const FlowSeen& f, uint32_t now_s) const {
  FlowWindow w;
  if (f.last_s == 0 || f.last_s + kSlots <= now_s) return w;
  const uint32_t hi = std::min(now_s, f.last_s);
  // Seconds count from 1, so in the first kSlots seconds the window starts at 1, not below 0.
  const uint32_t top = std::max(now_s, f.last_s);
  const uint32_t lo = top > kSlots - 1 ? top - (kSlots - 1) : 1;
  uint32_t ratio_q = 0;
  // The window's sums: every slot when the window holds kSlots seconds (a flow that reported this
  // second), else its seconds one by one. Integer sums, so the order does not matter.
  auto add = [&](const FlowSlot& slot) {
    w.probes += slot.probes;
    w.lost += slot.lost;
    w.rtt += slot.judged;
    w.slow += slot.slow;
    ratio_q += slot.ratio_q;
  };
  if (hi - lo + 1 == kSlots) {
    for (const FlowSlot& slot : f.slots) add(slot);
  } else {
    for (uint32_t sec = lo, i = lo % kSlots; sec <= hi; ++sec, i = i + 1 == kSlots ? 0 : i + 1) {
      add(f.slots[i]);
    }
  }
  // The freshest seconds: the two complete ones before now_s and now_s itself, those in the window.
  for (uint32_t sec = std::max(lo, now_s > 2 ? now_s - 2 : 0); sec <= hi; ++sec) {
    const FlowSlot& slot = f.slots[sec % kSlots];
    w.fresh_probes += slot.probes;
    w.fresh_lost += slot.lost;
    w.fresh_rtt += slot.judged;
    w.fresh_slow += slot.slow;
    if (sec < now_s) {
      w.recent_probes += slot.probes;
      w.recent_lost += slot.lost;
      w.recent_rtt += slot.judged;
      w.recent_slow += slot.slow;
      if (sec + 1 == now_s) {
        w.last_probes = slot.probes;
        w.last_lost = slot.lost;
      }
    }
  }
  w.ratio_sum = ratio_q / FlowSeen::kRatioScale;
  w.lost_run = f.lost_run;
  if (f.goodput_s != 0 && now_s - f.goodput_s <= bandwidth_window_s_) {
    w.goodput_bps = f.goodput_bps;
    if (f.goodput_cpu_busy_pct != 0) w.goodput_cpu_busy = f.goodput_cpu_busy_pct / 100.0;
    if (f.goodput_cpu_peak_pct != 0) w.goodput_cpu_peak = f.goodput_cpu_peak_pct / 100.0;
    if (f.goodput_cpu_pressure_pct != 0) {
      w.goodput_cpu_pressure = f.goodput_cpu_pressure_pct / 100.0;
    }
  }
  return w;
}

namespace {

// The NIC pair a flow's paths are (FlowSeen::nics), 0 for the pair's own.
size_t NicsOf(const PairFlows& p, const FlowSeen& f) {
  return f.nics > p.nic_pairs.size() ? 0 : f.nics;
}

// The flows of each NIC pair of `p` (FlowRef::nic_flows), by NicsOf.
class NicFlowCounts {
 public:
  explicit NicFlowCounts(const PairFlows& p) : all_(static_cast<uint32_t>(p.flows.size())) {
    if (p.nic_pairs.empty()) return;  // every flow is on the pair's own NICs
    split_ = true;
    std::fill_n(counts_.begin(), std::min(p.nic_pairs.size() + 1, counts_.size()), 0u);
    for (const FlowSeen& f : p.flows) ++counts_[std::min(NicsOf(p, f), counts_.size() - 1)];
  }
  uint32_t Of(size_t nics) const {
    return split_ ? counts_[std::min(nics, counts_.size() - 1)] : all_;
  }

 private:
  uint32_t all_;
  bool split_ = false;
  std::array<uint32_t, aggregator::PairTable::kMaxNicPairs + 1> counts_;
};

}  // namespace

void FlowTable::Scan(int64_t now_ns, Visitor& visitor) {
  const uint32_t now_s = FlowSecond(now_ns);
  store_.ForEachPairFlows([&](const PairFlows& p) {
    const PairRef ref{p.src, p.dst, p.transport, p.paths, p.baseline,
                      static_cast<uint32_t>(p.flows.size())};
    const NicFlowCounts nic_flows(p);
    visitor.BeginPair(ref);
    for (const FlowSeen& f : p.flows) {
      const FlowWindow w = WindowOf(f, now_s);
      if (w.probes == 0 && w.goodput_bps == 0) continue;
      const size_t nics = NicsOf(p, f);
      const PathSet* paths = nics == 0 ? &p.paths : &p.nic_pairs[nics - 1].paths;
      visitor.Flow(ref, FlowRef{f.src_port, f.flow_id, f.path, paths, nic_flows.Of(nics)}, w);
    }
    visitor.EndPair(ref);
  });
}

void FlowTable::ScanFrom(
    NodeId src, int64_t now_ns,
    const std::function<void(const PairRef&, const FlowRef&, const FlowWindow&)>& fn) {
  const uint32_t now_s = FlowSecond(now_ns);
  store_.ForEachPairFlowsFrom(src, [&](const PairFlows& p) {
    const PairRef ref{p.src, p.dst, p.transport, p.paths, p.baseline,
                      static_cast<uint32_t>(p.flows.size())};
    const NicFlowCounts nic_flows(p);
    for (const FlowSeen& f : p.flows) {
      const FlowWindow w = WindowOf(f, now_s);
      if (w.probes == 0 && w.goodput_bps == 0) continue;
      const size_t nics = NicsOf(p, f);
      const PathSet* paths = nics == 0 ? &p.paths : &p.nic_pairs[nics - 1].paths;
      fn(ref, FlowRef{f.src_port, f.flow_id, f.path, paths, nic_flows.Of(nics)}, w);
    }
  });
}

void FlowTable::ForEachPairFrom(NodeId src, const std::function<void(const PairRef&)>& fn) {
  store_.ForEachPairFlowsFrom(src, [&](const PairFlows& p) {
    fn(PairRef{p.src, p.dst, p.transport, p.paths, p.baseline});
  });
}

void FlowTable::ForEachPairWindowsFrom(
    NodeId src, const std::function<void(const PairRef&, const aggregator::PairWindows&)>& fn) {
  store_.ForEachPairFlowsFrom(src, [&](const PairFlows& p) {
    fn(PairRef{p.src, p.dst, p.transport, p.paths, p.baseline}, p.windows);
  });
}

void FlowTable::ForEachPair(const std::function<void(const PairRef&)>& fn) {
  store_.ForEachPairFlows([&](const PairFlows& p) {
    fn(PairRef{p.src, p.dst, p.transport, p.paths, p.baseline});
  });
}

size_t FlowTable::PairCount() const { return store_.PairCount(); }

size_t FlowTable::FlowCount() const { return store_.FlowCount(); }

size_t FlowTable::MemoryBytes() const { return store_.FlowBytes(); }

size_t FlowTable::DropIdle(int64_t now_ns, int64_t idle_s) {
  return store_.DropIdle(now_ns, idle_s);
}

}  // namespace fw::analysis
