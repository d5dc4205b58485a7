// The collective stage as the aggregator runs it: the orchestrator behind one lock, the wire
// messages at its edge (CollectiveJob/KvReply out, CollectiveResult/KvRequest in), its metrics,
// and the pause/resume API a scheduler's prolog and epilog call. gRPC-free: messages leave through
// the `send` callback the aggregator gives it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/finding.h"
#include "common/mutex.h"
#include "daemon/aggregator/collective/mesh_corroboration.h"
#include "daemon/aggregator/collective/orchestrator.h"
#include "daemon/aggregator/ingest/fleet_state.h"
#include "daemon/aggregator/plan/fabric_map.h"
#include "exporter/http_server.h"
#include "exporter/registry.h"
#include "fabricwatch.pb.h"

namespace fw::aggregator::collective {

// Messages for nodes' streams, in order.
using Outbound = std::vector<std::pair<std::string, fabricwatch::v1::AggregatorMessage>>;

// The nodes collective jobs may use: connected and up, each placed on its first NIC's leaf when the
// fabric map names it (no map: no leaf, so no group across nodes), with its inventory's GPUs and
// the GPUs its Hello announced NCCL ready on (none unless `ready`).
std::vector<CollectiveNode> CollectiveNodesOf(const std::vector<NodeView>& nodes,
                                              const FabricMap* map);

// A CollectiveResult's times for the orchestrator: its ranks' arrivals and exits (a member of
// several ranks spans from its first arrival to its last exit) and its operation times.
MemberTimes MemberTimesOf(const fabricwatch::v1::CollectiveResult& result);

class CollectiveStage {
 public:
  // `send` hands messages to the nodes' streams, best effort (a node without a stream misses them
  // and its job times out). It is called without the stage's lock held, on the calling thread.
  // A schedule interval of 0 or less starts no jobs (rendezvous and results are still served).
  CollectiveStage(OrchestratorConfig config, metrics::Registry& registry,
                  std::function<void(Outbound)> send);

  // The tick thread. `nodes` is called at most every kNodesRefreshNs (copying the fleet is not
  // free at 16,000 nodes, and the schedule only reads it once per interval).
  void Tick(const std::function<std::vector<CollectiveNode>()>& nodes, int64_t now_ns);
  // Ingest threads; never block beyond the stage's lock.
  void OnKvRequest(const std::string& node, const fabricwatch::v1::KvRequest& request,
                   int64_t now_ns);
  void OnResult(const std::string& node, const fabricwatch::v1::CollectiveResult& result);

  // An on-demand Gloo job over `members` (a qualification's all-reduce), sent now; returns its id.
  // Any thread. Its outcome, once complete: TakeOnDemand (nullopt meanwhile); Abandon ends it.
  std::string StartOnDemand(std::vector<std::string> members, uint64_t bytes, uint32_t iterations,
                            int64_t now_ns);
  std::optional<OnDemandOutcome> TakeOnDemand(const std::string& job_id);
  void Abandon(const std::string& job_id);

  // POST /api/v1/collectives/pause and /resume ({"nodes": [...]}; guarded by the web config's
  // users), GET /api/v1/collectives (paused nodes, counters, recent collective_slow findings).
  void InstallHttp(http::Server& server);

  PauseSet& pauses() { return *pauses_; }
  // Whether a scheduled job with a member in `nodes` is in flight (a qualification waits for it
  // to end before it measures: its traffic would load the paths it judges). Any thread.
  bool ScheduledJobOn(const std::vector<std::string>& nodes) const;
  std::vector<CollectiveSlowFinding> recent_findings() const;
  // The collective_slow findings as the analyzer tracks them (Analyzer::SetSourceFindings), one per
  // location: a location stays active for hold_ns() after the newest bisection that ended there,
  // or until the group that was slow runs at its expected rate again. A bisection that ended
  // between leaves is put on the fabric map link the probe mesh corroborates (`mesh`, called
  // only while such a finding is active; the first corroborating link sticks); without one it
  // stays at the leaf (switch) or the leaf pair (pair), at confidence 0.5.
  std::vector<Finding> ActiveFindings(int64_t now_ns,
                                      const std::function<std::vector<MeshLink>()>& mesh = {});
  // kHoldIntervals schedule intervals, at least kMinHoldNs: a slow group is re-tested, and a
  // persisting fault found again, within that time.
  int64_t hold_ns() const { return hold_ns_; }

  static constexpr int64_t kNodesRefreshNs = 10'000'000'000;
  static constexpr size_t kKeptFindings = 64;
  static constexpr int64_t kHoldIntervals = 3;
  static constexpr int64_t kMinHoldNs = 600'000'000'000;

 private:
  void Keep(std::vector<CollectiveSlowFinding> findings) FW_REQUIRES(mu_);
  void DropRecovered() FW_REQUIRES(mu_);
  void Export() FW_REQUIRES(mu_);
  void PauseOrResume(bool pause, const http::Request& req, http::Response& r);

  const bool schedule_on_;
  const int64_t hold_ns_;
  const std::function<void(Outbound)> send_;
  mutable Mutex mu_;
  CollectiveOrchestrator orchestrator_ FW_GUARDED_BY(mu_);
  PauseSet* const pauses_;  // the orchestrator's; thread-safe itself
  std::vector<CollectiveNode> nodes_ FW_GUARDED_BY(mu_);
  int64_t nodes_at_ns_ FW_GUARDED_BY(mu_) = -1;
  std::deque<CollectiveSlowFinding> findings_ FW_GUARDED_BY(mu_);
  struct Kept {
    CollectiveSlowFinding finding;
    int64_t at_ns = 0;             // the tick clock; a result's findings take the last tick's time
    std::string mesh_link;         // the map link the probe mesh corroborated, once it did
    std::set<std::string> groups;  // the slow groups whose bisections ended here
  };
  // Bisection location -> the newest finding there.
  std::map<std::string, Kept> active_ FW_GUARDED_BY(mu_);
  int64_t last_tick_ns_ FW_GUARDED_BY(mu_) = 0;

  metrics::Family<metrics::Gauge>& busbw_;
  metrics::Counter& runs_;
  metrics::Counter& failures_;
  metrics::Counter& bisections_;
  metrics::Counter& findings_total_;
  metrics::Gauge& paused_;
  metrics::Gauge& in_flight_;
  metrics::Family<metrics::Counter>& refused_;
};

}  // namespace fw::aggregator::collective
