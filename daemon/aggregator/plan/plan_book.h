// The agents' current probe plans: when to re-plan (membership changes coalesced, re-plans spaced
// by their cost), each plan encoded once and kept serialized, and the changed ones pushed to the
// agents a bounded number per tick.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "daemon/aggregator/plan/fabric_map.h"
#include "daemon/aggregator/plan/plan_versions.h"
#include "daemon/aggregator/plan/planner.h"
#include "daemon/aggregator/plan/prober_index.h"
#include "fabricwatch.pb.h"

namespace fw::metrics {
class Counter;
class Gauge;
class Registry;
}  // namespace fw::metrics

namespace fw::aggregator {

// A planned burst as the agent receives it (ProbePlan.bursts).
void BurstToWire(const PlannedBurst& b, fabricwatch::v1::BurstRequest& out);

// Report pacing (ProbePlan.report_interval_ms, docs/uplink.md): agents send their results every
// 2 s in a fleet of kLargeFleetNodes or more, every second in a smaller one. Each batch costs the
// aggregator a read, a decode, a journal ack and an ack write whatever it carries, so at fleet
// scale halving the batches halves that share of ingest (docs/performance.md); detection does not
// wait, since agents send bad news and escalated flows' results at once. A small fleet costs
// little either way and keeps 1 s freshness.
inline constexpr size_t kLargeFleetNodes = 1000;
inline uint32_t ReportIntervalMs(size_t fleet_nodes) {
  return fleet_nodes >= kLargeFleetNodes ? 2000 : 1000;
}

// Threading: NoteMembershipChange() and PlanFor() are thread-safe; MaybeReplan() and
// PushPending() are called by one thread (the tick).
class PlanBook {
 public:
  PlanBook(PlannerConfig config, std::shared_ptr<const FabricMap> map, const Clock& clock,
           metrics::Registry& registry);

  // Plan versions that grow across restarts (see PlanVersions); before any re-plan.
  Status Start(const std::string& state_dir);
  // The plan_epoch file Start() found corrupt and moved aside, if any.
  std::optional<QuarantinedFile> quarantined() const;

  // An agent joined or left; any thread. The next MaybeReplan() that finds the fleet settled
  // re-plans.
  void NoteMembershipChange();

  // Re-plans when a change is pending, the fleet has been quiet for kReplanSettleNs (or the change
  // is kReplanMaxDelayNs old) and the last re-plan is at least its spacing ago. `live_agents` is
  // asked for the fleet only then. True when it re-planned.
  bool MaybeReplan(int64_t now_ns, const std::function<std::vector<AgentInfo>()>& live_agents);

  // Sends the plans the last re-plans changed, up to kPlanPushesPerTick per call: `push` is given
  // a filter that accepts the nodes to send to (GrpcServer::PushPlans).
  using Push = std::function<void(const std::function<bool(const std::string& node)>& wanted)>;
  void PushPending(const Push& push);

  // A temporary overlay on the plans (plan_overlay.h: a qualification's mesh), or its end; any
  // thread. The next MaybeReplan() re-plans without waiting for membership to settle. While the
  // live set is the one the last full re-plan saw (no membership change since), that re-plan
  // covers only the nodes the changed overlays name (an overlay changes no other plan), the allow
  // lists of the nodes their old and new plans name, and is spaced by its own cost.
  void SetOverlay(PlanOverlay overlay);
  void ClearOverlay(const std::string& id);

  // The plan to send to `node`; nullopt when it has none.
  std::optional<fabricwatch::v1::ProbePlan> PlanFor(const std::string& node) const;

  // The fleet's latency probes per second as the last re-plan planned them, before overlays
  // (escalation's budget is a share of it); 0 before the first re-plan. Any thread.
  double BasePps() const { return base_pps_.load(std::memory_order_relaxed); }

  // Nodes the last re-plan planned: the whole live set, or the nodes of the overlays that changed.
  // Tick thread.
  size_t last_replan_nodes() const { return last_replan_nodes_; }

