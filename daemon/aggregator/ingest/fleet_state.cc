// Agent sessions, liveness and ingest accounting.
#include "daemon/aggregator/ingest/fleet_state.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>

#include "exporter/registry.h"

namespace fw::aggregator {

namespace v1 = fabricwatch::v1;

namespace {

// Keeps at most `max` devices (GPUs first, then NICs) of an inventory; counts and logs the rest.
void TrimInventory(v1::Inventory& inv, size_t max, const std::string& node,
                   metrics::Counter& refused) {
  const size_t gpus = static_cast<size_t>(inv.gpus_size());
  const size_t nics = static_cast<size_t>(inv.nics_size());
  if (gpus + nics <= max) return;
  const size_t keep_gpus = std::min(gpus, max);
  const size_t keep_nics = max - keep_gpus;
  if (gpus > keep_gpus) {
    inv.mutable_gpus()->DeleteSubrange(static_cast<int>(keep_gpus),
                                       static_cast<int>(gpus - keep_gpus));
  }
  if (nics > keep_nics) {
    inv.mutable_nics()->DeleteSubrange(static_cast<int>(keep_nics),
                                       static_cast<int>(nics - keep_nics));
  }
  refused.Inc(static_cast<double>(gpus + nics - max));
  spdlog::warn(
      "msg=\"inventory trimmed: more devices than --max-devices-per-node\" node={} devices={} "
      "kept={}",
      node, gpus + nics, max);
}

}  // namespace

const char* TransportName(v1::Transport t) {
  switch (t) {
    case v1::TRANSPORT_UDP:
      return "udp";
    case v1::TRANSPORT_TCP_CONNECT:
      return "tcp_connect";
    case v1::TRANSPORT_TCP_BW:
      return "tcp_bw";
    case v1::TRANSPORT_RDMA_UD:
      return "rdma_ud";
    case v1::TRANSPORT_RDMA_RC:
      return "rdma_rc";
    case v1::TRANSPORT_COLLECTIVE:
      return "collective";
    default:
      return "unknown";
  }
}

FleetState::FleetState(const Clock& clock, metrics::Registry& registry, Options options)
    : clock_(clock),
      options_(options),
      agents_connected_(
          registry.AddGauge("fabricwatch_agents_connected", "Agents with a live session.")
              .WithLabels({})),
      agent_up_(registry.AddGauge("fabricwatch_agent_up",
                                  "1 while the agent's session is live and it reports within the "
                                  "heartbeat timeout, else 0.",
                                  {"node"})),
      agent_age_(registry.AddGauge("fabricwatch_agent_last_report_age_seconds",
                                   "Seconds since the agent's last message.", {"node"})),
      batches_total_(registry
                         .AddCounter("fabricwatch_ingest_batches_total",
                                     "Probe batches stored (duplicates excluded).")
                         .WithLabels({})),
      duplicate_batches_(registry
                             .AddCounter("fabricwatch_ingest_duplicate_batches_total",
                                         "Probe batches received again after a reconnect and "
                                         "dropped as duplicates.")
                             .WithLabels({})),
      gap_batches_(
          registry
              .AddCounter("fabricwatch_ingest_gap_batches_total",
                          "Probe batches an agent never delivered (its buffer overflowed).")
              .WithLabels({})),
      heartbeats_(registry.AddCounter("fabricwatch_ingest_heartbeats_total", "Heartbeats received.")
                      .WithLabels({})),
      disconnects_(registry
                       .AddCounter("fabricwatch_agent_disconnects_total",
                                   "Agent sessions that ended or timed out.")
                       .WithLabels({})),
      ingest_lag_(registry
                      .AddGauge("fabricwatch_ingest_lag_seconds",
                                "How late the aggregator reads agents' heartbeats: the 90th "
                                "percentile over live agents of their latest heartbeat's age when "
                                "read. The heartbeat timeout stretches by this much.")
                      .WithLabels({})),
      timeouts_deferred_(registry
                             .AddGauge("fabricwatch_heartbeat_timeouts_deferred",
                                       "Agents silent past the heartbeat timeout but kept up, "
                                       "because so many fell silent at once that the aggregator "
                                       "is more likely behind than they are dead.")
                             .WithLabels({})),
      mass_timeouts_(registry
                         .AddCounter("fabricwatch_heartbeat_mass_timeouts_total",
                                     "Episodes of deferred mass heartbeat timeouts.")
                         .WithLabels({})),
      takeovers_(registry
                     .AddCounter("fabricwatch_ingest_session_takeovers_total",
                                 "Agent streams ended because a newer session for the same node "
                                 "said Hello (one live session per node).")
                     .WithLabels({})),
      superseded_batches_(registry
                              .AddCounter("fabricwatch_ingest_superseded_batches_total",
                                          "Probe batches refused (not stored, not acked) because "
                                          "they arrived on a stream another session replaced.")
                              .WithLabels({})),
      refused_(registry.AddCounter("fabricwatch_ingest_refused_total",
                                   "Messages or parts refused by a bound on client state, by "
                                   "reason (docs/durability.md).",
                                   {"reason"})),
      nodes_retired_(registry
                         .AddCounter("fabricwatch_agents_retired_total",
                                     "Departed nodes forgotten with their series after "
                                     "--node-retire-after without a live stream.")
                         .WithLabels({})) {
  for (const char* r :
       {"node_limit", "inventory_devices", "report_findings", "superseded_batch", "plans_merged"}) {
    refused_.WithLabels({r});
  }
  auto& results = registry.AddCounter("fabricwatch_probe_results_received_total",
                                      "Probe results received, by transport.", {"transport"});
  for (int t = 0; t < 7; ++t) {
    results_by_transport_[t] = &results.WithLabels({TransportName(static_cast<v1::Transport>(t))});
  }
  registry.AddBeforeRender([this] {
    MutexLock lock(mu_);
    int64_t now = clock_.MonotonicNanos();
    for (auto& [name, n] : nodes_) {
      n.age_gauge->Set(static_cast<double>(now - n.last_seen_mono_ns) * 1e-9);
    }
  });
}

metrics::Counter& FleetState::Refused(const char* reason) { return refused_.WithLabels({reason}); }

FleetState::Node& FleetState::GetLocked(const std::string& name) {
  if (Node* found = FindLocked(name)) return *found;
  auto [it, added] = nodes_.try_emplace(name);
  Node& n = it->second;
  by_name_.emplace(it->first, &n);
  n.view.name = name;
  n.view.health = "unknown";
  n.up_gauge = &agent_up_.WithLabels({name});
  n.age_gauge = &agent_age_.WithLabels({name});
  n.last_seen_mono_ns = clock_.MonotonicNanos();
  return n;
}

void FleetState::Touch(Node& n) {
  n.last_seen_mono_ns = clock_.MonotonicNanos();
  n.view.last_seen_wall_ns = clock_.WallNanos();
  if (!n.view.up && n.view.connected) SetLiveLocked(n, true, true);
}

void FleetState::SetLiveLocked(Node& n, bool connected, bool up) {
  bool was = n.view.connected && n.view.up;
  n.view.connected = connected;
  n.view.up = up;
  bool is = connected && up;
  n.up_gauge->Set(is ? 1 : 0);
  if (was != is) {
    live_count_ = is ? live_count_ + 1 : live_count_ - 1;
    agents_connected_.Set(static_cast<double>(live_count_));
  }
}

uint64_t FleetState::OnHello(uint64_t conn_id, const v1::Hello& hello) {
  return Admit(conn_id, hello).ack;
}

HelloResult FleetState::Admit(uint64_t conn_id, const v1::Hello& hello) {
  HelloResult r;
  uint64_t old_session = 0, new_session = hello.session_id();
  bool resumed = false;
  // Built outside the lock; under it the node only takes the pointers.
  auto inventory = std::make_shared<v1::Inventory>(hello.inventory());
  TrimInventory(*inventory, options_.max_devices_per_node, hello.node(),
                refused_.WithLabels({"inventory_devices"}));
  auto endpoints = std::make_shared<const std::vector<v1::ProbeEndpoint>>(hello.endpoints().begin(),
                                                                          hello.endpoints().end());
  {
    MutexLock lock(mu_);
    if (FindLocked(hello.node()) == nullptr && nodes_.size() >= options_.max_nodes) {
      r.admitted = false;
      refused_.WithLabels({"node_limit"}).Inc();
    } else {
      Node& n = GetLocked(hello.node());
      if (n.view.connected && n.conn_id != 0 && n.conn_id != conn_id) {
        r.replaced_conn = n.conn_id;
        takeovers_.Inc();
      }
      n.conn_id = conn_id;
      SetLiveLocked(n, true, n.view.up);
      n.view.version = hello.version();
      n.view.collective = hello.collective();
      n.inventory = std::move(inventory);
      n.endpoints = std::move(endpoints);
      NodeIngest& in = n.view.ingest;
      if (in.session_id != new_session) {
        // Another sequence space: a restarted agent (a new random session id), or a second agent
        // under the same name. The current space is kept among the recent ones, and a space seen
        // before is resumed where it stopped.
        old_session = in.session_id;
        if (in.session_id != 0 || in.last_seq != 0) {
          in.recent.emplace_back(in.session_id, in.last_seq);
        }
        in.session_id = new_session;
        in.last_seq = 0;
        for (auto it = in.recent.begin(); it != in.recent.end(); ++it) {
          if (it->first == new_session) {
            in.last_seq = it->second;
            in.recent.erase(it);
            resumed = true;
            break;
          }
        }
        while (in.recent.size() > kRecentSessions) in.recent.erase(in.recent.begin());
        MarkDirtyLocked(n);
      }
      r.ack = in.last_seq;
      Touch(n);
    }
  }
  if (!r.admitted) {
    spdlog::warn("msg=\"session refused: node limit reached\" node=\"{}\" max_nodes={}",
                 hello.node().substr(0, 64), options_.max_nodes);
    return r;
  }
  if (r.replaced_conn != 0) {
    spdlog::warn(
        "msg=\"session takeover: a newer session for this node ends the open one\" node={} "
        "old_conn={} new_conn={} old_session={:016x} new_session={:016x} resumed={}",
        hello.node(), r.replaced_conn, conn_id, old_session, new_session, resumed);
  }
  NotifyMembership();
  return r;
}

BatchVerdict FleetState::OnProbeBatch(const std::string& node, const v1::ProbeBatch& batch,
                                      uint64_t* ack) {
  return OnProbeBatch(node, 0, batch, ack);
}

BatchVerdict FleetState::OnProbeBatch(const std::string& node, uint64_t conn_id,
                                      const v1::ProbeBatch& batch, uint64_t* ack) {
  MutexLock lock(mu_);
  Node* found = FindLocked(node);
  if (conn_id != 0 && (found == nullptr || found->conn_id != conn_id)) {
    // This stream lost the node to a newer session (or the node was retired): its sequence space
    // is no longer the node's current one, so nothing from it is stored or acked.
    superseded_batches_.Inc();
    refused_.WithLabels({"superseded_batch"}).Inc();
    *ack = 0;
    return BatchVerdict::kSuperseded;
  }
  Node& n = found != nullptr ? *found : GetLocked(node);
  Touch(n);
  MarkDirtyLocked(n);
  NodeIngest& in = n.view.ingest;
  if (batch.seq() <= in.last_seq) {
    ++in.duplicates;
    duplicate_batches_.Inc();
    *ack = in.last_seq;
    return BatchVerdict::kDuplicate;
  }
  BatchVerdict verdict = BatchVerdict::kAccepted;
  if (batch.seq() != in.last_seq + 1) {
    uint64_t missing = batch.seq() - in.last_seq - 1;
    in.gaps += missing;
    gap_batches_.Inc(static_cast<double>(missing));
    verdict = BatchVerdict::kGap;
  }
  in.last_seq = batch.seq();
  ++in.batches;
  // Results in either encoding count as received; whether they are valid is the decoder's call.
  const v1::ProbeColumns& cols = batch.columns();
  in.results +=
      static_cast<uint64_t>(batch.results_size()) + static_cast<uint64_t>(cols.peer_size());
  batches_total_.Inc();
  std::array<uint64_t, 7> by_transport{};
  auto count = [&](int t) { ++by_transport[t < 0 || t >= 7 ? 0 : t]; };
  for (const auto& r : batch.results()) count(r.transport());
  if (cols.transport_size() == cols.peer_size()) {
    for (int t : cols.transport()) count(t);
  } else {
    by_transport[0] += static_cast<uint64_t>(cols.peer_size());  // malformed: transport unknown
  }
  for (size_t t = 0; t < by_transport.size(); ++t) {
    if (by_transport[t] > 0) results_by_transport_[t]->Inc(static_cast<double>(by_transport[t]));
  }
  if (batch.test_id() != 0 && options_.record_test_batches) {
    ++in.test_batches;
    in.test_ids.insert(batch.test_id());
  }
  *ack = in.last_seq;
  return verdict;
}

void FleetState::OnHeartbeat(const std::string& node, int64_t sent_unix_ns) {
  MutexLock lock(mu_);
  heartbeats_.Inc();
  Node& n = GetLocked(node);
  Touch(n);
  if (sent_unix_ns > 0) {
    // A clock ahead of ours reads as no lag; one far behind is capped, and one agent's clock
    // cannot move the fleet's 90th percentile.
    const double lag = static_cast<double>(n.view.last_seen_wall_ns - sent_unix_ns) * 1e-9;
    n.heartbeat_lag_s = std::clamp(lag, 0.0, 3600.0);
  }
}

void FleetState::OnCheckReport(const std::string& node, const v1::CheckReport& report) {
  // Parsed outside the lock; a report without a usable document keeps the last known locality.
  StatusOr<NodeLocality> locality = LocalityFromCheckJson(report.json());
  std::shared_ptr<const NodeLocality> shared;
  if (locality.ok()) shared = std::make_shared<const NodeLocality>(std::move(*locality));
  MutexLock lock(mu_);
  Node& n = GetLocked(node);
  Touch(n);
  static const char* kHealth[] = {"ok", "warning", "critical", "unknown"};
  int code = report.exit_code();
  n.view.health = kHealth[(code >= 0 && code <= 3) ? code : 3];
  if (shared) n.locality = std::move(shared);
}

void FleetState::OnCounterBatch(const std::string& node, const v1::CounterBatch&) {
  MutexLock lock(mu_);
  Touch(GetLocked(node));
}

size_t FleetState::BoundCounterBatch(const std::string& node, v1::CounterBatch* batch) {
  size_t dropped = 0;
  bool log = false;
  {
    MutexLock lock(mu_);
    Node* found = FindLocked(node);
    if (found == nullptr) return 0;
    auto& keys = found->port_keys;
    auto* ports = batch->mutable_ports();
    int out = 0;
    for (int i = 0; i < ports->size(); ++i) {
      const v1::PortSample& p = ports->Get(i);
      std::pair<std::string, uint32_t> key(p.device(), p.port());
      bool known = keys.count(key) > 0;
      if (!known && keys.size() >= options_.max_devices_per_node) {
        ++dropped;
        continue;
      }
      if (!known) keys.insert(std::move(key));
      if (out != i) ports->SwapElements(out, i);
      ++out;
    }
    if (out < ports->size()) ports->DeleteSubrange(out, ports->size() - out);
    if (dropped > 0) {
      refused_.WithLabels({"inventory_devices"}).Inc(static_cast<double>(dropped));
      log = !std::exchange(found->port_limit_logged, true);
    }
  }
  if (log) {
    spdlog::warn(
        "msg=\"counter samples dropped: the node names more ports than --max-devices-per-node\" "
        "node={} dropped={} max={}",
        node, dropped, options_.max_devices_per_node);
  }
  return dropped;
}

void FleetState::OnDisconnect(const std::string& node, uint64_t conn_id) {
  {
    MutexLock lock(mu_);
    Node* found = FindLocked(node);
    if (found == nullptr || found->conn_id != conn_id) return;  // a newer stream took over
    Node& n = *found;
    if (!n.view.connected) return;
    SetLiveLocked(n, false, false);
    disconnects_.Inc();
  }
  spdlog::info("msg=\"agent disconnected\" node={}", node);
  NotifyMembership();
}

void FleetState::Sweep() {
  std::vector<std::pair<std::string, double>> timed_out;
  std::vector<std::string> retired;
  size_t deferred = 0, silent_count = 0, live = 0;
  bool new_episode = false;
  double lag = 0;
  {
    MutexLock lock(mu_);
    const int64_t now = clock_.MonotonicNanos();
    const double grace_max = std::max(0.0, options_.heartbeat_grace_max_s);
    live = live_count_;
    // The ingest lag: how late the aggregator is reading heartbeats, robust to a few agents with
    // wrong clocks.
    std::vector<double> lags;
    lags.reserve(live);
    for (const auto& [name, n] : nodes_) {
      if (n.view.connected && n.view.up) lags.push_back(n.heartbeat_lag_s);
    }
    if (!lags.empty()) {
      const size_t k = std::min(lags.size() - 1, lags.size() * 9 / 10);
      std::nth_element(lags.begin(), lags.begin() + static_cast<ptrdiff_t>(k), lags.end());
      lag = std::min(lags[k], grace_max);
      data_lag_s_ = lags[k];
    }
    ingest_lag_s_ = lag;
    retired = RetireLocked(now);
    const auto timeout = static_cast<int64_t>(options_.heartbeat_timeout_s * 1e9);
    const int64_t soft = timeout + static_cast<int64_t>(lag * 1e9);
    const int64_t hard = timeout + static_cast<int64_t>(grace_max * 1e9);
    std::vector<std::pair<const std::string*, Node*>> silent;
    for (auto& [name, n] : nodes_) {
      n.view.last_report_age_s = static_cast<double>(now - n.last_seen_mono_ns) * 1e-9;
      if (n.view.up && now - n.last_seen_mono_ns > soft) silent.emplace_back(&name, &n);
    }
    silent_count = silent.size();
    const bool mass = silent.size() >= std::max<size_t>(options_.mass_timeout_min, 1) &&
                      static_cast<double>(silent.size()) >=
                          options_.mass_timeout_fraction * static_cast<double>(live);
    for (auto& [name, n] : silent) {
      if (mass && n->view.connected && now - n->last_seen_mono_ns <= hard) {
        ++deferred;
        continue;
      }
      SetLiveLocked(*n, n->view.connected, false);
      disconnects_.Inc();
      timed_out.emplace_back(*name, n->view.last_report_age_s);
    }
    if (deferred > 0 && !mass_deferring_) {
      mass_timeouts_.Inc();
      new_episode = true;
    }
    mass_deferring_ = deferred > 0;
    timeouts_deferred_.Set(static_cast<double>(deferred));
    ingest_lag_.Set(lag);
  }
  if (new_episode) {
    spdlog::warn(
        "msg=\"mass heartbeat timeout deferred: the aggregator is more likely behind than these "
        "agents dead\" silent={} live={} ingest_lag_s={:.1f} max_wait_s={:.0f}",
        silent_count, live, lag, options_.heartbeat_timeout_s + options_.heartbeat_grace_max_s);
  }
  // Logged outside the lock, and bounded: a fleet-wide outage must not stall ingest on logging.
  constexpr size_t kMaxLogged = 20;
  for (size_t i = 0; i < timed_out.size() && i < kMaxLogged; ++i) {
    spdlog::warn("msg=\"agent heartbeat timeout\" node={} silent_s={:.1f} ingest_lag_s={:.1f}",
                 timed_out[i].first, timed_out[i].second, lag);
  }
  if (timed_out.size() > kMaxLogged) {
    spdlog::warn("msg=\"agent heartbeat timeouts\" more={}", timed_out.size() - kMaxLogged);
  }
  for (size_t i = 0; i < retired.size() && i < kMaxLogged; ++i) {
    spdlog::info("msg=\"departed node retired: its series are removed\" node={} after_s={:.0f}",
                 retired[i], options_.retire_after_s);
  }
  if (retired.size() > kMaxLogged) {
    spdlog::info("msg=\"departed nodes retired\" more={}", retired.size() - kMaxLogged);
  }
  if (!timed_out.empty() || !retired.empty()) NotifyMembership();
}

std::vector<std::string> FleetState::RetireLocked(int64_t now) {
  std::vector<std::string> out;
  if (options_.retire_after_s <= 0) return out;
  const auto after = static_cast<int64_t>(options_.retire_after_s * 1e9);
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    Node& n = it->second;
    if (n.view.connected || now - n.last_seen_mono_ns <= after) {
      ++it;
      continue;
    }
    // Gone for good as far as the fleet view goes: its agent_up series disappears (so an
    // agent_up == 0 alert resolves) and so does its record. Should it come back, it is new.
    if (n.view.up) SetLiveLocked(n, false, false);
    agent_up_.Remove({it->first});
    agent_age_.Remove({it->first});
    if (n.dirty) {
      dirty_nodes_.erase(std::find(dirty_nodes_.begin(), dirty_nodes_.end(), &n));
    }
    MarkRetiredLocked(it->first);
    out.push_back(it->first);
    nodes_retired_.Inc();
    by_name_.erase(it->first);
    it = nodes_.erase(it);
  }
  return out;
}

