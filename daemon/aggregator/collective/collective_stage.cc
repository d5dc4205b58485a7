// The collective stage in the aggregator: locking, wire conversion, metrics, pause/resume API.
#include "daemon/aggregator/collective/collective_stage.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>

#include "daemon/aggregator/collective/pause_request.h"

namespace fw::aggregator::collective {

namespace v1 = fabricwatch::v1;
using nlohmann::json;

namespace {

void AddJobs(const std::vector<OutboundJob>& jobs, Outbound& out) {
  for (const OutboundJob& j : jobs) {
    v1::AggregatorMessage m;
    v1::CollectiveJob* cj = m.mutable_collective_job();
    cj->set_job_id(j.job.job_id);
    cj->set_backend(j.job.backend);
    for (const std::string& member : j.job.members) cj->add_members(member);
    cj->set_bytes(j.job.bytes);
    cj->set_iterations(j.job.iterations);
    cj->set_op(j.job.op);
    cj->set_timeout_s(j.job.timeout_s);
    for (const uint32_t g : j.job.member_gpus) cj->add_member_gpus(g);
    for (const uint32_t d : j.job.devices) cj->add_devices(d);
    out.emplace_back(j.node, std::move(m));
  }
}

void AddReplies(std::vector<KvDelivery> replies, Outbound& out) {
  for (KvDelivery& d : replies) {
    v1::AggregatorMessage m;
    v1::KvReply* r = m.mutable_kv_reply();
    r->set_key(std::move(d.key));
    r->set_value(std::move(d.value));
    r->set_found(d.found);
    out.emplace_back(std::move(d.node), std::move(m));
  }
}

json FindingJson(const CollectiveSlowFinding& f) {
  return {{"kind", "collective_slow"},
          {"location", f.location},
          {"node", f.node},
          {"gpu", f.gpu},
          {"cause", f.cause},
          {"detail", f.detail},
          {"group", f.group},
          {"measured_busbw_bps", f.measured_bps},
          {"expected_busbw_bps", f.expected_bps}};
}

// The analysis form: at the culprit node; for a link culprit at the map link the probe mesh
// corroborates (`mesh`), else at the leaf or the leaf pair the bisection named.
Finding AnalysisFinding(const CollectiveSlowFinding& f, const MeshLink* mesh) {
  Finding out;
  out.kind = "collective_slow";
  out.severity = Severity::kWarning;
  const double measured = f.measured_bps / 1e9, expected = f.expected_bps / 1e9;
  out.summary = fmt::format(
      "collective group {} is slow: bus bandwidth {:.1f} Gbit/s against {:.1f} expected; "
      "bisection ends at {} ({})",
      f.group, measured, expected, f.location, f.cause);
  out.evidence = {{"busbw_gbps", measured}, {"expected_busbw_gbps", expected}};
  if (expected > 0) out.evidence["busbw_ratio"] = measured / expected;
  if (!f.detail.empty()) {
    // A late host: "node h3 (late host: arrives 5.0 ms late in 18 of 20 iterations)".
    out.summary.insert(out.summary.size() - 1, ": " + f.detail);
    out.evidence["late_ms"] = f.late_s * 1e3;
    out.evidence["late_iterations"] = f.late_iterations;
    out.evidence["iterations"] = f.iterations;
  }
  if (!f.gpu.empty()) {
    // A GPU, or the link between two ("GPU1-GPU2"), by CUDA device index on the node.
    out.location = FindingLocation{"gpu", f.node + "/" + f.gpu, f.node, f.gpu, 0};
  } else if (!f.node.empty()) {
    out.location = FindingLocation{"node", f.node, f.node, "", 0};
  } else if (f.leaf_a.empty()) {
    out.location = FindingLocation{"group", f.location, "", "", 0};
  } else if (mesh != nullptr) {
    out.location = FindingLocation{"link", mesh->id, "", "", 0};
    out.summary += fmt::format("; the probe mesh corroborates it: {} is {} (loss {:.2f}%", mesh->id,
                               mesh->state, 100 * mesh->loss_ratio);
    if (mesh->latency_inflation > 0) {
      out.summary += fmt::format(", latency {:.1f}x", mesh->latency_inflation);
    }
    if (mesh->bandwidth_ratio > 0) {
      out.summary += fmt::format(", bandwidth {:.2f} of its peers'", mesh->bandwidth_ratio);
    }
    out.summary += ")";
    out.evidence["mesh_corroborated"] = 1;
    out.evidence["mesh_loss_ratio"] = mesh->loss_ratio;
    if (mesh->latency_inflation > 0)
      out.evidence["mesh_latency_inflation"] = mesh->latency_inflation;
    if (mesh->bandwidth_ratio > 0) out.evidence["mesh_bandwidth_ratio"] = mesh->bandwidth_ratio;
  } else {
    if (f.leaf_b.empty()) {
      out.location = FindingLocation{"switch", f.leaf_a, "", "", 0};
      out.summary += fmt::format("; the probe mesh sees no fault on {}'s uplinks", f.leaf_a);
    } else {
      const auto [x, y] = std::minmax(f.leaf_a, f.leaf_b);
      out.location = FindingLocation{"pair", x + "~" + y, "", "", 0};
      out.summary +=
          fmt::format("; the probe mesh sees no fault on {}'s or {}'s uplinks", f.leaf_a, f.leaf_b);
    }
    out.evidence["mesh_corroborated"] = 0;
    out.confidence = 0.5;
  }
  return out;
}

}  // namespace

std::vector<CollectiveNode> CollectiveNodesOf(const std::vector<NodeView>& nodes,
                                              const FabricMap* map) {
  std::vector<CollectiveNode> out;
  for (const NodeView& n : nodes) {
    if (!n.connected || !n.up) continue;
    CollectiveNode c;
    c.name = n.name;
    c.gpus = n.inventory.gpus_size();
    if (n.collective.nccl_state() == "ready") {
      c.nccl_gpus = static_cast<int>(std::min<uint32_t>(n.collective.nccl_gpus(), 64));
    }
    c.session = n.ingest.session_id;
    if (map) {
      const std::vector<HostNicIndex>& nics = map->NicsOfNode(n.name);
      if (!nics.empty()) {
        const SwitchIndex leaf = map->host_nics()[nics.front()].leaf;
        if (leaf != kNoIndex) c.leaf = map->switches()[leaf].name;
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

CollectiveStage::CollectiveStage(OrchestratorConfig config, metrics::Registry& registry,
                                 std::function<void(Outbound)> send)
    : schedule_on_(config.schedule.interval_ns > 0),
      hold_ns_(std::max(kMinHoldNs, kHoldIntervals * config.schedule.interval_ns)),
      send_(std::move(send)),
      orchestrator_(config),
      pauses_(&orchestrator_.pauses()),
      busbw_(
          registry.AddGauge("fabricwatch_collective_busbw_gbps",
                            "Bus bandwidth (nccl-tests definition, Gbit/s) of the last completed "
                            "collective probe group of each kind: its slowest member's.",
                            {"group_kind"})),
      runs_(registry
                .AddCounter("fabricwatch_collective_group_runs_total",
                            "Collective probe jobs completed (each member answered, or the job "
                            "failed or timed out), bisection runs included.")
                .WithLabels({})),
      failures_(registry
                    .AddCounter("fabricwatch_collective_group_failures_total",
                                "Collective probe jobs that failed: a member's error or the job's "
                                "timeout.")
                    .WithLabels({})),
      bisections_(registry
                      .AddCounter("fabricwatch_collective_bisections_total",
                                  "Bisections started on a group that turned slow.")
                      .WithLabels({})),
      findings_total_(registry
                          .AddCounter("fabricwatch_collective_findings_total",
                                      "collective_slow findings produced by bisections.")
                          .WithLabels({})),
      paused_(registry
                  .AddGauge("fabricwatch_collective_paused_nodes",
                            "Nodes whose collective probes are paused (POST "
                            "/api/v1/collectives/pause).")
                  .WithLabels({})),
      in_flight_(registry
                     .AddGauge("fabricwatch_collective_jobs_in_flight",
                               "Collective probe jobs started and not yet complete.")
                     .WithLabels({})),
      refused_(registry.AddCounter("fabricwatch_collective_pause_refused_total",
                                   "Pause or resume requests refused (bad_request: the body is "
                                   "not {\"nodes\": [...]}; method: not a POST).",
                                   {"reason"})) {
  refused_.WithLabels({"bad_request"});
  refused_.WithLabels({"method"});
}

void CollectiveStage::Tick(const std::function<std::vector<CollectiveNode>()>& nodes,
                           int64_t now_ns) {
  Outbound out;
  {
    MutexLock lock(mu_);
    last_tick_ns_ = now_ns;
    std::erase_if(active_, [&](const auto& e) { return now_ns - e.second.at_ns >= hold_ns_; });
    if (schedule_on_ && (nodes_at_ns_ < 0 || now_ns - nodes_at_ns_ >= kNodesRefreshNs)) {
      nodes_ = nodes();
      nodes_at_ns_ = now_ns;
    }
    CollectiveOrchestrator::TickOutput t =
        orchestrator_.Tick(schedule_on_ ? nodes_ : std::vector<CollectiveNode>{}, now_ns);
    AddJobs(t.jobs, out);
    AddReplies(std::move(t.kv), out);
    Keep(std::move(t.findings));
    DropRecovered();
    Export();
  }
  if (!out.empty()) send_(std::move(out));
}

std::string CollectiveStage::StartOnDemand(std::vector<std::string> members, uint64_t bytes,
                                           uint32_t iterations, int64_t now_ns) {
  Outbound out;
  std::string id;
  {
    MutexLock lock(mu_);
    CollectiveOrchestrator::TickOutput t =
        orchestrator_.StartOnDemand(std::move(members), bytes, iterations, now_ns);
    if (!t.jobs.empty()) id = t.jobs.front().job.job_id;
    AddJobs(t.jobs, out);
    Export();
  }
  if (!out.empty()) send_(std::move(out));
  return id;
}

std::optional<OnDemandOutcome> CollectiveStage::TakeOnDemand(const std::string& job_id) {
  MutexLock lock(mu_);
  return orchestrator_.TakeOnDemand(job_id);
}

bool CollectiveStage::ScheduledJobOn(const std::vector<std::string>& nodes) const {
  MutexLock lock(mu_);
  return orchestrator_.ScheduledJobOn(nodes);
}

void CollectiveStage::Abandon(const std::string& job_id) {
  MutexLock lock(mu_);
  orchestrator_.Abandon(job_id);
  Export();
}

void CollectiveStage::OnKvRequest(const std::string& node, const v1::KvRequest& request,
                                  int64_t now_ns) {
  Outbound out;
  {
    MutexLock lock(mu_);
    AddReplies(orchestrator_.OnKvRequest(node, request.key(), request.value(), now_ns), out);
  }
  if (!out.empty()) send_(std::move(out));
}

MemberTimes MemberTimesOf(const v1::CollectiveResult& result) {
  MemberTimes t;
  t.op_seconds.assign(result.op_seconds().begin(), result.op_seconds().end());
  // A member that drove several ranks (NCCL, one per GPU) arrives with its first rank and leaves
  // with its last. Ranks with differing iteration counts leave the member without timestamps.
  const size_t ranks = std::min<size_t>(static_cast<size_t>(result.rank_times_size()), 64);
  for (size_t k = 0; k < ranks; ++k) {
    const v1::CollectiveRankTimes& r = result.rank_times(static_cast<int>(k));
    const size_t n = std::min<size_t>(static_cast<size_t>(r.arrive_ns_size()), kMaxIterations);
    if (static_cast<size_t>(r.exit_ns_size()) < n || (k > 0 && n != t.arrive_ns.size())) {
      return {.op_seconds = std::move(t.op_seconds)};
    }
    if (k == 0) {
      t.arrive_ns.assign(r.arrive_ns().begin(), r.arrive_ns().begin() + static_cast<long>(n));
      t.exit_ns.assign(r.exit_ns().begin(), r.exit_ns().begin() + static_cast<long>(n));
      continue;
    }
    for (size_t i = 0; i < n; ++i) {
      t.arrive_ns[i] = std::min(t.arrive_ns[i], r.arrive_ns(static_cast<int>(i)));
      t.exit_ns[i] = std::max(t.exit_ns[i], r.exit_ns(static_cast<int>(i)));
    }
  }
  return t;
}

void CollectiveStage::OnResult(const std::string& node, const v1::CollectiveResult& result) {
  MemberTimes times = MemberTimesOf(result);
  MutexLock lock(mu_);
  Keep(orchestrator_.OnResult(node, result.job_id(), result.bus_bandwidth_bps(), result.latency_s(),
                              result.error(), std::move(times)));
  DropRecovered();
  Export();
}

void CollectiveStage::Keep(std::vector<CollectiveSlowFinding> findings) {
  for (CollectiveSlowFinding& f : findings) {
    Kept& k = active_[f.location];
    k.finding = f;
    k.at_ns = last_tick_ns_;
    k.groups.insert(f.group);
    findings_.push_back(std::move(f));
    if (findings_.size() > kKeptFindings) findings_.pop_front();
  }
}

void CollectiveStage::DropRecovered() {
  for (const std::string& group : orchestrator_.TakeRecovered()) {
    // A location stays while another group whose bisection ended there is still slow.
    size_t dropped = 0;
    for (auto it = active_.begin(); it != active_.end();) {
      if (it->second.groups.erase(group) > 0 && it->second.groups.empty()) {
        it = active_.erase(it);
        ++dropped;
      } else {
        ++it;
      }
    }
    if (dropped > 0) {
      spdlog::info(
          "component=collective msg=\"collective_slow resolved: the group runs at its expected "
          "rate again\" group={} findings={}",
          group, dropped);
    }
  }
}

void CollectiveStage::Export() {
  const OrchestratorCounters& c = orchestrator_.counters();
  runs_.Set(static_cast<double>(c.runs));
  failures_.Set(static_cast<double>(c.failures));
  bisections_.Set(static_cast<double>(c.bisections));
  findings_total_.Set(static_cast<double>(c.findings));
  for (const auto& [kind, bps] : c.busbw_bps_by_kind) busbw_.WithLabels({kind}).Set(bps / 1e9);
  in_flight_.Set(static_cast<double>(orchestrator_.jobs_in_flight()));
  paused_.Set(static_cast<double>(pauses_->list().size()));
}

std::vector<Finding> CollectiveStage::ActiveFindings(
    int64_t now_ns, const std::function<std::vector<MeshLink>()>& mesh) {
  std::vector<Finding> out;
  std::vector<MeshLink> links;
  bool asked = false;
  MutexLock lock(mu_);
  for (auto& entry : active_) {
    const std::string& location = entry.first;
    Kept& kept = entry.second;  // a structured binding cannot be captured below (clang)
    if (now_ns - kept.at_ns >= hold_ns_) continue;
    const CollectiveSlowFinding& f = kept.finding;
    const MeshLink* corroborating = nullptr;
    if (f.node.empty() && !f.leaf_a.empty() && mesh) {
      if (!asked) {
        links = mesh();
        asked = true;
      }
      if (kept.mesh_link.empty()) {
        corroborating = CorroboratingLink(links, f.leaf_a, f.leaf_b);
        if (corroborating != nullptr) {
          kept.mesh_link = corroborating->id;
          spdlog::info(
              "component=collective msg=\"probe mesh corroborates a collective_slow link\" "
              "bisection=\"{}\" link={} state={} loss_ratio={}",
              location, corroborating->id, corroborating->state, corroborating->loss_ratio);
        }
      } else {
        auto it = std::find_if(links.begin(), links.end(),
                               [&](const MeshLink& l) { return l.id == kept.mesh_link; });
        if (it != links.end()) corroborating = &*it;
      }
    }
    if (corroborating == nullptr && !kept.mesh_link.empty()) {
      // Corroborated earlier and gone from the map since: keep the place, without numbers.
      MeshLink gone;
      gone.id = kept.mesh_link;
      gone.state = "unknown";
      out.push_back(AnalysisFinding(f, &gone));
      continue;
    }
    out.push_back(AnalysisFinding(f, corroborating));
  }
  return out;
}

std::vector<CollectiveSlowFinding> CollectiveStage::recent_findings() const {
  MutexLock lock(mu_);
  return {findings_.begin(), findings_.end()};
}

void CollectiveStage::PauseOrResume(bool pause, const http::Request& req, http::Response& r) {
  const char* verb = pause ? "pause" : "resume";
  if (req.method != "POST") {
    refused_.WithLabels({"method"}).Inc();
    spdlog::warn("component=collective msg=\"{} refused: not a POST\" method={}", verb, req.method);
    r.AddHeader("Allow", "POST");
    r.Send(405, "application/json", json{{"error", "POST {\"nodes\": [...]}"}}.dump());
    return;
  }
  auto nodes = ParsePauseRequest(req.body);
  if (!nodes.ok()) {
    refused_.WithLabels({"bad_request"}).Inc();
    spdlog::warn("component=collective msg=\"{} refused\" error=\"{}\"", verb,
                 nodes.status().message());
    r.Send(400, "application/json", json{{"error", nodes.status().message()}}.dump());
    return;
  }
  json changed = json::array();
  for (const std::string& n : *nodes) {
    if (pause ? pauses_->Pause(n) : pauses_->Resume(n)) changed.push_back(n);
  }
  const std::vector<std::string> paused = pauses_->list();
  paused_.Set(static_cast<double>(paused.size()));
  spdlog::info("component=collective msg=\"collective probes {}\" nodes={} changed={} paused={}",
               pause ? "paused" : "resumed", nodes->size(), changed.size(), paused.size());
  r.Send(200, "application/json", json{{"changed", changed}, {"paused", paused}}.dump());
}

void CollectiveStage::InstallHttp(http::Server& server) {
  const http::HandlerOptions write{.requires_auth = true};
  server.Handle(
      "/api/v1/collectives/pause",
      [this](const http::Request& req, http::Response& r) { PauseOrResume(true, req, r); }, write);
  server.Handle(
      "/api/v1/collectives/resume",
      [this](const http::Request& req, http::Response& r) { PauseOrResume(false, req, r); }, write);
  server.Handle("/api/v1/collectives", [this](const http::Request&, http::Response& r) {
    json out;
    out["paused"] = pauses_->list();
    json findings = json::array();
    {
      MutexLock lock(mu_);
      const OrchestratorCounters& c = orchestrator_.counters();
      out["runs"] = c.runs;
      out["failures"] = c.failures;
      out["skipped"] = c.skipped;
      out["bisections"] = c.bisections;
      out["jobs_in_flight"] = orchestrator_.jobs_in_flight();
      out["active_bisections"] = orchestrator_.active_bisections();
      json busbw = json::object();
      for (const auto& [kind, bps] : c.busbw_bps_by_kind) busbw[kind] = bps / 1e9;
      out["busbw_gbps"] = std::move(busbw);
      for (const CollectiveSlowFinding& f : findings_) findings.push_back(FindingJson(f));
    }
    out["findings"] = std::move(findings);
    r.Send(200, "application/json", out.dump());
  });
}

}  // namespace fw::aggregator::collective
