#include "daemon/aggregator/plan/plan_book.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/aggregator/plan/prober_index.h"
#include "exporter/registry.h"

namespace fw::aggregator {

namespace v1 = fabricwatch::v1;

namespace {

v1::Transport ToWire(Transport t) {
  switch (t) {
    case Transport::kUdp:
      return v1::TRANSPORT_UDP;
    case Transport::kTcpConnect:
      return v1::TRANSPORT_TCP_CONNECT;
    case Transport::kTcpBw:
      return v1::TRANSPORT_TCP_BW;
    case Transport::kRdmaUd:
      return v1::TRANSPORT_RDMA_UD;
    case Transport::kRdmaRc:
      return v1::TRANSPORT_RDMA_RC;
    case Transport::kCollective:
      return v1::TRANSPORT_COLLECTIVE;
  }
  return v1::TRANSPORT_UNSPECIFIED;
}

// An RDMA UD peer's route: the local device in src_nic, the peer's port in dst_nic and `rdma`.
void RdmaToWire(const RdmaRoute& r, v1::PlannedPeer& pp) {
  pp.set_src_nic(r.src_device);
  pp.set_dst_nic(r.dst.device);
  v1::RdmaEndpoint* e = pp.mutable_rdma();
  e->set_device(r.dst.device);
  e->set_port(r.dst.port);
  e->set_link_layer(r.dst.link_layer);
  e->set_lid(r.dst.lid);
  e->set_gid(r.dst.gid);
  e->set_gid_index(r.dst.gid_index);
  e->set_qpn(r.dst.qpn);
  e->set_qkey(r.dst.qkey);
  e->set_timestamps(r.dst.timestamps);
}

}  // namespace

void BurstToWire(const PlannedBurst& b, v1::BurstRequest& out) {
  out.set_node(b.node);
  out.set_address(b.address);
  out.set_port(b.port);
  out.set_bytes(b.bytes);
  out.set_round(b.round);
  out.set_timeout_s(b.timeout_s);
}

namespace {

// Deterministic serialization, so equal messages hash equal.
std::string Deterministic(const v1::ProbePlan& p) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream sos(&out);
    google::protobuf::io::CodedOutputStream cos(&sos);
    cos.SetSerializationDeterministic(true);
    p.SerializeToCodedStream(&cos);
  }
  return out;
}

}  // namespace

PlanBook::PlanBook(PlannerConfig config, std::shared_ptr<const FabricMap> map, const Clock& clock,
                   metrics::Registry& registry)
    : clock_(clock),
      trace_refresh_s_(config.trace_refresh_s),
      probe_timeout_floor_ms_(config.probe_timeout_floor_ms),
      planner_(std::move(config), std::move(map)),
      replan_seconds_(registry
                          .AddGauge("fabricwatch_planner_replan_seconds",
                                    "Time the last re-plan took: planning every agent's peers, "
                                    "encoding the plans and updating the plan table.")
                          .WithLabels({})),
      replans_(registry
                   .AddCounter("fabricwatch_planner_replans_total",
                               "Probe plans recomputed after agents joined or left.")
                   .WithLabels({})),
      plans_sent_(registry
                      .AddCounter("fabricwatch_planner_plans_pushed_total",
                                  "Probe plans pushed to connected agents after a re-plan changed "
                                  "them (plans sent on connect not included).")
                      .WithLabels({})) {}

Status PlanBook::Start(const std::string& state_dir) {
  auto versions = PlanVersions::Start(state_dir, clock_.WallNanos());
  if (!versions.ok()) return versions.status();
  MutexLock lock(plan_mu_);
  versions_.emplace(std::move(*versions));
  return Status::Ok();
}

std::optional<QuarantinedFile> PlanBook::quarantined() const {
  MutexLock lock(plan_mu_);
  return versions_ ? versions_->quarantined() : std::nullopt;
}

void PlanBook::NoteMembershipChange() {
  last_membership_ns_.store(clock_.MonotonicNanos(), std::memory_order_relaxed);
  membership_changed_ = true;
  replan_needed_ = true;
}

void PlanBook::AddOverlayNodes(const PlanOverlay& o, std::unordered_set<std::string>& out) {
  out.insert(o.nodes.begin(), o.nodes.end());
  for (const OverlayBurst& b : o.bursts) {
    out.insert(b.src);
    out.insert(b.dst);
  }
}

void PlanBook::SetOverlay(PlanOverlay overlay) {
  {
    MutexLock lock(overlay_mu_);
    std::unordered_set<std::string>& nodes = overlay_nodes_[overlay.id];
    // The overlay it replaces changes its nodes' plans too.
    overlay_touched_.insert(nodes.begin(), nodes.end());
    nodes.clear();
    AddOverlayNodes(overlay, nodes);
    overlay_touched_.insert(nodes.begin(), nodes.end());
    planner_.SetOverlay(std::move(overlay));
  }
  replan_needed_ = true;
}