IngestRecord FleetState::RecordOfLocked(const Node& n) const {
  IngestRecord r;
  r.node = n.view.name;
  const NodeIngest& in = n.view.ingest;
  r.session_id = in.session_id;
  r.last_seq = in.last_seq;
  r.batches = in.batches;
  r.results = in.results;
  r.duplicates = in.duplicates;
  r.gaps = in.gaps;
  r.recent = in.recent;
  r.test_batches = in.test_batches;
  r.test_ids.assign(in.test_ids.begin(), in.test_ids.end());
  return r;
}

std::vector<IngestRecord> FleetState::TakeDirtyRecords() {
  MutexLock lock(mu_);
  std::vector<IngestRecord> out;
  out.reserve(dirty_nodes_.size() + dirty_retired_.size());
  // One record per name: a retired name whose node exists again gives that node's record.
  std::set<std::string_view> retired_seen;
  for (const std::string& name : dirty_retired_) {
    if (!retired_seen.insert(name).second) continue;
    if (Node* n = FindLocked(name)) {
      out.push_back(RecordOfLocked(*n));
      n->dirty = false;
      continue;
    }
    IngestRecord r;
    r.node = name;
    r.retired = true;
    out.push_back(std::move(r));
  }
  for (Node* n : dirty_nodes_) {
    if (!n->dirty) continue;  // taken above under its name
    out.push_back(RecordOfLocked(*n));
    n->dirty = false;
  }
  dirty_nodes_.clear();
  dirty_retired_.clear();
  return out;
}

