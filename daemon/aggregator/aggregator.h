// Composes the aggregator: constructs the stages (ingest/, plan/, analysis/, api/) and connects
// them. Decoding, planning, analysis and HTTP handling live in the stages.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/state_file.h"
#include "common/status.h"
#include "daemon/aggregator/analysis/analyzer.h"
#include "daemon/aggregator/analysis/findings_store.h"
#include "daemon/aggregator/api/port_metrics.h"
#include "daemon/aggregator/api/tick_views.h"
#include "daemon/aggregator/collective/collective_stage.h"
#include "daemon/aggregator/escalation_stage.h"
#include "daemon/aggregator/ingest/client_limits.h"
#include "daemon/aggregator/ingest/fleet_state.h"
#include "daemon/aggregator/ingest/ingest_service.h"
#include "daemon/aggregator/ingest/pair_table.h"
#include "daemon/aggregator/ingest/probe_ingest.h"
#include "daemon/aggregator/model/name_interner.h"
#include "daemon/aggregator/plan/fabric_map.h"
#include "daemon/aggregator/plan/plan_book.h"
#include "daemon/aggregator/plan/planner.h"
#include "daemon/aggregator/qualify/qualify_service.h"
#include "daemon/aggregator/trace_intake.h"
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
  // gRPC completion queues (--grpc-queues); 0: GrpcServer::CompletionQueuesFor the fabric map's
  // nodes.
  int grpc_queues = 0;
  // gRPC mTLS material (nullopt: --insecure) and the HTTP web config (docs/security.md).
  std::optional<tls::TlsMaterial> tls;
  std::optional<http::WebConfig> web;
  ClientLimits limits;  // bounds on client state (docs/durability.md)
  PlannerConfig planner;
  analysis::AnalysisConfig analysis;
  collective::OrchestratorConfig collective;  // docs/collectives.md
  EscalationConfig escalation;                // docs/planner.md, "Escalation"
};

class Aggregator final : public IngestSink {
 public:
  explicit Aggregator(AggregatorOptions options, const Clock& clock = RealClock::Get());
  ~Aggregator() override;

  // Loads state, binds both listeners and starts the tick. Errors name the failing listener or
  // file.
  Status Start();
  // Graceful stop: sessions ack what they stored and end; state is saved to --state-dir.
  void Stop();

  int grpc_port() const { return grpc_ ? grpc_->port() : 0; }
  int http_port() const { return http_ ? http_->port() : 0; }
  // The watchdog probe: the own /healthz answers (over HTTPS with a TLS web config).
  bool HttpHealthy(int timeout_ms) const {
    return http_ && http_->SelfCheck(options_.http_listen, timeout_ms);
  }
  FleetState& fleet() { return fleet_; }
  metrics::Registry& registry() { return registry_; }

  // IngestSink: each hands the message to the stage that owns it.
  void OnProbeBatch(const std::string& node, const fabricwatch::v1::ProbeBatch& batch) override;
  // Keeps the session's ProbeIngest::Source in `state`.
  void OnSessionProbeBatch(const std::string& node, const fabricwatch::v1::ProbeBatch& batch,
                           std::unique_ptr<SessionProbeState>& state) override;
  void OnCounterBatch(const std::string& node, const fabricwatch::v1::CounterBatch& batch) override;
  void OnCheckReport(const std::string& node, const fabricwatch::v1::CheckReport& report) override;
  void OnSessionStart(const std::string& node) override;
  std::optional<fabricwatch::v1::ProbePlan> PlanFor(const std::string& node) override;
  void Qualify(const fabricwatch::v1::QualifyRequest& request,
               std::function<void(Status, const fabricwatch::v1::QualifyReport&)> done) override;
  void OnKvRequest(const std::string& node, const fabricwatch::v1::KvRequest& request) override;
  void OnRdmaRcConnect(const std::string& node,
                       const fabricwatch::v1::RdmaRcConnect& request) override;
  void OnCollectiveResult(const std::string& node,
                          const fabricwatch::v1::CollectiveResult& result) override;
  void OnPathTraces(const std::string& node,
                    const fabricwatch::v1::PathTraceReport& report) override;

 private:
  // The tick thread: every tick_s, each stage's periodic work in data-flow order.
  void TickLoop();
  // Tick thread: re-plans if an overlay or membership change is pending and its spacing allows,
  // and pushes the plans that changed.
  void ReplanAndPush(int64_t now);
  void NoteQuarantined(const std::optional<QuarantinedFile>& q);
  // A batch's decoded results into the pair table, the host delays and qualification.
  void RecordResults(std::span<const ReportedProbe> results);

  AggregatorOptions options_;
  const Clock& clock_;
  metrics::Registry registry_;
  metrics::SelfMetrics self_;
  std::shared_ptr<const FabricMap> map_;  // null without --fabric-map
  // Node names ↔ ids, shared by ingest and the pair table.
  std::shared_ptr<NameInterner> names_ = std::make_shared<NameInterner>();
  FleetState fleet_;
  ProbeIngest probe_ingest_;
  PortMetrics ports_;
  TickViews views_;  // updated on the tick thread only
  std::unique_ptr<PairTable> pairs_;
  std::unique_ptr<PlanBook> plans_;
  std::unique_ptr<analysis::FindingsStore> store_;  // null without --state-dir
  std::unique_ptr<analysis::Analyzer> analyzer_;
  std::unique_ptr<TraceIntake> traces_;          // set before grpc_ starts
  std::unique_ptr<EscalationStage> escalation_;  // tick thread
  // Qualification (qualify/); declared after the stages it reads, so it goes first.
  std::unique_ptr<qualify::QualifyService> qualify_;
  // Collective probes (collective/); before grpc_, so the sessions that feed it end first.
  std::unique_ptr<collective::CollectiveStage> collective_;
  std::unique_ptr<GrpcServer> grpc_;
  std::unique_ptr<http::Server> http_;
  std::atomic<bool> ready_{false};

  static constexpr int64_t kDropIdlePeriodNs = 10'000'000'000;
  int64_t last_drop_idle_ns_ = 0;  // tick thread only
  Mutex tick_mu_;
  CondVar tick_cv_;
  bool stopping_ FW_GUARDED_BY(tick_mu_) = false;
  std::thread ticker_;
  // One series per state file (findings.db, ingest_state.json, plan_epoch), created at 0.
  metrics::Family<metrics::Counter>& quarantined_total_;
  // State files found corrupt and moved aside by Start(); written before the HTTP server starts,
  // read-only after (/readyz names them).
  std::vector<QuarantinedFile> quarantined_files_;
};

}  // namespace fw::aggregator
