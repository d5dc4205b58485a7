// Aggregator composition: the stages are constructed in Start() and connected here.
#include "daemon/aggregator/aggregator.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <span>

#include "daemon/aggregator/api/http_api.h"
#include "daemon/aggregator/ingest/ingest_journal.h"
#include "daemon/aggregator/ingest/ingest_state_file.h"
#include "daemon/aggregator/ingest/wire_convert.h"

namespace fw::aggregator {

namespace v1 = fabricwatch::v1;

Aggregator::Aggregator(AggregatorOptions options, const Clock& clock)
    : options_(std::move(options)),
      clock_(clock),
      self_(registry_, FW_VERSION),
      fleet_(clock_, registry_,
             FleetState::Options{.heartbeat_timeout_s = options_.heartbeat_timeout_s,
                                 .heartbeat_grace_max_s = options_.heartbeat_grace_max_s,
                                 .record_test_batches = options_.record_test_batches,
                                 .max_nodes = static_cast<size_t>(options_.limits.max_nodes),
                                 .retire_after_s = options_.limits.node_retire_after.value,
                                 .max_devices_per_node =
                                     static_cast<size_t>(options_.limits.max_devices_per_node)}),
      probe_ingest_(names_, registry_),
      ports_(registry_),
      views_(registry_),
      quarantined_total_(registry_.AddCounter(
          "fabricwatch_state_files_quarantined_total",
          "State files under --state-dir found corrupt at start and moved aside to "
          "<file>.corrupt-<UTC time>; the aggregator started fresh without them.",
          {"file"})) {
  for (const char* file : {"findings.db", "ingest_state.json", "plan_epoch", "ingest.db"}) {
    quarantined_total_.WithLabels({file});
  }
}

void Aggregator::NoteQuarantined(const std::optional<QuarantinedFile>& q) {
  if (!q) return;
  quarantined_total_.WithLabels({q->file}).Inc();
  quarantined_files_.push_back(*q);
}

Aggregator::~Aggregator() { Stop(); }

Status Aggregator::Start() {
  std::shared_ptr<IngestJournal> journal;  // with a state dir: handed to the gRPC server
  if (!options_.state_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.state_dir, ec);
    if (ec) {
      return Status::FailedPrecondition("state dir " + options_.state_dir +
                                        ": cannot create: " + ec.message());
    }
    NoteQuarantined(
        LoadIngestState(fleet_, IngestStatePath(options_.state_dir), clock_.WallNanos()));
    if (options_.limits.durable_acks) {
      auto opened = OpenIngestJournal(fleet_, options_.state_dir, clock_.WallNanos());
      if (!opened.ok()) return opened.status();
      journal = std::move(*opened);
      NoteQuarantined(journal->quarantined());
    }
  }
  if (!options_.fabric_map.empty()) {
    auto map = FabricMap::Load(options_.fabric_map);
    if (!map.ok()) return map.status();
    map_ = std::make_shared<const FabricMap>(std::move(*map));
    spdlog::info("msg=\"fabric map loaded\" file={} switches={} links={} host_nics={}",
                 options_.fabric_map, map_->switches().size(), map_->links().size(),
                 map_->host_nics().size());
  } else {
    spdlog::warn("msg=\"no fabric map: localization stops at pair and host level\"");
  }
  plans_ = std::make_unique<PlanBook>(options_.planner, map_, clock_, registry_);
  if (Status st = plans_->Start(options_.state_dir); !st.ok()) return st;
  NoteQuarantined(plans_->quarantined());
  pairs_ = std::make_unique<PairTable>(clock_, map_, PairTable::kDefaultMaxPairs, names_);
  if (!options_.state_dir.empty()) {
    store_ = std::make_unique<analysis::FindingsStore>(options_.state_dir);
    Status st = store_->Open();
    NoteQuarantined(store_->quarantined());
    if (!st.ok()) {
      // Findings still work in memory; the store counts and logs its own errors.
      spdlog::error("msg=\"findings history unavailable\" error=\"{}\"", st.message());
    }
  }
  analyzer_ = std::make_unique<analysis::Analyzer>(clock_, map_, pairs_.get(), options_.analysis,
                                                   analysis::PathResolver{}, store_.get());
  traces_ = std::make_unique<TraceIntake>(analyzer_->traced_paths(), clock_, registry_, map_.get());
  escalation_ = std::make_unique<EscalationStage>(
      options_.escalation, *analyzer_, *plans_, options_.planner.latency_pps_per_flow, clock_,
      registry_, static_cast<uint64_t>(clock_.WallNanos() / 1'000'000));
  // After the findings store: qualification reports share its database (findings.db).
  qualify_ = std::make_unique<qualify::QualifyService>(fleet_, *analyzer_, *plans_, *names_, clock_,
                                                       registry_, qualify::QualifyJobs::Options{},
                                                       options_.state_dir, map_);
  // Messages leave on the tick thread and on gRPC threads, both started after grpc_ is set.
  collective_ = std::make_unique<collective::CollectiveStage>(
      options_.collective, registry_,
      [this](collective::Outbound out) { grpc_->Send(std::move(out)); });
  qualify_->SetCollective(
      {.start =
           [this](const std::vector<std::string>& nodes, uint64_t bytes, uint32_t iterations) {
             return collective_->StartOnDemand(nodes, bytes, iterations, clock_.MonotonicNanos());
           },
       .outcome = [this](const std::string& id) -> std::optional<qualify::CollectiveOutcome> {
         auto o = collective_->TakeOnDemand(id);
         if (!o) return std::nullopt;
         qualify::CollectiveOutcome q;
         q.errors.assign(o->errors.begin(), o->errors.end());
         q.missing = std::move(o->missing);
         q.busbw_bps = o->busbw_bps;
         q.history_busbw_bps = o->history_busbw_bps;
         return q;
       },
       .end = [this](const std::string& id) { collective_->Abandon(id); },
       .pause =
           [this](const std::vector<std::string>& nodes) {
             std::vector<std::string> paused;
             for (const std::string& n : nodes) {
               if (collective_->pauses().Pause(n)) paused.push_back(n);
             }
             return paused;
           },
       .resume =
           [this](const std::vector<std::string>& nodes) {
             for (const std::string& n : nodes) collective_->pauses().Resume(n);
           },
       .busy =
           [this](const std::vector<std::string>& nodes) {
             return collective_->ScheduledJobOn(nodes);
           }});
  auto http =
      http::Server::Start(options_.http_listen, 32, options_.web ? &*options_.web : nullptr);
  if (!http.ok()) return http.status();
  http_ = std::move(*http);
  InstallApiHandlers(*http_, ApiSources{.registry = registry_,
                                        .self = self_,
                                        .ready = ready_,
                                        .quarantined = quarantined_files_,
                                        .fleet = fleet_,
                                        .pairs = *pairs_,
                                        .analyzer = *analyzer_,
                                        .clock = clock_,
                                        .version = FW_VERSION});
  qualify_->InstallHttp(*http_);
  collective_->InstallHttp(*http_);

