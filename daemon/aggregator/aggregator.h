// Composes the aggregator: fleet state, gRPC ingest, HTTP API and the periodic tick.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/clock.h"
#include "common/state_file.h"
#include "common/status.h"
#include "daemon/aggregator/api/analysis_metrics.h"
#include "daemon/aggregator/analysis/analyzer.h"
#include "daemon/aggregator/analysis/findings_store.h"
#include "daemon/aggregator/plan/fabric_map.h"
#include "daemon/aggregator/model/name_interner.h"
#include "daemon/aggregator/api/node_metrics.h"
#include "daemon/aggregator/ingest/pair_table.h"
#include "daemon/aggregator/plan/planner.h"
#include "daemon/aggregator/ingest/probe_batch_decoder.h"
#include "daemon/aggregator/ingest/fleet_state.h"
#include "daemon/aggregator/ingest/ingest_service.h"
#include "daemon/aggregator/plan/plan_versions.h"
#include "daemon/aggregator/api/port_metrics.h"
#include "exporter/http_server.h"
#include "exporter/registry.h"
#include "exporter/self_metrics.h"

namespace fw::aggregator {

struct AggregatorOptions {
  std::string grpc_listen = "0.0.0.0:9750";
  std::string http_listen = "0.0.0.0:9751";
  std::string fabric_map;
  std::string state_dir;
  double tick_s = 1;
  double heartbeat_timeout_s = 15;
  // The most the heartbeat timeout stretches while the aggregator is behind (FleetState::Options).
  double heartbeat_grace_max_s = 105;
  bool record_test_batches = false;
  PlannerConfig planner;
  analysis::AnalysisConfig analysis;
};

class Aggregator final : public IngestSink {
 public:
  explicit Aggregator(AggregatorOptions options, const Clock& clock = RealClock::Get());
  ~Aggregator() override;

  // Loads state, binds both listeners and starts the tick. Errors name the failing listener or file.
  Status Start();
  // Graceful stop: sessions ack what they stored and end; state is saved to --state-dir.
  void Stop();

  int grpc_port() const { return grpc_ ? grpc_->port() : 0; }
  int http_port() const { return http_ ? http_->port() : 0; }
  FleetState& fleet() { return fleet_; }
  metrics::Registry& registry() { return registry_; }

  // IngestSink
  void OnProbeBatch(const std::string& node, const fabricwatch::v1::ProbeBatch& batch) override;
  void OnCounterBatch(const std::string& node,
                      const fabricwatch::v1::CounterBatch& batch) override;
  void OnCheckReport(const std::string& node, const fabricwatch::v1::CheckReport& report) override;
  std::optional<fabricwatch::v1::ProbePlan> PlanFor(const std::string& node) override;

 private:
  void TickLoop();
  // Recomputes every agent's plan from the live agents and pushes the changed ones.
  void Replan();
  // Tick thread: pushes up to kPlanPushesPerTick of the plans that the last re-plans changed, so
  // a fleet-wide change reaches 16,000 agents over seconds instead of as one burst of ~160 MB of
  // messages queued at once.
  void PushPendingPlans();
  void InstallHttpHandlers();
  std::string IngestStatePath() const;