void FleetState::ImportRecords(const std::vector<IngestRecord>& records) {
  MutexLock lock(mu_);
  for (const IngestRecord& r : records) {
    if (r.retired) continue;
    NodeIngest& in = GetLocked(r.node).view.ingest;
    in.session_id = r.session_id;
    in.last_seq = r.last_seq;
    in.batches = r.batches;
    in.results = r.results;
    in.duplicates = r.duplicates;
    in.gaps = r.gaps;
    in.recent = r.recent;
    in.test_batches = r.test_batches;
    in.test_ids = std::set<uint64_t>(r.test_ids.begin(), r.test_ids.end());
  }
}

void FleetState::RequeueDirty(const std::vector<IngestRecord>& records) {
  MutexLock lock(mu_);
  for (const IngestRecord& r : records) {
    if (Node* n = FindLocked(r.node)) {
      MarkDirtyLocked(*n);
    } else {
      MarkRetiredLocked(r.node);
    }
  }
}

size_t FleetState::size() const {
  MutexLock lock(mu_);
  return nodes_.size();
}

double FleetState::ingest_lag_s() const {
  MutexLock lock(mu_);
  return ingest_lag_s_;
}

double FleetState::data_lag_s() const {
  MutexLock lock(mu_);
  return data_lag_s_;
}

