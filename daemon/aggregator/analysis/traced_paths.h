// The paths that agents traced for their flows (issue 16), mapped onto the fabric map's
// equal-cost paths: which path index of a pair's PathSet a flow takes, as its last trace said.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "daemon/aggregator/model/name_interner.h"
#include "daemon/aggregator/plan/fabric_map.h"

namespace fw::analysis {

// How a flow's path was known when the analyzer judged it (finding evidence: paths_traced,
// paths_map, paths_candidates).
enum class PathSource : uint8_t { kCandidates = 0, kMap, kTraced };
inline constexpr int kPathSourceCount = 3;
const char* PathSourceName(PathSource s);

// What one trace told.
struct TraceOutcome {
  enum Kind : uint8_t {
    kResolved,   // exactly one of the pair's paths matches the hops
    kAmbiguous,  // several match (silent or unknown hops where they differ)
    kNoMatch,    // the hops contradict every path of the map (a path the map does not know)
    kUnmapped,   // the pair has no map path, or the table is full
  };
  Kind kind = kUnmapped;
  int32_t path = -1;
  // Hop addresses in no switch's `addresses` list: they still tell this flow's path from others,
  // and findings name them.
  std::vector<std::string> unknown_hops;
};

// The NICs (map indices) a flow leaves from and arrives at: which rail's paths its trace indexes.
struct FlowNics {
  aggregator::HostNicIndex src = aggregator::kNoIndex;
  aggregator::HostNicIndex dst = aggregator::kNoIndex;
  bool known() const { return src != aggregator::kNoIndex && dst != aggregator::kNoIndex; }
  bool operator==(const FlowNics&) const = default;
};
// The NICs of a path set's access links; unknown when the set is not mapped.
FlowNics NicsOfPaths(const aggregator::FabricMap& map, const aggregator::PathSet& paths);

// Thread-safe: ingest records traces, the analyzer's tick reads them.
class TracedPaths {
 public:
  static constexpr size_t kDefaultMaxFlows = 1 << 20;
  static constexpr int64_t kDefaultMaxAgeS = 900;  // older traces are not trusted
  static constexpr size_t kMaxHops = 32;

  TracedPaths(std::shared_ptr<const aggregator::FabricMap> map,
              std::shared_ptr<aggregator::NameInterner> names, size_t max_flows = kDefaultMaxFlows,
              int64_t max_age_s = kDefaultMaxAgeS);

  // A trace of the UDP flow src -> dst from source port `src_port`; hops[k] answered for ttl k+1
  // ("" when silent). A new trace of a flow replaces its last one (a path moves after a reroute).
  // The trace's addresses (PathTrace.src_address, dst_address) name the NICs, hence the rail, it
  // was taken on; when either is empty or no NIC of its node has it, the flow is taken to be on
  // the nodes' first common rail (FabricMap::PathsBetweenNodes).
  TraceOutcome Record(std::string_view src, std::string_view dst, uint16_t src_port,
                      std::span<const std::string> hops, int64_t now_ns,
                      std::string_view src_address = {}, std::string_view dst_address = {});

  // A trace of the echo that `responder` sends back for `prober`'s flow from `prober_port`
  // (PathTrace.echo). The echo hashes its own 5-tuple and may take another equal-cost path than
  // the probe; its path is kept as an index of the prober -> responder PathSet, so that it reads
  // like PathOf. The outcome's `path` is that index too.
  // The addresses are the echo's: the responder's NIC, then the prober's.
  TraceOutcome RecordEcho(std::string_view responder, std::string_view prober, uint16_t prober_port,
                          std::span<const std::string> hops, int64_t now_ns,
                          std::string_view responder_address = {},
                          std::string_view prober_address = {});

  // The path index the flow's last trace gave, if resolved and no older than max_age. `src` and
  // `dst` are ids of the interner this was built with (the pair table's). With `nics` known only
  // a trace taken between those NICs answers (an index of their PathSet); without, any.
  std::optional<int32_t> PathOf(aggregator::NodeId src, aggregator::NodeId dst, uint16_t src_port,
                                int64_t now_ns, FlowNics nics = {}) const;
  // The path the echo of the flow src -> dst from `src_port` takes back, as an index of the
  // src -> dst PathSet (RecordEcho); nullopt when unknown, unresolved or too old.
  std::optional<int32_t> EchoPathOf(aggregator::NodeId src, aggregator::NodeId dst,
                                    uint16_t src_port, int64_t now_ns, FlowNics nics = {}) const;
  // No trace recorded yet: lets the analyzer skip the lookups (no lock).
  bool empty() const { return flow_count_.load(std::memory_order_relaxed) == 0; }

  // The unknown hop addresses seen on traces of flows between these nodes (sorted, unique).
  std::vector<std::string> UnknownHopsOf(aggregator::NodeId src, aggregator::NodeId dst) const;

  struct Stats {
    uint64_t traces = 0;
    uint64_t resolved = 0;
    uint64_t ambiguous = 0;
    uint64_t no_match = 0;
    uint64_t unmapped = 0;
    uint64_t refused = 0;  // too many hops, or the table full
    uint64_t moved = 0;    // a flow's resolved path changed between two traces
    uint64_t echoes = 0;   // traces of echoes (also counted in traces and by outcome)
    size_t flows = 0;      // flows and echoes kept
  };
  Stats stats() const;

 private:
  struct Entry {
    uint16_t src_port = 0;
    FlowNics nics;  // the rail's NICs, prober -> responder
    int32_t path = -1;
    int64_t at_ns = 0;
    std::vector<std::string> unknown_hops;
  };
  using PairMap = std::unordered_map<uint64_t, std::vector<Entry>>;
  static uint64_t Key(aggregator::NodeId s, aggregator::NodeId d) {
    return (static_cast<uint64_t>(s) << 32) | d;
  }
  // The paths a trace from `src` to `dst` between these addresses indexes: the NIC pair's when
  // both addresses are NICs of those nodes, else the nodes' (no lock).
  aggregator::PathSet PathsOfTrace(std::string_view src, std::string_view dst,
                                   std::string_view src_address,
                                   std::string_view dst_address) const;
  // Which path of `paths` the hops match (no lock).
  TraceOutcome Match(const aggregator::PathSet& paths, std::span<const std::string> hops) const;
  // Keeps the outcome as flow (`port`, `nics`) of the pair `key` in `table`.
  void Store(PairMap& table, uint64_t key, uint16_t port, FlowNics nics, TraceOutcome& out,
             int64_t now_ns, std::string_view src, std::string_view dst) FW_REQUIRES(mu_);
  std::optional<int32_t> Lookup(const PairMap& table, uint64_t key, uint16_t port, FlowNics nics,
                                int64_t now_ns) const FW_REQUIRES_SHARED(mu_);

  std::shared_ptr<const aggregator::FabricMap> map_;
  std::shared_ptr<aggregator::NameInterner> names_;
  const size_t max_flows_;
  const int64_t max_age_ns_;
  mutable SharedMutex mu_;
  PairMap by_pair_ FW_GUARDED_BY(mu_);
  PairMap echo_by_pair_ FW_GUARDED_BY(mu_);  // keyed by (prober, responder) and prober port
  size_t flows_ FW_GUARDED_BY(mu_) = 0;
  Stats stats_ FW_GUARDED_BY(mu_);
  std::atomic<size_t> flow_count_{0};  // flows_, for empty()
};

}  // namespace fw::analysis