  // Set before the gRPC server starts: its threads call it from the first Hello on. Called on
  // gRPC threads: only noted; the tick thread re-plans.
  fleet_.SetMembershipListener([this] { plans_->NoteMembershipChange(); });
  GrpcServer::Options go;
  go.listen = options_.grpc_listen;
  go.tls = options_.tls;
  go.max_message_bytes = options_.limits.max_message_bytes;
  go.max_findings_per_report = options_.limits.max_findings_per_report;
  go.journal = journal;  // acks are durable (docs/durability.md)
  if (options_.grpc_queues < 0 || options_.grpc_queues > GrpcServer::kMaxCompletionQueues) {
    return Status::InvalidArgument("grpc-queues must be 0.." +
                                   std::to_string(GrpcServer::kMaxCompletionQueues));
  }
  // Sized to the map's nodes, not to the streams that connect (agents the map lacks are still
  // served): a fleet far beyond its map sets --grpc-queues.
  go.completion_queues = options_.grpc_queues;
  if (go.completion_queues == 0) {
    go.completion_queues = GrpcServer::CompletionQueuesFor(map_ ? map_->NodeCount() : 0);
  }
  auto grpc = GrpcServer::Start(go, fleet_, *this, registry_);
  if (!grpc.ok()) return grpc.status();
  grpc_ = std::move(*grpc);
  ticker_ = std::thread([this] { TickLoop(); });
  ready_ = true;
  spdlog::info("msg=\"aggregator started\" grpc_port={} http_port={} version={}", grpc_port(),
               http_port(), FW_VERSION);
  return Status::Ok();
}