std::vector<NodeView> FleetState::Nodes(const std::string& only) const {
  struct Shared {
    std::shared_ptr<const v1::Inventory> inventory;
    std::shared_ptr<const NodeLocality> locality;
    std::shared_ptr<const std::vector<v1::ProbeEndpoint>> endpoints;
  };
  std::vector<NodeView> out;
  std::vector<Shared> shared;
  {
    MutexLock lock(mu_);
    const int64_t now = clock_.MonotonicNanos();
    auto take = [&](const Node& n) FW_REQUIRES(mu_) {
      out.push_back(n.view);
      out.back().last_report_age_s = static_cast<double>(now - n.last_seen_mono_ns) * 1e-9;
      shared.push_back({n.inventory, n.locality, n.endpoints});
    };
    if (!only.empty()) {
      if (const Node* n = FindLocked(only)) take(*n);
    } else {
      out.reserve(nodes_.size());
      shared.reserve(nodes_.size());
      for (const auto& [name, n] : nodes_) take(n);
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (shared[i].inventory) out[i].inventory = *shared[i].inventory;
    if (shared[i].locality) out[i].locality = *shared[i].locality;
    if (shared[i].endpoints) out[i].endpoints = *shared[i].endpoints;
  }
  return out;
}

std::vector<std::string> FleetState::LiveNodes() const {
  MutexLock lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, n] : nodes_) {
    if (n.view.connected && n.view.up) out.push_back(name);
  }
  return out;
}

