// Ingest of probe batches: a wire ProbeBatch from an agent becomes ProbeResults with node ids,
// results naming unknown peers are dropped, and malformed input is counted and logged.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "daemon/aggregator/ingest/fleet_state.h"
#include "daemon/aggregator/ingest/probe_batch_decoder.h"
#include "daemon/aggregator/model/name_interner.h"
#include "daemon/aggregator/model/reported_probe.h"
#include "fabricwatch.pb.h"

namespace fw::metrics {
class Counter;
class Registry;
}  // namespace fw::metrics

namespace fw::aggregator {

// Thread-safe: Decode() runs on gRPC threads, SetKnownNodes() on the tick thread.
class ProbeIngest {
 public:
  ProbeIngest(std::shared_ptr<NameInterner> names, metrics::Registry& registry);

  // Decodes `batch` from agent `node` into a per-thread buffer and returns its valid results, with
  // src_id and dst_id set. The span stays valid until this thread's next Decode().
  std::span<const ReportedProbe> Decode(const std::string& node,
                                        const fabricwatch::v1::ProbeBatch& batch);

  // What a caller that decodes many batches of one source (an agent's session) keeps between
  // them, so that Decode finds the source's id and name cache without looking either up. Filled
  // by the first Decode with it; a different `node` later starts it over.
  struct Source {
    std::string node;
    NodeId id = kNoNode;
    PeerNameCache* cache = nullptr;  // an element of name_caches_ (never erased), under its lock
  };
  // As Decode(node, batch). REQUIRES: `source` is not used by another thread meanwhile.
  std::span<const ReportedProbe> Decode(const std::string& node,
                                        const fabricwatch::v1::ProbeBatch& batch, Source& source);

  // From now on, results are accepted only for peers among `nodes` (the agents that said Hello).
  // Before the first call every peer is accepted. The same set as the current one changes nothing:
  // the sources' name caches stay valid (a new set starts a new epoch, which invalidates them).
  void SetKnownNodes(const std::vector<NodeView>& nodes);

 private:
  // Node names ↔ ids, shared with the pair table: each name of a batch is resolved once (usually
  // not at all: see name_caches_) and the table gets ids.
  std::shared_ptr<NameInterner> names_;
  // Ids of the agents that have said Hello; results naming any other peer are dropped, so garbage
  // cannot grow the tables. Null until the first SetKnownNodes() (everything is accepted).
  // Replaced wholesale by the tick thread, read lock-free by ingest. `epoch` changes with every
  // replacement (only when the set changes) and invalidates the name caches.
  struct KnownNodes {
    uint64_t epoch = 0;
    std::vector<uint8_t> by_id;  // 1 for a known node's id
  };
  std::shared_ptr<const KnownNodes> known_nodes_;
  uint64_t known_epoch_ = 0;  // tick thread only
  // Per source node, its last batch's name table and what each name resolved to (see
  // PeerNameCache). Sharded by source id; a batch holds its shard's lock while it decodes.
  struct NameCacheShard {
    Mutex mu;
    std::unordered_map<NodeId, PeerNameCache> by_source FW_GUARDED_BY(mu);
  };
  static constexpr size_t kNameCacheShards = 16;
  std::array<NameCacheShard, kNameCacheShards> name_caches_;
  metrics::Counter& bad_results_;
  // Indexed by ColumnError; [kNone] stays null.
  std::array<metrics::Counter*, kColumnErrorCount> bad_columns_;
  Mutex bad_columns_mu_;
  std::set<std::pair<std::string, ColumnError>> bad_columns_logged_
      FW_GUARDED_BY(bad_columns_mu_);
};

}  // namespace fw::aggregator
