// Qualification wired to the aggregator's stages: the fleet (agent states), the analyzer (active
// findings), the plan book (the mesh overlay) and the name interner; one object the aggregator
// constructs, feeds (probe results, check reports) and serves over HTTP and gRPC.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "daemon/aggregator/analysis/analyzer.h"
#include "daemon/aggregator/ingest/fleet_state.h"
#include "daemon/aggregator/model/name_interner.h"
#include "daemon/aggregator/plan/fabric_map.h"
#include "daemon/aggregator/plan/plan_book.h"
#include "daemon/aggregator/qualify/inputs.h"
#include "daemon/aggregator/qualify/jobs.h"
#include "daemon/aggregator/qualify/qualify_store.h"
#include "exporter/http_server.h"
#include "fabricwatch.pb.h"

namespace fw::qualify {

class QualifyService final : public QualifyEnv {
 public:
  // Every reference must outlive this object. With a `state_dir`, reports are kept in the
  // findings history there (qualify_store.h); open the findings store first.
  QualifyService(aggregator::FleetState& fleet, analysis::Analyzer& analyzer,
                 aggregator::PlanBook& plans, aggregator::NameInterner& names, const Clock& clock,
                 metrics::Registry& registry, QualifyJobs::Options options = {},
                 const std::string& state_dir = "",
                 std::shared_ptr<const aggregator::FabricMap> map = nullptr);
  ~QualifyService() override;

  // Ingest threads.
  void OnResults(std::span<const aggregator::ReportedProbe> results) { inputs_.OnResults(results); }
  void OnCheckReport(const std::string& node) { inputs_.OnCheckReport(node); }

  // POST /api/v1/qualify and GET /api/v1/qualifications.
  void InstallHttp(http::Server& server);
  // The Qualify RPC through the same jobs: runs on a thread of its own and calls `done` once.
  void QualifyRpc(const fabricwatch::v1::QualifyRequest& request,
                  std::function<void(Status, const fabricwatch::v1::QualifyReport&)> done);
  // The collective stage's on-demand jobs, for the suite's all-reduce step (without them the step
  // is skipped). Set before the HTTP and gRPC servers start.
  struct CollectiveHooks {
    std::function<std::string(const std::vector<std::string>&, uint64_t, uint32_t)> start;
    std::function<std::optional<CollectiveOutcome>(const std::string&)> outcome;
    std::function<void(const std::string&)> end;
    // Pauses the schedule on nodes (returns those not paused before), resumes them, and says
    // whether a scheduled job touches them (QualifyEnv::QuietCollectives).
    std::function<std::vector<std::string>(const std::vector<std::string>&)> pause;
    std::function<void(const std::vector<std::string>&)> resume;
    std::function<bool(const std::vector<std::string>&)> busy;
  };
  void SetCollective(CollectiveHooks hooks) { collective_ = std::move(hooks); }
  // Ends running suites and joins their threads; before the HTTP and gRPC servers stop.
  void Shutdown();

  // QualifyEnv
  std::vector<AgentStatus> Agents(const std::vector<std::string>& nodes) const override;
  std::vector<analysis::TrackedFinding> ActiveFindings() const override;
  void SetMesh(const std::string& id, const std::vector<std::string>& nodes,
               const SuiteSpec& suite) override;
  aggregator::NodeId IdOf(const std::string& node) override;
  void SetBursts(const std::string& id, const BurstRound& bursts, uint64_t round,
                 const SuiteSpec& suite) override;
  std::vector<std::string> PauseCollectives(const std::vector<std::string>& nodes) override;
  void ResumeCollectives(const std::vector<std::string>& nodes) override;
  bool CollectivesRunningOn(const std::vector<std::string>& nodes) override;
  void SetRdmaRcBursts(const std::string& id, const BurstRound& bursts, uint64_t round,
                       const SuiteSpec& suite) override;
  std::vector<std::string> RdmaUnavailable(const std::vector<std::string>& nodes) const override;
  std::string PathClassOf(const std::string& a, const std::string& b) override;
  StatusOr<std::string> StartAllReduce(const std::vector<std::string>& nodes, uint64_t bytes,
                                       uint32_t iterations) override;
  std::optional<CollectiveOutcome> AllReduceOutcome(const std::string& job_id) override;
  void EndAllReduce(const std::string& job_id) override;

 private:
  // Sets (or, with no bursts, clears) the overlay `overlay` asking each burst shaped as `shape`.
  void SetBurstOverlay(const std::string& overlay, const BurstRound& bursts,
                       const aggregator::OverlayBurst& shape);
  aggregator::FleetState& fleet_;
  analysis::Analyzer& analyzer_;
  aggregator::PlanBook& plans_;
  aggregator::NameInterner& names_;
  std::shared_ptr<const aggregator::FabricMap> map_;  // null: every path class is "unknown"
  CollectiveHooks collective_;                        // empty: no collective stage
  QualifyInputs inputs_;
  std::unique_ptr<QualificationStore> store_;  // null without a state directory
  std::unique_ptr<QualifyJobs> jobs_;
};

}  // namespace fw::qualify