void PlanBook::ClearOverlay(const std::string& id) {
  {
    MutexLock lock(overlay_mu_);
    if (auto it = overlay_nodes_.find(id); it != overlay_nodes_.end()) {
      overlay_touched_.insert(it->second.begin(), it->second.end());
      overlay_nodes_.erase(it);
    }
    planner_.ClearOverlay(id);
  }
  replan_needed_ = true;
}

bool PlanBook::MaybeReplan(int64_t now,
                           const std::function<std::vector<AgentInfo>()>& live_agents) {
  if (first_pending_ns_ == 0 && replan_needed_) first_pending_ns_ = now;
  const bool settled =
      now - last_membership_ns_.load(std::memory_order_relaxed) >= kReplanSettleNs ||
      (first_pending_ns_ != 0 && now - first_pending_ns_ >= kReplanMaxDelayNs);
  // Only overlays changed since a full re-plan: a partial one, spaced by its own (small) cost.
  const bool full = membership_changed_ || !probers_;
  const int64_t spacing = full ? replan_spacing_ns_ : partial_spacing_ns_;
  if (!settled || now - last_replan_ns_ < spacing || !replan_needed_.exchange(false)) {
    return false;
  }
  first_pending_ns_ = 0;
  last_replan_ns_ = now;
  std::unordered_set<std::string> touched;
  {
    // Taken together with the overlays the planner will read: a change after this re-plans again.
    MutexLock lock(overlay_mu_);
    touched.swap(overlay_touched_);
  }
  // No malloc_trim after it: plans are streamed, so a re-plan frees a few MB, and a trim walks
  // every free chunk of a 1.6 GB heap with the arena locked (seconds at 16,000 agents).
  if (membership_changed_.exchange(false) || !probers_) {
    Replan(live_agents(), nullptr);
  } else {
    Replan(live_agents(), &touched);
  }
  const int64_t cost = clock_.MonotonicNanos() - now;
  replan_seconds_.Set(static_cast<double>(cost) / 1e9);
  (full ? replan_spacing_ns_ : partial_spacing_ns_) =
      std::clamp<int64_t>(5 * cost, full ? 1'000'000'000 : kPartialSpacingNs, 30'000'000'000);
  return true;
}