 private:
  // Recomputes every agent's plan and its responder's allow list (the addresses of the nodes
  // whose plans name it, prober_index.h), and keeps the changed ones for PushPending().
  // With `only`, re-plans those nodes alone against the prober index of the last full re-plan
  // (the live set must be the one it saw).
  void Replan(const std::vector<AgentInfo>& live, const std::unordered_set<std::string>* only);
  // The nodes an overlay names: its members and its bursts' ends.
  static void AddOverlayNodes(const PlanOverlay& o, std::unordered_set<std::string>& out);

  const Clock& clock_;
  const double trace_refresh_s_;
  const uint32_t probe_timeout_floor_ms_;
  Planner planner_;
  std::atomic<double> base_pps_{0};
  // Membership changes are coalesced: the tick thread re-plans once the fleet has been quiet for
  // kReplanSettleNs, or kReplanMaxDelayNs after the first pending change, whichever comes first.
  // A connecting fleet of 16,000 agents therefore costs one re-plan, not one per tick.
  static constexpr int64_t kReplanSettleNs = 2'000'000'000;
  static constexpr int64_t kReplanMaxDelayNs = 10'000'000'000;
  // A fleet-wide change reaches 16,000 agents over seconds instead of as one burst of ~160 MB of
  // messages queued at once.
  static constexpr size_t kPlanPushesPerTick = 2'000;
  std::atomic<bool> replan_needed_{false};
  // Set by NoteMembershipChange(): the next re-plan is a full one.
  std::atomic<bool> membership_changed_{true};
  // Overlays by id (the nodes each names), and the nodes of the overlays set or cleared since the
  // last re-plan.
  Mutex overlay_mu_;
  std::unordered_map<std::string, std::unordered_set<std::string>> overlay_nodes_
      FW_GUARDED_BY(overlay_mu_);
  std::unordered_set<std::string> overlay_touched_ FW_GUARDED_BY(overlay_mu_);
  // Tick thread only: the prober index of the last full re-plan, updated by the partial ones.
  std::unique_ptr<ProberIndex> probers_;
  // A partial re-plan (overlays only) is spaced by 5x its own cost, at least kPartialSpacingNs: an
  // escalation lead started between ticks reaches its agents within the 250 ms pass that started
  // it, not after the 1 s a full re-plan waits (docs/planner.md, "Leads between ticks").
  static constexpr int64_t kPartialSpacingNs = 200'000'000;
  int64_t partial_spacing_ns_ = kPartialSpacingNs;
  size_t last_replan_nodes_ = 0;
  std::atomic<int64_t> last_membership_ns_{0};  // written by gRPC threads, read by the tick
  int64_t first_pending_ns_ = 0;                // tick thread only; 0 when nothing is pending
  // Tick thread only. Re-plans are spaced by 5x the last plan's cost (1 s to 30 s): a small fleet
  // re-plans at once, a 16,000-node fleet whose plan costs seconds does not re-plan every tick.
  int64_t last_replan_ns_ = 0;
  int64_t replan_spacing_ns_ = 1'000'000'000;
  std::unordered_set<std::string> pending_pushes_;  // tick thread only
  // One agent's current plan, kept serialized: 16,000 plans of ~100 peers cost ~100 MB this way
  // and several times that as message objects. A re-plan that leaves a node's plan and its allow
  // list as they were neither bumps its version nor sends it.
  struct StoredPlan {
    uint64_t content_hash = 0;                   // of `body`
    std::shared_ptr<const std::string> body;     // a serialized v1::ProbePlan: no version, no list
    uint64_t allowed_hash = 0;                   // of `allowed`
    std::shared_ptr<const std::string> allowed;  // ProbePlan.allowed_probers, serialized
    uint64_t version = 0;  // the plan as body + allowed; 0 until the first re-plan finished it
    uint64_t replan = 0;   // the plan_version_ of the last re-plan to keep it
  };
  mutable Mutex plan_mu_;
  std::unordered_map<std::string, StoredPlan> plans_ FW_GUARDED_BY(plan_mu_);
  uint64_t plan_version_ FW_GUARDED_BY(plan_mu_) = 0;
  std::optional<PlanVersions> versions_ FW_GUARDED_BY(plan_mu_);  // set by Start()
  metrics::Gauge& replan_seconds_;
  metrics::Counter& replans_;
  metrics::Counter& plans_sent_;
};

}  // namespace fw::aggregator