  AggregatorOptions options_;
  const Clock& clock_;
  metrics::Registry registry_;
  metrics::SelfMetrics self_;
  std::shared_ptr<const FabricMap> map_;  // null without --fabric-map
  FleetState fleet_;
  PortMetrics ports_;
  std::unique_ptr<PairTable> pairs_;
  NodeProbeMetrics node_probe_metrics_;  // updated on the tick thread only
  std::unique_ptr<Planner> planner_;
  std::unique_ptr<analysis::FindingsStore> store_;  // null without --state-dir
  std::unique_ptr<analysis::Analyzer> analyzer_;
  analysis::AnalysisMetrics analysis_metrics_;      // updated on the tick thread only
  metrics::Gauge& tick_seconds_;
  metrics::Gauge& replan_seconds_;
  metrics::Gauge& pairs_held_;   // updated with DropIdle, every kDropIdlePeriodNs
  metrics::Family<metrics::Gauge>& state_bytes_;
  metrics::Gauge& pair_bytes_;
  metrics::Gauge& flow_bytes_;
  // Membership changes are coalesced: the tick thread re-plans once the fleet has been quiet for
  // kReplanSettleNs, or kReplanMaxDelayNs after the first pending change, whichever comes first.
  // A connecting fleet of 16,000 agents therefore costs one re-plan, not one per tick.
  static constexpr int64_t kReplanSettleNs = 2'000'000'000;
  static constexpr int64_t kReplanMaxDelayNs = 10'000'000'000;
  std::atomic<bool> replan_needed_{false};
  std::atomic<int64_t> last_membership_ns_{0};  // written by gRPC threads, read by the tick
  int64_t first_pending_ns_ = 0;                // tick thread only; 0 when nothing is pending
  // Tick thread only. Re-plans are spaced by 5x the last plan's cost (1 s to 30 s): a small fleet
  // re-plans at once, a 16,000-node fleet whose plan costs seconds does not re-plan every tick.
  static constexpr size_t kPlanPushesPerTick = 2'000;
  static constexpr int64_t kNodeMetricsPeriodNs = 5'000'000'000;
  static constexpr int64_t kDropIdlePeriodNs = 10'000'000'000;
  int64_t last_node_metrics_ns_ = 0;  // tick thread only
  int64_t last_drop_idle_ns_ = 0;     // tick thread only
  std::unordered_set<std::string> pending_pushes_;  // tick thread only
  int64_t last_replan_ns_ = 0;
  int64_t replan_spacing_ns_ = 1'000'000'000;
  // Node names ↔ ids for the pair table and the analyzer's flow table; ingest resolves each name
  // of a batch once (usually not at all: see name_caches_) and hands both tables ids.
  std::shared_ptr<NameInterner> names_ = std::make_shared<NameInterner>();
  // Ids of the agents that have said Hello; results naming any other peer are dropped, so garbage
  // cannot grow the tables. Null until the first re-plan (everything is accepted). Replaced
  // wholesale by the tick thread, read lock-free by ingest. `epoch` changes with every
  // replacement and invalidates the name caches.
  struct KnownNodes {
    uint64_t epoch = 0;
    std::vector<uint8_t> by_id;  // 1 for a known node's id
  };
  std::shared_ptr<const KnownNodes> known_nodes_;
  uint64_t known_epoch_ = 0;  // tick thread only
  // Per source node, its last batch's name table and what each name resolved to (see
  // PeerNameCache). Sharded by source id; a batch holds its shard's lock while it decodes.
  struct NameCacheShard {
    std::mutex mu;
    std::unordered_map<NodeId, PeerNameCache> by_source;  // GUARDED_BY(mu)
  };
  static constexpr size_t kNameCacheShards = 16;
  std::array<NameCacheShard, kNameCacheShards> name_caches_;
  // One agent's current plan, kept serialized: 16,000 plans of ~100 peers cost ~100 MB this way
  // and several times that as message objects. `content_hash` covers everything but the version,
  // so a re-plan that leaves a node's plan as it was neither bumps its version nor sends it.
  struct StoredPlan {
    uint64_t content_hash = 0;
    std::shared_ptr<const std::string> bytes;  // a serialized v1::ProbePlan, version included
    uint64_t replan = 0;                       // the plan_version_ of the last re-plan to keep it
  };
  std::mutex plan_mu_;
  std::unordered_map<std::string, StoredPlan> plans_;  // GUARDED_BY(plan_mu_)
  uint64_t plan_version_ = 0;                          // GUARDED_BY(plan_mu_)
  std::optional<PlanVersions> plan_versions_;          // set by Start(); Next() under plan_mu_
  metrics::Counter& replans_;
  metrics::Counter& plans_sent_;
  metrics::Counter& bad_results_;
  // Indexed by ColumnError; [kNone] stays null.
  std::array<metrics::Counter*, kColumnErrorCount> bad_columns_;
  std::mutex bad_columns_mu_;
  std::set<std::pair<std::string, ColumnError>> bad_columns_logged_;  // GUARDED_BY(bad_columns_mu_)
  std::unique_ptr<GrpcServer> grpc_;
  std::unique_ptr<http::Server> http_;
  std::atomic<bool> ready_{false};

  std::mutex tick_mu_;
  std::condition_variable tick_cv_;
  bool stopping_ = false;  // GUARDED_BY(tick_mu_)
  std::thread ticker_;
  metrics::Counter& ticks_;
  // One series per state file (findings.db, ingest_state.json, plan_epoch), created at 0.
  metrics::Family<metrics::Counter>& quarantined_total_;
  // State files found corrupt and moved aside by Start(); written before the HTTP server starts,
  // read-only after (/readyz names them).
  std::vector<QuarantinedFile> quarantined_files_;
  void NoteQuarantined(const QuarantinedFile& q);
};

}  // namespace fw::aggregator
