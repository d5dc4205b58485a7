// The aggregator side of QualifyEnv, and the HTTP/gRPC entry points into the qualification jobs.
#include "daemon/aggregator/qualify/qualify_service.h"

#include <unordered_map>

#include "daemon/aggregator/ingest/wire_convert.h"
#include "daemon/aggregator/qualify/qualify_http.h"
#include "daemon/aggregator/qualify/qualify_proto.h"

namespace fw::qualify {

QualifyService::QualifyService(aggregator::FleetState& fleet, analysis::Analyzer& analyzer,
                               aggregator::PlanBook& plans, aggregator::NameInterner& names,
                               const Clock& clock, metrics::Registry& registry,
                               QualifyJobs::Options options, const std::string& state_dir,
                               std::shared_ptr<const aggregator::FabricMap> map)
    : fleet_(fleet),
      analyzer_(analyzer),
      plans_(plans),
      names_(names),
      map_(std::move(map)),
      inputs_(clock) {
  if (!state_dir.empty()) {
    store_ = std::make_unique<QualificationStore>(state_dir);
    // A closed store logs why; the reports then live in memory only.
    if (!store_->Open().ok()) store_.reset();
  }
  jobs_ = std::make_unique<QualifyJobs>(*this, inputs_, clock, registry, options, store_.get());
}

QualifyService::~QualifyService() { Shutdown(); }

void QualifyService::InstallHttp(http::Server& server) { InstallQualifyHandlers(server, *jobs_); }

void QualifyService::QualifyRpc(
    const fabricwatch::v1::QualifyRequest& request,
    std::function<void(Status, const fabricwatch::v1::QualifyReport&)> done) {
  jobs_->RunAsync(FromProto(request), [done = std::move(done)](StatusOr<QualifyReport> r) {
    fabricwatch::v1::QualifyReport out;
    if (!r.ok()) {
      done(r.status(), out);
      return;
    }
    ToProto(*r, &out);
    done(Status::Ok(), out);
  });
}

void QualifyService::Shutdown() { jobs_->Shutdown(); }

std::vector<QualifyEnv::AgentStatus> QualifyService::Agents(
    const std::vector<std::string>& nodes) const {
  std::unordered_map<std::string, AgentStatus> fleet;
  for (const aggregator::NodeView& n : fleet_.Nodes()) {
    fleet[n.name] = {true, n.connected && n.up, n.last_report_age_s};
  }
  std::vector<AgentStatus> out;
  out.reserve(nodes.size());
  for (const std::string& n : nodes) {
    auto it = fleet.find(n);
    out.push_back(it == fleet.end() ? AgentStatus{} : it->second);
  }
  return out;
}

std::vector<analysis::TrackedFinding> QualifyService::ActiveFindings() const {
  return analyzer_.Findings(/*active_only=*/true);
}

void QualifyService::SetMesh(const std::string& id, const std::vector<std::string>& nodes,
                             const SuiteSpec& suite) {
  if (nodes.empty()) {
    plans_.ClearOverlay(id);
  } else {
    aggregator::PlanOverlay o;
    o.id = id;
    o.nodes = nodes;
    o.rate_pps = suite.rate_pps;
    o.flows = suite.flows;
    o.rdma_rate_pps = suite.rate_pps;  // between members that both have RDMA ports
    plans_.SetOverlay(std::move(o));
  }
}

void QualifyService::SetBursts(const std::string& id, const BurstRound& bursts, uint64_t round,
                               const SuiteSpec& suite) {
  // Its own overlay: the mesh's has ended by now, and ending one must not end the other.
  SetBurstOverlay(id + "/bandwidth", bursts, {"", "", suite.bw_bytes, round, suite.bw_timeout_s});
}

void QualifyService::SetRdmaRcBursts(const std::string& id, const BurstRound& bursts,
                                     uint64_t round, const SuiteSpec& /*suite*/) {
  // The agents' RC burst size (ProbePlan.rdma_rc_bytes) and RC timeout apply.
  SetBurstOverlay(id + "/rdma_rc", bursts, {"", "", 0, round, 0, /*rdma_rc=*/true});
}

void QualifyService::SetBurstOverlay(const std::string& overlay, const BurstRound& bursts,
                                     const aggregator::OverlayBurst& shape) {
  if (bursts.empty()) {
    plans_.ClearOverlay(overlay);
    return;
  }
  aggregator::PlanOverlay o;
  o.id = overlay;
  for (const Burst& b : bursts) {
    aggregator::OverlayBurst ob = shape;
    ob.src = b.src;
    ob.dst = b.dst;
    o.bursts.push_back(std::move(ob));
  }
  plans_.SetOverlay(std::move(o));
}

std::vector<std::string> QualifyService::RdmaUnavailable(
    const std::vector<std::string>& nodes) const {
  // What the planner sees (LiveAgents): RDMA ports it accepted from each agent's Hello.
  const std::vector<aggregator::NodeView> views = fleet_.Nodes();
  std::unordered_map<std::string, std::string> why;
  for (const aggregator::NodeView& n : views) {
    why[n.name] = n.inventory.rdma().empty() ? "its agent reports no RDMA" : n.inventory.rdma();
  }
  for (const aggregator::AgentInfo& a : aggregator::LiveAgents(views)) {
    if (!a.rdma.empty()) why[a.node].clear();
  }
  std::vector<std::string> out;
  out.reserve(nodes.size());
  for (const std::string& n : nodes) {
    auto it = why.find(n);
    out.push_back(it == why.end() ? "agent unknown" : it->second);
  }
  return out;
}

std::string QualifyService::PathClassOf(const std::string& a, const std::string& b) {
  if (!map_) return "unknown";
  return std::string(aggregator::PathClassName(map_->PathsBetweenNodes(a, b).path_class));
}

aggregator::NodeId QualifyService::IdOf(const std::string& node) { return names_.Intern(node); }

StatusOr<std::string> QualifyService::StartAllReduce(const std::vector<std::string>& nodes,
                                                     uint64_t bytes, uint32_t iterations) {
  if (!collective_.start) return QualifyEnv::StartAllReduce(nodes, bytes, iterations);
  std::string id = collective_.start(nodes, bytes, iterations);
  if (id.empty()) return Status::Unavailable("the collective stage started no job");
  return id;
}

std::optional<CollectiveOutcome> QualifyService::AllReduceOutcome(const std::string& job_id) {
  return collective_.outcome ? collective_.outcome(job_id) : std::nullopt;
}

std::vector<std::string> QualifyService::PauseCollectives(const std::vector<std::string>& nodes) {
  return collective_.pause ? collective_.pause(nodes) : std::vector<std::string>{};
}

void QualifyService::ResumeCollectives(const std::vector<std::string>& nodes) {
  if (collective_.resume) collective_.resume(nodes);
}

bool QualifyService::CollectivesRunningOn(const std::vector<std::string>& nodes) {
  return collective_.busy && collective_.busy(nodes);
}

void QualifyService::EndAllReduce(const std::string& job_id) {
  if (collective_.end) collective_.end(job_id);
}

}  // namespace fw::qualify
