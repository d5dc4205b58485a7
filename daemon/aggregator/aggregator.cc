// Aggregator composition and the HTTP API.
#include "daemon/aggregator/aggregator.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <cmath>
#include <span>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "daemon/aggregator/api/analysis_json.h"
#include "daemon/aggregator/api/pairs_json.h"
#include "daemon/aggregator/ingest/probe_batch_decoder.h"
#include "daemon/aggregator/api/nodes_query.h"
#include "daemon/aggregator/api/status_page.h"

namespace fw::aggregator {

namespace v1 = fabricwatch::v1;
using nlohmann::json;

Aggregator::Aggregator(AggregatorOptions options, const Clock& clock)
    : options_(std::move(options)),
      clock_(clock),
      self_(registry_, FW_VERSION),
      fleet_(clock_, registry_,
             FleetState::Options{.heartbeat_timeout_s = options_.heartbeat_timeout_s,
                                 .heartbeat_grace_max_s = options_.heartbeat_grace_max_s,
                                 .record_test_batches = options_.record_test_batches}),
      ports_(registry_),
      node_probe_metrics_(registry_),
      analysis_metrics_(registry_),
      tick_seconds_(registry_.AddGauge("fabricwatch_aggregator_tick_seconds",
                                       "Time the last analysis tick took.")
                        .WithLabels({})),
      replan_seconds_(registry_
                          .AddGauge("fabricwatch_planner_replan_seconds",
                                    "Time the last re-plan took: planning every agent's peers, "
                                    "encoding the plans and updating the plan table.")
                          .WithLabels({})),
      pairs_held_(registry_
                      .AddGauge("fabricwatch_aggregator_pairs",
                                "Probe pairs whose windows the aggregator holds (updated every "
                                "10 s).")
                      .WithLabels({})),
      state_bytes_(registry_.AddGauge(
          "fabricwatch_aggregator_state_bytes",
          "Memory held for per-pair and per-flow state, by table (updated every 10 s; the process "
          "RSS also holds sessions, buffers and malloc's free pages).",
          {"table"})),
      pair_bytes_(state_bytes_.WithLabels({"pairs"})),
      flow_bytes_(state_bytes_.WithLabels({"flows"})),
      replans_(registry_.AddCounter("fabricwatch_planner_replans_total",
                                    "Probe plans recomputed after agents joined or left.")
                   .WithLabels({})),
      plans_sent_(registry_
                      .AddCounter("fabricwatch_planner_plans_pushed_total",
                                  "Probe plans pushed to connected agents after a re-plan changed "
                                  "them (plans sent on connect not included).")
                      .WithLabels({})),
      bad_results_(registry_
                       .AddCounter("fabricwatch_ingest_invalid_results_total",
                                   "Probe results dropped as malformed (no peer, bad transport).")
                       .WithLabels({})),
      bad_columns_([this] {
        auto& family = registry_.AddCounter(
            "fabricwatch_ingest_invalid_columns_total",
            "Probe batches whose columnar results were refused whole, by reason.", {"reason"});
        std::array<metrics::Counter*, kColumnErrorCount> handles{};
        for (int e = 1; e < kColumnErrorCount; ++e) {
          handles[static_cast<size_t>(e)] =
              &family.WithLabels({std::string(ColumnErrorName(static_cast<ColumnError>(e)))});
        }
        return handles;
      }()),
      ticks_(registry_.AddCounter("fabricwatch_aggregator_ticks_total", "Analysis ticks run.")
                 .WithLabels({})),
      quarantined_total_(registry_.AddCounter(
          "fabricwatch_state_files_quarantined_total",
          "State files under --state-dir found corrupt at start and moved aside to "
          "<file>.corrupt-<UTC time>; the aggregator started fresh without them.",
          {"file"})) {
  for (const char* file : {"findings.db", "ingest_state.json", "plan_epoch"}) {
    quarantined_total_.WithLabels({file});
  }
}

void Aggregator::NoteQuarantined(const QuarantinedFile& q) {
  quarantined_total_.WithLabels({q.file}).Inc();
  quarantined_files_.push_back(q);
}

Aggregator::~Aggregator() { Stop(); }

std::string Aggregator::IngestStatePath() const {
  return options_.state_dir.empty() ? "" : options_.state_dir + "/ingest_state.json";
}

Status Aggregator::Start() {
  if (!options_.state_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.state_dir, ec);
    if (ec) {
      return Status::FailedPrecondition("state dir " + options_.state_dir +
                                        ": cannot create: " + ec.message());
    }
    std::ifstream in(IngestStatePath());
    if (in) {
      std::stringstream ss;
      ss << in.rdbuf();
      Status st = fleet_.ImportIngestJson(ss.str());
      if (!st.ok()) {
        // A damaged state file costs dedup history, not availability; it is kept for a person.
        in.close();
        NoteQuarantined(QuarantineFile(IngestStatePath(), st.message(), clock_.WallNanos()));
      } else {
        spdlog::info("msg=\"ingest state restored\" file={}", IngestStatePath());
      }
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
  auto versions = PlanVersions::Start(options_.state_dir, clock_.WallNanos());
  if (!versions.ok()) return versions.status();
  plan_versions_.emplace(std::move(*versions));
  if (plan_versions_->quarantined()) NoteQuarantined(*plan_versions_->quarantined());
  pairs_ = std::make_unique<PairTable>(clock_, map_, PairTable::kDefaultMaxPairs, names_);
  planner_ = std::make_unique<Planner>(options_.planner, map_);
  if (!options_.state_dir.empty()) {
    store_ = std::make_unique<analysis::FindingsStore>(options_.state_dir);
    Status st = store_->Open();
    if (store_->quarantined()) NoteQuarantined(*store_->quarantined());
    if (!st.ok()) {
      // Findings still work in memory; the store counts and logs its own errors.
      spdlog::error("msg=\"findings history unavailable\" error=\"{}\"", st.message());
    }
  }
  analyzer_ = std::make_unique<analysis::Analyzer>(clock_, map_, pairs_.get(), options_.analysis,
                                                   analysis::PathResolver{}, store_.get());
  auto http = http::Server::Start(options_.http_listen);
  if (!http.ok()) return http.status();
  http_ = std::move(*http);
  InstallHttpHandlers();

  GrpcServer::Options go;
  go.listen = options_.grpc_listen;
  auto grpc = GrpcServer::Start(go, fleet_, *this, registry_);
  if (!grpc.ok()) return grpc.status();
  grpc_ = std::move(*grpc);
  // Called on gRPC threads: only flag it; the tick thread re-plans.
  fleet_.SetMembershipListener([this] {
    last_membership_ns_.store(clock_.MonotonicNanos(), std::memory_order_relaxed);
    replan_needed_ = true;
  });
  ticker_ = std::thread([this] { TickLoop(); });
  ready_ = true;
  spdlog::info("msg=\"aggregator started\" grpc_port={} http_port={} version={}", grpc_port(),
               http_port(), FW_VERSION);
  return Status::Ok();
}

void Aggregator::Stop() {
  {
    std::lock_guard lock(tick_mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  tick_cv_.notify_all();
  ready_ = false;
  if (ticker_.joinable()) ticker_.join();
  if (grpc_) grpc_->Shutdown(3.0);
  grpc_.reset();
  if (!IngestStatePath().empty()) {
    std::string tmp = IngestStatePath() + ".tmp";
    std::ofstream out(tmp, std::ios::trunc);
    out << fleet_.ExportIngestJson();
    out.close();
    std::error_code ec;
    if (!out || (std::filesystem::rename(tmp, IngestStatePath(), ec), ec)) {
      spdlog::error("msg=\"cannot save ingest state\" file={}", IngestStatePath());
    }
  }
  if (http_) http_->Stop();
  spdlog::info("msg=\"aggregator stopped\"");
}

void Aggregator::TickLoop() {
  std::unique_lock lock(tick_mu_);
  while (!stopping_) {
    tick_cv_.wait_for(lock, std::chrono::duration<double>(options_.tick_s));
    if (stopping_) break;
    lock.unlock();
    fleet_.Sweep();
    int64_t now = clock_.MonotonicNanos();
    if (first_pending_ns_ == 0 && replan_needed_) first_pending_ns_ = now;
    const bool settled =
        now - last_membership_ns_.load(std::memory_order_relaxed) >= kReplanSettleNs ||
        (first_pending_ns_ != 0 && now - first_pending_ns_ >= kReplanMaxDelayNs);
    if (settled && now - last_replan_ns_ >= replan_spacing_ns_ && replan_needed_.exchange(false)) {
      first_pending_ns_ = 0;
      last_replan_ns_ = now;
      // No malloc_trim after it: plans are streamed, so a re-plan frees a few MB, and a trim walks
      // every free chunk of a 1.6 GB heap with the arena locked (seconds at 16,000 agents).
      Replan();
      int64_t cost = clock_.MonotonicNanos() - now;
      replan_seconds_.Set(static_cast<double>(cost) / 1e9);
      replan_spacing_ns_ = std::clamp<int64_t>(5 * cost, 1'000'000'000, 30'000'000'000);
      now = clock_.MonotonicNanos();
    }
    PushPendingPlans();
    analyzer_->Tick();
    analysis_metrics_.Update(*analyzer_);
    // Both walk every pair (~600,000 at 16,000 agents): per-node series every few seconds are
    // enough for a scrape, and expiry after 660 s idle needs no 1 s precision.
    if (now - last_node_metrics_ns_ >= kNodeMetricsPeriodNs) {
      last_node_metrics_ns_ = now;
      node_probe_metrics_.Update(*pairs_, now);
    }
    if (now - last_drop_idle_ns_ >= kDropIdlePeriodNs) {
      last_drop_idle_ns_ = now;
      pairs_->DropIdle(now);
      pairs_held_.Set(static_cast<double>(pairs_->PairCount()));
      pair_bytes_.Set(static_cast<double>(pairs_->PairBytes()));
      flow_bytes_.Set(static_cast<double>(analyzer_->flows().MemoryBytes()));
    }
    tick_seconds_.Set(static_cast<double>(clock_.MonotonicNanos() - now) * 1e-9);
    ticks_.Inc();
    lock.lock();
  }
}

namespace {

v1::Transport ToWire(Transport t) {
  switch (t) {
    case Transport::kUdp: return v1::TRANSPORT_UDP;
    case Transport::kTcpConnect: return v1::TRANSPORT_TCP_CONNECT;
    case Transport::kTcpBw: return v1::TRANSPORT_TCP_BW;
    case Transport::kRdmaUd: return v1::TRANSPORT_RDMA_UD;
    case Transport::kRdmaRc: return v1::TRANSPORT_RDMA_RC;
    case Transport::kCollective: return v1::TRANSPORT_COLLECTIVE;
  }
  return v1::TRANSPORT_UNSPECIFIED;
}

}  // namespace

void Aggregator::OnProbeBatch(const std::string& node, const v1::ProbeBatch& batch) {
  const auto known = std::atomic_load(&known_nodes_);
  const NodeId src = names_->Intern(node);
  // Any peer before the first plan, then only nodes that said Hello. Called once per distinct
  // name of a name table this source has not sent before.
  const PeerResolver resolve = [&](std::string_view peer) -> NodeId {
    if (!known) return names_->Intern(peer);
    const std::optional<NodeId> id = names_->Find(peer);
    return id && *id < known->by_id.size() && known->by_id[*id] != 0 ? *id : kNoNode;
  };
  // Decoded into a reused per-thread buffer: ingest allocates only when a batch is larger than
  // any this thread has seen.
  thread_local std::vector<ProbeResult> results;
  DecodeOutcome o;
  {
    NameCacheShard& cache = name_caches_[src % kNameCacheShards];
    std::lock_guard lock(cache.mu);
    o = DecodeProbeBatch(node, src, batch, resolve, results, &cache.by_source[src],
                         known ? known->epoch : 0);
  }
  if (o.invalid_results > 0) bad_results_.Inc(static_cast<double>(o.invalid_results));
  if (o.column_error != ColumnError::kNone) {
    bad_columns_[static_cast<size_t>(o.column_error)]->Inc();
    // One line per node and reason: a broken agent repeats its fault every second.
    const bool first = [&] {
      std::lock_guard lock(bad_columns_mu_);
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
  std::span<const ProbeResult> span(results.data(), o.appended);
  pairs_->RecordBatch(span);
  analyzer_->Ingest(span);
}

void Aggregator::Replan() {
  std::vector<AgentInfo> live;
  auto known = std::make_shared<KnownNodes>();
  known->epoch = ++known_epoch_;
  for (const NodeView& n : fleet_.Nodes()) {
    const NodeId id = names_->Intern(n.name);
    if (id >= known->by_id.size()) known->by_id.resize(id + 1, 0);
    known->by_id[id] = 1;
    if (!n.connected || !n.up) continue;
    AgentInfo a;
    a.node = n.name;
    for (const auto& e : n.endpoints) {
      if (e.transport() != v1::TRANSPORT_UDP || e.address().empty() || e.port() > 65535) continue;
      a.endpoints.push_back({e.address(), static_cast<uint16_t>(e.port()), e.nic()});
    }
    live.push_back(std::move(a));
  }
  std::atomic_store(&known_nodes_, std::shared_ptr<const KnownNodes>(known));
  uint64_t version = 0;
  {
    std::lock_guard lock(plan_mu_);
    // Unique across restarts: agents ignore a plan whose version is not newer than theirs.
    version = plan_version_ = plan_versions_->Next(clock_.WallNanos());
  }
  // Each plan is encoded as the planner finishes it and replaces the node's entry in place, so the
  // re-plan holds one leaf's plans at a time rather than the fleet's (1.5 million peers, ~300 MB,
  // at 16,000 agents on 16 spines). Readers see every node's old plan or its new one, never none.
  std::vector<std::string> changed;
  std::string bytes;
  const auto summary = planner_->PlanEach(live, [&](const std::string& node, Plan&& plan) {
    v1::ProbePlan p;
    p.mutable_budget()->set_packets_per_s(plan.budget.pps);
    p.mutable_budget()->set_bytes_per_s(plan.budget.bytes_per_s);
    p.set_latency_interval_s(1.0);
    p.set_bandwidth_interval_s(plan.bw_interval_s);
    p.set_bandwidth_bytes(plan.bw_burst_bytes);
    for (const PlannedPeer& peer : plan.peers) {
      v1::PlannedPeer* pp = p.add_peers();
      pp->set_node(peer.node);
      pp->set_address(peer.address);
      pp->set_port(peer.port);
      pp->set_transport(ToWire(peer.transport));
      pp->mutable_src_ports()->Reserve(static_cast<int>(peer.flows));
      for (uint32_t f = 0; f < peer.flows; ++f) pp->add_src_ports(f);
      pp->set_rate_pps(peer.rate_pps);
      pp->set_bandwidth(peer.bandwidth);
    }
    plan = {};
    // Deterministic serialization, so equal plans hash equal (the version is not set yet).
    bytes.clear();
    {
      google::protobuf::io::StringOutputStream sos(&bytes);
      google::protobuf::io::CodedOutputStream cos(&sos);
      cos.SetSerializationDeterministic(true);
      p.SerializeToCodedStream(&cos);
    }
    const uint64_t hash = std::hash<std::string>{}(bytes);
    {
      std::lock_guard lock(plan_mu_);
      auto old = plans_.find(node);
      if (old != plans_.end() && old->second.content_hash == hash) {
        old->second.replan = version;  // same version, nothing to send
        return;
      }
    }
    // Field 1 is serialized first, so the versioned plan is its tag and varint followed by the
    // bytes already encoded (ProbePlan has no maps: deterministic output is the plain output).
    std::string versioned;
    {
      google::protobuf::io::StringOutputStream sos(&versioned);
      google::protobuf::io::CodedOutputStream cos(&sos);
      cos.WriteTag(v1::ProbePlan::kVersionFieldNumber << 3);
      cos.WriteVarint64(version);
    }
    versioned.append(bytes);
    auto stored = std::make_shared<const std::string>(std::move(versioned));
    {
      std::lock_guard lock(plan_mu_);
      StoredPlan& slot = plans_[node];
      slot.content_hash = hash;
      slot.bytes = std::move(stored);
      slot.replan = version;
    }
    changed.push_back(node);
  });
  for (const std::string& note : summary.notes) spdlog::warn("msg=\"planner\" note=\"{}\"", note);
  const size_t live_count = live.size();
  live = {};
  {
    // Nodes the new plan set does not name (gone, or down) lose their plans.
    std::lock_guard lock(plan_mu_);
    std::erase_if(plans_, [&](const auto& kv) { return kv.second.replan != version; });
  }
  replans_.Inc();
  spdlog::info("msg=\"probe plans updated\" agents={} leaf_pairs_covered={} plans_changed={}",
               live_count, summary.leaf_pairs_covered, changed.size());
  // Sent by PushPendingPlans(), a bounded number per tick. A node that reconnects meanwhile gets
  // its current plan with its Ack anyway.
  for (std::string& node : changed) pending_pushes_.insert(std::move(node));
}

void Aggregator::PushPendingPlans() {
  if (!grpc_ || pending_pushes_.empty()) return;
  // One pass over the sessions picks up to kPlanPushesPerTick pending nodes that are connected.
  std::unordered_set<std::string> batch;
  for (auto it = pending_pushes_.begin();
       it != pending_pushes_.end() && batch.size() < kPlanPushesPerTick;) {
    batch.insert(pending_pushes_.extract(it++).value());
  }
  uint64_t pushed = 0;
  grpc_->PushPlans([&](const std::string& node) {
    const bool want = batch.contains(node);
    pushed += want;
    return want;
  });
  plans_sent_.Inc(static_cast<double>(pushed));
}

void Aggregator::OnCounterBatch(const std::string& node, const v1::CounterBatch& batch) {
  ports_.Update(node, batch);
  auto known = [](double v) { return std::isfinite(v) ? v : 0.0; };
  for (const v1::PortSample& p : batch.ports()) {
    analysis::PortSample s;
    s.node = node;
    s.device = p.device();
    s.port = static_cast<int>(p.port());
    s.congestion_ratio = known(p.congestion_ratio());
    s.cnp_rate = known(p.cnp_handled_per_s());
    s.ecn_rate = known(p.ecn_marked_per_s());
    s.error_rate = known(p.error_rate());
    s.up = p.state() == "ACTIVE";
    analyzer_->OnPortSample(s);
  }
}
void Aggregator::OnCheckReport(const std::string& node, const v1::CheckReport& report) {
  std::vector<Finding> findings;
  for (const v1::Finding& f : report.findings()) {
    Finding out;
    out.kind = f.kind();
    out.severity = f.severity() == "critical" ? Severity::kCritical : Severity::kWarning;
    out.location.type = f.location().type();
    out.location.id = f.location().id();
    // An agent may only report findings about its own node.
    out.location.node = node;
    out.location.device = f.location().device();
    out.location.port = static_cast<int>(f.location().port());
    out.summary = f.summary();
    for (const auto& [k, v] : f.evidence()) {
      if (std::isfinite(v)) out.evidence[k] = v;
    }
    out.confidence = std::isfinite(f.confidence()) ? std::clamp(f.confidence(), 0.0, 1.0) : 1.0;
    findings.push_back(std::move(out));
  }
  analyzer_->SetNodeFindings(node, std::move(findings));
}
std::optional<v1::ProbePlan> Aggregator::PlanFor(const std::string& node) {
  std::shared_ptr<const std::string> bytes;
  {
    std::lock_guard lock(plan_mu_);
    auto it = plans_.find(node);
    if (it == plans_.end()) return std::nullopt;
    bytes = it->second.bytes;
  }
  v1::ProbePlan plan;
  if (!plan.ParseFromString(*bytes)) return std::nullopt;  // cannot happen: we serialized it
  return plan;
}

namespace {

// `affinity` and `pcie` only with `with_topology`, and only after the node's first check report.
json InventoryJson(const v1::Inventory& inv, const NodeLocality& locality, bool with_topology) {
  json gpus = json::array(), nics = json::array();
  for (const auto& g : inv.gpus()) {
    gpus.push_back({{"bus_id", g.bus_id()}, {"name", g.name()}, {"numa_node", g.numa_node()},
                    {"best_nic", g.best_nic()}, {"affinity_class", g.affinity_class()}});
  }
  for (const auto& n : inv.nics()) {
    nics.push_back({{"bus_id", n.bus_id()}, {"device", n.device()}, {"netdev", n.netdev()},
                    {"numa_node", n.numa_node()}, {"fabric", n.fabric()},
                    {"link_layer", n.link_layer()}, {"rate_gbps", n.rate_gbps()}});
  }
  json out = {{"hostname", inv.hostname()}, {"packages", inv.packages()},
              {"numa_nodes", inv.numa_nodes()}, {"cores", inv.cores()},
              {"gpus", gpus}, {"nics", nics}, {"source", inv.source()}};
  if (with_topology && locality.reported) {
    out["affinity"] = AffinityJson(locality);
    out["pcie"] = PcieJson(locality);
  }
  return out;
}

}  // namespace

void Aggregator::InstallHttpHandlers() {
  http_->HandleMetrics(registry_, [this](double s) { self_.ObserveScrape(s); });
  http_->Handle("/healthz", [](const http::Request&, http::Response& r) {
    r.Send(200, "text/plain", "ok\n");
  });
  http_->Handle("/readyz", [this](const http::Request&, http::Response& r) {
    if (ready_) {
      // Still ready: the daemon works without the history a corrupt file held, and taking a
      // fleet monitor out of service for that would hide the fleet. The body says what was lost.
      std::string body = "ready\n";
      for (const QuarantinedFile& q : quarantined_files_) {
        body += "warning: state file " + q.from + " was corrupt (" + q.error + "); " +
                (q.to.empty() ? "it could not be moved aside"
                              : "moved to " + q.to + ", started fresh") +
                "\n";
      }
      r.Send(200, "text/plain", body);
    } else {
      r.Send(503, "text/plain", "not ready\n");
    }
  });
  http_->Handle("/api/v1/nodes", [this](const http::Request& req, http::Response& r) {
    auto q = ParseNodesQuery(req.query);
    if (!q.ok()) {
      r.Send(400, "application/json", json{{"error", q.status().message()}}.dump());
      return;
    }
    json out = json::array();
    for (const NodeView& n : fleet_.Nodes()) {
      if (!q->name.empty() && n.name != q->name) continue;
      json endpoints = json::array();
      for (const auto& e : n.endpoints) {
        endpoints.push_back({{"transport", TransportName(e.transport())},
                             {"address", e.address()}, {"port", e.port()}, {"nic", e.nic()}});
      }
      const NodeIngest& in = n.ingest;
      out.push_back({{"name", n.name},
                     {"connected", n.connected && n.up},
                     {"last_seen", n.last_seen_wall_ns ? FormatRfc3339(n.last_seen_wall_ns) : ""},
                     {"last_report_age_s", n.last_report_age_s},
                     {"health", n.health},
                     {"version", n.version},
                     {"inventory", InventoryJson(n.inventory, n.locality, q->WithTopology())},
                     {"endpoints", endpoints},
                     {"ingest",
                      {{"session_id", in.session_id}, {"last_seq", in.last_seq},
                       {"batches", in.batches}, {"results", in.results},
                       {"duplicates", in.duplicates}, {"gaps", in.gaps},
                       {"test_batches", in.test_batches},
                       {"test_ids_distinct", in.test_ids.size()}}}});
    }
    r.Send(200, "application/json", out.dump());
  });
  http_->Handle("/api/v1/pairs", [this](const http::Request& req, http::Response& r) {
    auto q = ParsePairsQuery(req.query);
    if (!q.ok()) {
      r.Send(400, "application/json",
             json{{"error", q.status().message()}}.dump());
      return;
    }
    PairsPage page = RenderPairs(*pairs_, *q, clock_.MonotonicNanos());
    r.Send(200, "application/json", page.rows.dump());
  });
  http_->Handle("/api/v1/findings", [this](const http::Request& req, http::Response& r) {
    auto q = analysis::ParseFindingsQuery(req.query);
    if (!q.ok()) {
      r.Send(400, "application/json", json{{"error", q.status().message()}}.dump());
      return;
    }
    r.Send(200, "application/json", analysis::RenderFindings(*analyzer_, *q).dump());
  });
  http_->Handle("/api/v1/links", [this](const http::Request&, http::Response& r) {
    r.Send(200, "application/json", analysis::RenderLinks(analyzer_->Links()).dump());
  });
  InstallStatusPage(*http_, FW_VERSION);
}

}  // namespace fw::aggregator
