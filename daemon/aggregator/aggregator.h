// Composes the aggregator: fleet state, gRPC ingest, HTTP API and the periodic tick.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include "common/clock.h"
#include "common/status.h"
#include "daemon/aggregator/fleet_state.h"
#include "daemon/aggregator/ingest_service.h"
#include "daemon/aggregator/analysis/analysis_metrics.h"
#include "daemon/aggregator/analysis/analyzer.h"
#include "daemon/aggregator/analysis/findings_store.h"
#include "daemon/aggregator/core/fabric_map.h"
#include "daemon/aggregator/core/node_metrics.h"
#include "daemon/aggregator/core/pair_table.h"
#include "daemon/aggregator/core/planner.h"
#include "daemon/aggregator/port_metrics.h"
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
  std::atomic<bool> replan_needed_{false};
  // Tick thread only. Re-plans are spaced by 5x the last plan's cost (1 s to 30 s): a small fleet
  // re-plans at once, a 16,000-node fleet whose plan costs seconds does not re-plan every tick.
  int64_t last_replan_ns_ = 0;
  int64_t replan_spacing_ns_ = 1'000'000'000;
  // Names of agents that have said Hello; results naming any other peer are dropped, so garbage
  // cannot grow the pair table. Replaced wholesale by the tick thread, read lock-free by ingest.
  std::shared_ptr<const std::unordered_set<std::string>> known_nodes_;
  std::mutex plan_mu_;
  std::map<std::string, fabricwatch::v1::ProbePlan> plans_;  // GUARDED_BY(plan_mu_)
  uint64_t plan_version_ = 0;                               // GUARDED_BY(plan_mu_)
  metrics::Counter& replans_;
  metrics::Counter& bad_results_;
  std::unique_ptr<GrpcServer> grpc_;
  std::unique_ptr<http::Server> http_;
  std::atomic<bool> ready_{false};

  std::mutex tick_mu_;
  std::condition_variable tick_cv_;
  bool stopping_ = false;  // GUARDED_BY(tick_mu_)
  std::thread ticker_;
  metrics::Counter& ticks_;
};

}  // namespace fw::aggregator
