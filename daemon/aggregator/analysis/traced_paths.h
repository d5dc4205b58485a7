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
  TraceOutcome Record(std::string_view src, std::string_view dst, uint16_t src_port,
                      std::span<const std::string> hops, int64_t now_ns);

  // The path index the flow's last trace gave, if resolved and no older than max_age. `src` and
  // `dst` are ids of the interner this was built with (the pair table's).
  std::optional<int32_t> PathOf(aggregator::NodeId src, aggregator::NodeId dst, uint16_t src_port,
                                int64_t now_ns) const;
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
    size_t flows = 0;
  };
  Stats stats() const;

 private:
  struct Entry {
    uint16_t src_port = 0;
    int32_t path = -1;
    int64_t at_ns = 0;
    std::vector<std::string> unknown_hops;
  };
  static uint64_t Key(aggregator::NodeId s, aggregator::NodeId d) {
    return (static_cast<uint64_t>(s) << 32) | d;
  }

  std::shared_ptr<const aggregator::FabricMap> map_;
  std::shared_ptr<aggregator::NameInterner> names_;
  const size_t max_flows_;
  const int64_t max_age_ns_;
  mutable SharedMutex mu_;
  std::unordered_map<uint64_t, std::vector<Entry>> by_pair_ FW_GUARDED_BY(mu_);
  size_t flows_ FW_GUARDED_BY(mu_) = 0;
  Stats stats_ FW_GUARDED_BY(mu_);
  std::atomic<size_t> flow_count_{0};  // flows_, for empty()
};

}  // namespace fw::analysis