void PlanBook::Replan(const std::vector<AgentInfo>& live,
                      const std::unordered_set<std::string>* only) {
  uint64_t version = 0;
  {
    MutexLock lock(plan_mu_);
    // Unique across restarts: agents ignore a plan whose version is not newer than theirs.
    version = plan_version_ = versions_->Next(clock_.WallNanos());
  }
  // Each plan is encoded as the planner finishes it and replaces the node's body in place, so the
  // re-plan holds one leaf's plans at a time rather than the fleet's (1.5 million peers, ~300 MB,
  // at 16,000 agents on 16 spines). A changed body is published (with a new version) only in the
  // second pass below, once the allow lists are known; meanwhile readers get the node's old
  // version number (which its agent already has or will replace), never a missing plan.
  //
  // A partial re-plan (`only`) replaces its nodes' entries in the kept prober index: the allow
  // lists that can change are those of the nodes that their old and new plans do not both name, or
  // that either names when the node's own addresses changed (a node's list depends on who names it
  // and on its probers' addresses, which only their own plans add to; ProberIndex::ReplacePlans).
  if (!only) probers_ = std::make_unique<ProberIndex>(live);
  ProberIndex& probers = *probers_;
  std::unordered_set<std::string> body_changed;
  std::unordered_set<std::string> lists_to_check;
  std::string bytes;
  size_t planned = 0;
  const auto summary = planner_.PlanEach(live, [&](const std::string& node, Plan&& plan) {
    ++planned;
    // The burst's receiver must admit this node's bursts like its probes.
    std::vector<PlannedPeer> receivers(plan.bursts.size());
    for (size_t i = 0; i < plan.bursts.size(); ++i) receivers[i].node = plan.bursts[i].node;
    if (only) {
      for (std::string& named : probers.ReplacePlans(node, plan.peers, receivers)) {
        lists_to_check.insert(std::move(named));
      }
      lists_to_check.insert(node);
    } else {
      probers.AddPlan(node, plan.peers);
      probers.AddPlan(node, receivers);
    }
    v1::ProbePlan p;
    p.mutable_budget()->set_packets_per_s(plan.budget.pps);
    p.mutable_budget()->set_bytes_per_s(plan.budget.bytes_per_s);
    p.set_latency_interval_s(1.0);
    p.set_bandwidth_interval_s(plan.bw_interval_s);
    p.set_bandwidth_bytes(plan.bw_burst_bytes);
    p.set_rdma_rc_interval_s(plan.bw_interval_s);
    p.set_rdma_rc_bytes(plan.bw_burst_bytes);
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
      if (peer.rdma) {
        RdmaToWire(*peer.rdma, *pp);
      } else {
        // Which fabric NIC probes, and which it probes (docs/probes.md, "Every fabric NIC").
        if (!peer.src_nic.empty()) pp->set_src_nic(peer.src_nic);
        if (!peer.dst_nic.empty()) pp->set_dst_nic(peer.dst_nic);
      }
      if (peer.rdma_rc_round != 0) pp->set_rdma_rc_round(peer.rdma_rc_round);
      if (peer.timeout_ms != 0 && !peer.rdma) pp->set_timeout_ms(peer.timeout_ms);
      if (!peer.raised_flows.empty() && !peer.rdma) {
        for (uint32_t f : peer.raised_flows) pp->add_raised_flows(f);
        pp->set_unraised_rate_pps(peer.unraised_rate_pps);
      }
    }
    for (const TraceRequest& r : plan.trace_requests) {
      v1::TraceRequest* t = p.add_trace_requests();
      t->set_peer(r.peer);
      t->set_src_port(r.src_port);
      t->set_id(r.id);
    }
    p.set_trace_refresh_s(trace_refresh_s_);
    if (probe_timeout_floor_ms_ != 0) p.set_probe_timeout_floor_ms(probe_timeout_floor_ms_);
    p.set_report_interval_ms(ReportIntervalMs(live.size()));
    for (const PlannedBurst& b : plan.bursts) BurstToWire(b, *p.add_bursts());
    plan = {};
    bytes = Deterministic(p);
    const uint64_t hash = std::hash<std::string>{}(bytes);
    MutexLock lock(plan_mu_);
    StoredPlan& slot = plans_[node];
    if (!only) slot.replan = version;
    if (slot.body && slot.content_hash == hash) return;
    slot.content_hash = hash;
    slot.body = std::make_shared<const std::string>(std::move(bytes));
    body_changed.insert(node);
  }, only);
  // Second pass: each node's allow list; a node whose body or list changed gets this version. A
  // partial re-plan looks only at the lists that can have changed, of nodes that have a plan.
  std::vector<std::string> changed;
  auto finish = [&](const std::string& node) {
    v1::ProbePlan list;
    for (std::string& addr : probers.AllowedFor(node)) list.add_allowed_probers(std::move(addr));
    std::string allowed = Deterministic(list);
    const uint64_t hash = std::hash<std::string>{}(allowed);
    MutexLock lock(plan_mu_);
    auto it = plans_.find(node);
    if (it == plans_.end() || (!only && it->second.replan != version)) return;
    StoredPlan& slot = it->second;
    if (slot.version != 0 && !body_changed.contains(node) && slot.allowed &&
        slot.allowed_hash == hash) {
      return;
    }
    slot.allowed_hash = hash;
    slot.allowed = std::make_shared<const std::string>(std::move(allowed));
    slot.version = version;
    changed.push_back(node);
  };
  if (only) {
    lists_to_check.insert(body_changed.begin(), body_changed.end());
    for (const std::string& node : lists_to_check) finish(node);
  } else {
    for (const AgentInfo& a : live) finish(a.node);
  }
  for (const std::string& note : summary.notes) spdlog::warn("msg=\"planner\" note=\"{}\"", note);
  if (!only) {
    base_pps_.store(summary.base_pps, std::memory_order_relaxed);
    // Nodes the new plan set does not name (gone, or down) lose their plans.
    MutexLock lock(plan_mu_);
    std::erase_if(plans_, [&](const auto& kv) { return kv.second.replan != version; });
  }
  last_replan_nodes_ = planned;
  replans_.Inc();
  spdlog::info(
      "msg=\"probe plans updated\" agents={} planned={} leaf_pairs_covered={} plans_changed={}",
      live.size(), planned, summary.leaf_pairs_covered, changed.size());
  // Sent by PushPending(), a bounded number per tick. A node that reconnects meanwhile gets its
  // current plan with its Ack anyway.
  for (std::string& node : changed) pending_pushes_.insert(std::move(node));
}

void PlanBook::PushPending(const Push& push) {
  if (!push || pending_pushes_.empty()) return;
  // One pass over the sessions picks up to kPlanPushesPerTick pending nodes that are connected.
  std::unordered_set<std::string> batch;
  for (auto it = pending_pushes_.begin();
       it != pending_pushes_.end() && batch.size() < kPlanPushesPerTick;) {
    batch.insert(pending_pushes_.extract(it++).value());
  }
  uint64_t pushed = 0;
  push([&](const std::string& node) {
    const bool want = batch.contains(node);
    pushed += want;
    return want;
  });
  plans_sent_.Inc(static_cast<double>(pushed));
}

std::optional<v1::ProbePlan> PlanBook::PlanFor(const std::string& node) const {
  std::shared_ptr<const std::string> body, allowed;
  uint64_t version = 0;
  {
    MutexLock lock(plan_mu_);
    auto it = plans_.find(node);
    if (it == plans_.end() || it->second.version == 0) return std::nullopt;
    body = it->second.body;
    allowed = it->second.allowed;
    version = it->second.version;
  }
  v1::ProbePlan plan;
  // Cannot fail: we serialized both. Parsing the list merges its repeated field into the plan.
  if (!plan.ParseFromString(*body) || !plan.MergeFromString(*allowed)) return std::nullopt;
  plan.set_version(version);
  return plan;
}

}  // namespace fw::aggregator
