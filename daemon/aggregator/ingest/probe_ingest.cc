#include "daemon/aggregator/ingest/probe_ingest.h"

#include <spdlog/spdlog.h>

#include <optional>
#include <string_view>

#include "exporter/registry.h"

namespace fw::aggregator {

ProbeIngest::ProbeIngest(std::shared_ptr<NameInterner> names, metrics::Registry& registry)
    : names_(std::move(names)),
      bad_results_(registry
                       .AddCounter("fabricwatch_ingest_invalid_results_total",
                                   "Probe results dropped as malformed (no peer, bad transport).")
                       .WithLabels({})),
      bad_columns_([&registry] {
        auto& family = registry.AddCounter(
            "fabricwatch_ingest_invalid_columns_total",
            "Probe batches whose columnar results were refused whole, by reason.", {"reason"});
        std::array<metrics::Counter*, kColumnErrorCount> handles{};
        for (int e = 1; e < kColumnErrorCount; ++e) {
          handles[static_cast<size_t>(e)] =
              &family.WithLabels({std::string(ColumnErrorName(static_cast<ColumnError>(e)))});
        }
        return handles;
      }()) {}

std::span<const ReportedProbe> ProbeIngest::Decode(const std::string& node,
                                                   const fabricwatch::v1::ProbeBatch& batch) {
  Source source;
  return Decode(node, batch, source);
}

std::span<const ReportedProbe> ProbeIngest::Decode(const std::string& node,
                                                   const fabricwatch::v1::ProbeBatch& batch,
                                                   Source& source) {
  if (source.cache == nullptr || source.node != node) {
    source.node = node;
    source.id = names_->Intern(node);
    NameCacheShard& shard = name_caches_[source.id % kNameCacheShards];
    MutexLock lock(shard.mu);
    source.cache = &shard.by_source[source.id];
  }
  const auto known = std::atomic_load(&known_nodes_);
  const NodeId src = source.id;
  // Any peer before the first plan, then only nodes that said Hello. Called once per distinct
  // name of a name table this source has not sent before.
  const PeerResolver resolve = [&](std::string_view peer) -> NodeId {
    if (!known) return names_->Intern(peer);
    const std::optional<NodeId> id = names_->Find(peer);
    return id && *id < known->by_id.size() && known->by_id[*id] != 0 ? *id : kNoNode;
  };
  // Decoded into a reused per-thread buffer: ingest allocates only when a batch is larger than
  // any this thread has seen.
  thread_local std::vector<ReportedProbe> results;
  DecodeOutcome o;
  {
    NameCacheShard& cache = name_caches_[src % kNameCacheShards];
    MutexLock lock(cache.mu);
    o = DecodeProbeBatch(node, src, batch, resolve, results, source.cache,
                         known ? known->epoch : 0);
  }
  if (o.invalid_results > 0) bad_results_.Inc(static_cast<double>(o.invalid_results));
  if (o.column_error != ColumnError::kNone) {
    bad_columns_[static_cast<size_t>(o.column_error)]->Inc();
    // One line per node and reason: a broken agent repeats its fault every second.
    const bool first = [&] {
      MutexLock lock(bad_columns_mu_);
      if (bad_columns_logged_.size() >= 10'000) return false;  // bounded; the counter goes on
      return bad_columns_logged_.emplace(node, o.column_error).second;
    }();
    if (first) {
      spdlog::warn(
          "msg=\"probe batch columns refused; further ones from this node are only counted\" "
          "node={} seq={} reason={} rows={} names={}",
          node, batch.seq(), ColumnErrorName(o.column_error), batch.columns().peer_size(),
          batch.columns().name_lengths_size());
    }
  }
  return {results.data(), o.appended};
}

void ProbeIngest::SetKnownNodes(const std::vector<NodeView>& nodes) {
  auto known = std::make_shared<KnownNodes>();
  for (const NodeView& n : nodes) {
    const NodeId id = names_->Intern(n.name);
    if (id >= known->by_id.size()) known->by_id.resize(id + 1, 0);
    known->by_id[id] = 1;
  }
  // The resolver's answer for a name depends only on its interned id (which never changes) and on
  // `by_id`: with the same set every answer is the same, so the name caches stay valid. Re-plans
  // come every second or so while escalations run, and each new epoch made every source resolve
  // all its names again through the shared interner.
  const auto current = std::atomic_load(&known_nodes_);
  if (current && current->by_id == known->by_id) return;
  known->epoch = ++known_epoch_;
  std::atomic_store(&known_nodes_, std::shared_ptr<const KnownNodes>(known));
}

}  // namespace fw::aggregator