size_t FleetState::connected() const {
  MutexLock lock(mu_);
  return live_count_;
}

void FleetState::NotifyMembership() {
  std::function<void()> listener;
  {
    MutexLock lock(mu_);
    listener = listener_;
  }
  if (listener) listener();
}

std::string FleetState::ExportIngestJson() const {
  MutexLock lock(mu_);
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, n] : nodes_) {
    const NodeIngest& in = n.view.ingest;
    j[name] = {{"session_id", in.session_id},
               {"last_seq", in.last_seq},
               {"batches", in.batches},
               {"results", in.results},
               {"duplicates", in.duplicates},
               {"gaps", in.gaps},
               {"test_batches", in.test_batches},
               {"recent", in.recent},
               {"test_ids", std::vector<uint64_t>(in.test_ids.begin(), in.test_ids.end())}};
  }
  return j.dump();
}

Status FleetState::ImportIngestJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::InvalidArgument("ingest state is not a JSON object");
  }
  MutexLock lock(mu_);
  try {
    for (const auto& [name, v] : j.items()) {
      Node& n = GetLocked(name);
      NodeIngest& in = n.view.ingest;
      in.session_id = v.at("session_id").get<uint64_t>();
      in.last_seq = v.at("last_seq").get<uint64_t>();
      in.batches = v.value("batches", uint64_t{0});
      in.results = v.value("results", uint64_t{0});
      in.duplicates = v.value("duplicates", uint64_t{0});
      in.gaps = v.value("gaps", uint64_t{0});
      in.test_batches = v.value("test_batches", uint64_t{0});
      in.recent = v.value("recent", std::vector<std::pair<uint64_t, uint64_t>>{});
      if (in.recent.size() > kRecentSessions) in.recent.resize(kRecentSessions);
      for (uint64_t id : v.value("test_ids", std::vector<uint64_t>{})) in.test_ids.insert(id);
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string("ingest state: ") + e.what());
  }
  return Status::Ok();
}

}  // namespace fw::aggregator