void Aggregator::Stop() {
  {
    MutexLock lock(tick_mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  tick_cv_.NotifyAll();
  ready_ = false;
  if (qualify_) qualify_->Shutdown();  // running suites end before the servers stop
  if (ticker_.joinable()) ticker_.join();
  if (grpc_) grpc_->Shutdown(3.0);
  grpc_.reset();
  if (!options_.state_dir.empty()) SaveIngestState(fleet_, IngestStatePath(options_.state_dir));
  if (http_) http_->Stop();
  spdlog::info("msg=\"aggregator stopped\"");
}

void Aggregator::ReplanAndPush(int64_t now) {
  plans_->MaybeReplan(now, [this] {
    const std::vector<NodeView> nodes = fleet_.Nodes();
    probe_ingest_.SetKnownNodes(nodes);
    return LiveAgents(nodes);
  });
  plans_->PushPending([this](const std::function<bool(const std::string&)>& wanted) {
    if (grpc_) grpc_->PushPlans(wanted);
  });
}

void Aggregator::TickLoop() {
  using Steady = std::chrono::steady_clock;
  const auto period =
      std::chrono::duration_cast<Steady::duration>(std::chrono::duration<double>(options_.tick_s));
  const auto between = std::chrono::duration_cast<Steady::duration>(
      std::chrono::duration<double>(analyzer_->config().between_ticks_s));
  MutexLock lock(tick_mu_);
  while (!stopping_) {
    const auto next_tick = Steady::now() + period;
    // Between ticks, on this thread (it owns the analyzer): lost probes just ingested may start
    // escalation leads, and links that wait only for their dense data may fire
    // (Analyzer::BetweenTicks); a re-plan the escalations or the last tick left pending goes out.
    // The next tick keeps its period.
    while (!stopping_ && between.count() > 0) {
      const auto at = Steady::now() + between;
      if (at >= next_tick) break;
      tick_cv_.WaitUntil(tick_mu_, at);
      if (stopping_) break;
      lock.Unlock();
      analyzer_->BetweenTicks();
      escalation_->BetweenTicks();
      ReplanAndPush(clock_.MonotonicNanos());
      lock.Lock();
    }
    if (stopping_) break;
    tick_cv_.WaitUntil(tick_mu_, next_tick);
    if (stopping_) break;
    lock.Unlock();
    fleet_.Sweep();
    analyzer_->SetIngestLag(fleet_.data_lag_s());
    analyzer_->Tick();
    // Suspects of this tick raise their pairs' probe rates (plan overlays)...
    escalation_->Tick();
    // ...which the re-plan sends in this tick: the dense data a suspicion is confirmed or dropped
    // from starts a tick sooner than if it waited for the next one.
    ReplanAndPush(clock_.MonotonicNanos());
    const int64_t now = clock_.MonotonicNanos();
    collective_->Tick([this] { return collective::CollectiveNodesOf(fleet_.Nodes(), map_.get()); },
                      now);
    // Tracked from the analyzer's next tick on, so /api/v1/findings and the status page show them.
    analyzer_->SetSourceFindings("collective", collective_->ActiveFindings(now, [this] {
      std::vector<collective::MeshLink> mesh;
      for (analysis::LinkView& l : analyzer_->Links()) {
        mesh.push_back({std::move(l.id), std::move(l.a), std::move(l.b), std::move(l.a_tier),
                        std::move(l.b_tier), std::move(l.state), l.loss_ratio, l.latency_inflation,
                        l.bandwidth_ratio, l.confidence});
      }
      return mesh;
    }));
    if (now - last_drop_idle_ns_ >= kDropIdlePeriodNs) {
      last_drop_idle_ns_ = now;
      pairs_->DropIdle(now);
    }
    views_.Update(now, *pairs_, *analyzer_);
    views_.TickDone(static_cast<double>(clock_.MonotonicNanos() - now) * 1e-9);
    lock.Lock();
  }
}

void Aggregator::OnProbeBatch(const std::string& node, const v1::ProbeBatch& batch) {
  RecordResults(probe_ingest_.Decode(node, batch));
}

namespace {
struct SessionSource final : SessionProbeState {
  ProbeIngest::Source source;
};
}  // namespace

void Aggregator::OnSessionProbeBatch(const std::string& node, const v1::ProbeBatch& batch,
                                     std::unique_ptr<SessionProbeState>& state) {
  if (!state) state = std::make_unique<SessionSource>();
  RecordResults(probe_ingest_.Decode(node, batch, static_cast<SessionSource&>(*state).source));
}

void Aggregator::RecordResults(std::span<const ReportedProbe> results) {
  pairs_->RecordBatch(results);
  analyzer_->NoteLost(results);  // after the store: a lead read between ticks finds the loss
  analyzer_->OnHostDelays(results);
  qualify_->OnResults(results);
}

void Aggregator::OnSessionStart(const std::string& node) { analyzer_->OnSessionStart(node); }

void Aggregator::OnCounterBatch(const std::string& node, const v1::CounterBatch& batch) {
  ports_.Update(node, batch);
  for (const PortSample& s : PortSamplesFromWire(node, batch)) analyzer_->OnPortSample(s);
}

void Aggregator::OnCheckReport(const std::string& node, const v1::CheckReport& report) {
  qualify_->OnCheckReport(node);
  analyzer_->SetNodeFindings(node, FindingsFromWire(node, report));
}

std::optional<v1::ProbePlan> Aggregator::PlanFor(const std::string& node) {
  return plans_->PlanFor(node);
}

void Aggregator::Qualify(const v1::QualifyRequest& request,
                         std::function<void(Status, const v1::QualifyReport&)> done) {
  qualify_->QualifyRpc(request, std::move(done));
}

// Only once Start() has set grpc_ (ready_): a message before that has no job to belong to.
void Aggregator::OnKvRequest(const std::string& node, const v1::KvRequest& request) {
  if (ready_) collective_->OnKvRequest(node, request, clock_.MonotonicNanos());
}

void Aggregator::OnPathTraces(const std::string& node, const v1::PathTraceReport& report) {
  traces_->OnReport(node, report);
}

void Aggregator::OnRdmaRcConnect(const std::string& node, const v1::RdmaRcConnect& request) {
  // Passed on as is to the node it names, which validates it; `peer` then names the sender. A
  // node without an open stream misses it and its sender retries after its timeout.
  if (request.peer().empty() || request.peer() == node || grpc_ == nullptr) {
    spdlog::info("msg=\"rdma rc: connection message dropped\" from={} to={}", node,
                 request.peer().substr(0, 64));
    return;
  }
  v1::AggregatorMessage m;
  *m.mutable_rdma_rc_connect() = request;
  m.mutable_rdma_rc_connect()->set_peer(node);
  std::vector<std::pair<std::string, v1::AggregatorMessage>> out;
  out.emplace_back(request.peer(), std::move(m));
  grpc_->Send(std::move(out));
}

void Aggregator::OnCollectiveResult(const std::string& node, const v1::CollectiveResult& result) {
  if (ready_) collective_->OnResult(node, result);
}

}  // namespace fw::aggregator
