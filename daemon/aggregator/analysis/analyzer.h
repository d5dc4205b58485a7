// The analyzer: per-flow evidence → baselines → link tomography → blame levels → findings, once
// per tick on an injected clock.
//
// Threading: Ingest(), OnPortSample(), SetNodeFindings() and the view accessors are thread-safe
// and may be called from ingest threads and HTTP handlers. Tick() is called by one thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "daemon/aggregator/analysis/config.h"
#include "daemon/aggregator/analysis/element_tracker.h"
#include "daemon/aggregator/analysis/flow_table.h"
#include "daemon/aggregator/analysis/host_delay.h"
#include "daemon/aggregator/analysis/rails.h"
#include "daemon/aggregator/analysis/rdma_loss.h"
#include "daemon/aggregator/analysis/tomography.h"
#include "daemon/aggregator/analysis/traced_paths.h"
#include "daemon/aggregator/analysis/tracked_finding.h"
#include "daemon/aggregator/ingest/pair_table.h"
#include "daemon/aggregator/model/port_sample.h"
#include "daemon/aggregator/plan/escalation.h"

namespace fw::analysis {

class FindingsStore;

using PortSample = ::fw::aggregator::PortSample;

// One row of /api/v1/links.
struct LinkView {
  std::string id;
  std::string a;
  std::string b;
  std::string a_tier;  // the map's tier of a: leaf | spine | superspine | core; "host" for a NIC
  std::string b_tier;
  std::string state;  // ok | degraded | down | flapping | congested | unknown
  double loss_ratio = 0;
  double latency_inflation = 0;  // 0 when unknown
  double bandwidth_ratio = 0;    // 0 when unknown
  double probes = 0;             // probes that crossed it in the short window (expected)
  double confidence = 0;
};

struct TickStats {
  int64_t ticks = 0;
  double last_tick_seconds = 0;  // wall time the last Tick() took (monotonic clock)
  size_t flows = 0;
  size_t bad_flows = 0;
  size_t pairs = 0;
  size_t active_findings = 0;
  size_t baselines_ready = 0;
  size_t noisy_hosts = 0;
  // Low bursts in the bandwidth window set aside as link evidence: their prober's CPUs were at
  // least AnalysisConfig::bandwidth_cpu_busy_limit busy during them, or under at least
  // bandwidth_cpu_pressure_limit CPU pressure.
  size_t cpu_saturated_bursts = 0;
  uint64_t store_errors = 0;
  // rdma_ud series not created because their table was full (HostDelays, RdmaLosses::kMaxSeries).
  uint64_t rdma_host_delay_refused = 0;
  uint64_t rdma_loss_refused = 0;
  // Since start: leads found between ticks (Analyzer::BetweenTicks), and findings that fired
  // between ticks (the dense recheck).
  uint64_t between_tick_leads = 0;
  uint64_t between_tick_findings = 0;
};

class Analyzer {
 public:
  // `map` may be null: detection then works per pair and host only. `pairs` is the aggregator's
  // pair store, which ingest writes (PairTable::RecordBatch) and which must outlive this: the
  // source of the long-window baselines and of the per-flow short windows. New flows in it get
  // their path from `resolver`. `store` may be null.
  Analyzer(const Clock& clock, std::shared_ptr<const FabricMap> map, aggregator::PairTable* pairs,
           AnalysisConfig config = {}, PathResolver resolver = {}, FindingsStore* store = nullptr);
  ~Analyzer();
  Analyzer(const Analyzer&) = delete;
  Analyzer& operator=(const Analyzer&) = delete;

  void OnPortSample(const PortSample& sample);
  // The host delays (host_delay.h) and the per-device outcomes (rdma_loss.h) of rdma_ud results,
  // from the ingest threads beside PairTable::RecordBatch, which records their network RTTs.
  void OnHostDelays(std::span<const aggregator::ReportedProbe> results);
  // `node`'s agent (re)started its session: its RDMA host delays, and its peers' measured against
  // it, settle for AnalysisConfig::rdma_host_delay_settle_s before they are judged. Any thread.
  void OnSessionStart(const std::string& node);
  // Replaces the node-hardware findings an agent reported (check reports); each becomes a tracked
  // finding while it is reported.
  void SetNodeFindings(const std::string& node, std::vector<Finding> findings);
  // Replaces the findings another aggregator stage holds active under `source` (the collective
  // probes: "collective"); each becomes a tracked finding while it is set.
  void SetSourceFindings(const std::string& source, std::vector<Finding> findings);

  // One evaluation. Call every tick (default 1 s).
  void Tick();
  // Ingest threads, beside PairTable::RecordBatch: notes the lost probes of `results` for the
  // next BetweenTicks() (at most kMaxLostNotes between two of its calls; the tick reads the rest).
  // Cheap: nothing is evaluated here. Nothing without a map, with leads off
  // (escalate_lead_significance 0) or between-tick work off (between_ticks_s 0).
  void NoteLost(std::span<const aggregator::ReportedProbe> results);
  static constexpr size_t kMaxLostNotes = 1024;
  // Source nodes whose noted flows one BetweenTicks() reads at most (the rest wait for the tick).
  static constexpr size_t kMaxLeadSourcesPerPass = 32;
  // Tick thread, every AnalysisConfig::between_ticks_s between two Tick()s: what arrived since is
  // judged by two of the tick's rules, and nothing else is evaluated.
  // - Leads: each flow noted lost (NoteLost) that makes a lead by the tick's rule
  //   (Tomography::LeadOf against the last tick's link totals and loss background; not a flow of a
  //   host the last tick found noisy for loss, nor one that crosses a link the last tick blamed
  //   for loss, weakly or not; its link healthy) becomes a lead escalation request now
  //   (TakeBetweenTickLeads), and the fabric links it surely crossed count it as their weak
  //   evaluation before the next tick (ElementTracker::WeakBeforeNextTick).
  // - Dense rechecks (Recheck()).
  // Returns the findings that fired.
  int BetweenTicks();
  // The lead escalation requests the last BetweenTicks() found (EscalationRequest::lead), moved
  // out; the escalation stage adds them to the last tick's candidates. Tick thread.
  std::vector<aggregator::EscalationRequest> TakeBetweenTickLeads() {
    return std::exchange(between_leads_, {});
  }
  // Between ticks, every AnalysisConfig::between_ticks_s while RecheckPending(): the dense loss
  // test read again, on its links' surely-crossing flows, for links that had their evaluations at
  // the last tick and wait only for the freshest data (ElementTracker::DenseRecheckable). A link
  // that passes fires now (evidence `dense_between_ticks` 1, `recent_probes`). Tick thread, like
  // Tick(). Returns how many fired.
  int Recheck();
  bool RecheckPending() const { return !rechecks_.empty(); }

  std::vector<TrackedFinding> Findings(bool active_only) const;
  std::vector<LinkView> Links() const;
  TickStats stats() const;
  bool has_map() const { return map_ != nullptr; }
  const AnalysisConfig& config() const { return config_; }
  // The paths agents traced for their flows; null without a map. Ingest records traces into it
  // (thread-safe). Each tick a UDP flow is judged on its fresh traced path first, then on the
  // path `resolver` gave it (the map's, under deterministic routing), else on all its equal-cost
  // candidates; link findings count which (evidence paths_traced, paths_map, paths_candidates).
  TracedPaths* traced_paths() { return traced_.get(); }
  const TracedPaths* traced_paths() const { return traced_.get(); }
  // Adaptive escalation (plan/escalation.h), on the tick thread only: the elements suspect after
  // the last Tick() with the pairs that cross them, and the escalations in force, whose elements'
  // findings then carry evidence `escalated` (1), `escalated_for_s`, `escalated_pairs` and
  // `escalation_rate_factor` (the highest of its pairs'; kept after the escalation ends, while the
  // finding is active).
  const std::vector<aggregator::EscalationRequest>& escalation_candidates() const {
    return escalation_candidates_;
  }
  // Tick thread, before Tick(): how late ingest reads the agents' data (FleetState::ingest_lag_s).
  // Confirmations that ask for persistence count data time, not only ticks (ElementTracker).
  void SetIngestLag(double lag_s) { tracker_.SetIngestLag(lag_s); }
  void SetEscalated(std::map<std::string, aggregator::EscalationBudget::Escalated> escalated) {
    escalated_ = std::move(escalated);
  }
  FlowTable& flows() { return flows_; }
  const FlowTable& flows() const { return flows_; }

  // One tick's evidence; defined in evaluation.h, internal to the analysis library.
  struct Evaluation;

 private:
  class ScanVisitor;
  void RefreshBaselines(int64_t now_ns);
  void Evaluate(Evaluation& ev, double now_s);
  // The escalation in force on each observed element, as evidence of its finding.
  void AddEscalationEvidence(Evaluation& ev, double now_s);
  // At debug level, each tick: the links blamed (and weakly lossy) with their figures and the bad
  // elements with their state, the timeline docs/analysis.md's detection-time breakdown reads.
  void LogTimeline(const Evaluation& ev) const;
  void Publish(const ElementTracker::Changes& changes, const Evaluation& ev, double now_s,
               int64_t now_wall_ns);
  // Findings opened between ticks (Recheck): logged, stored and shown, as a tick's.
  void PublishFindings(const std::vector<TrackedFinding>& opened);
  // The scan's part of Recheck: a flow that surely crossed a watched link is kept for it.
  void RecordWatched(const PairRef& pair, const FlowRef& flow, const FlowObs& o);
  // After a tick: the links Recheck reads until the next one, the links the next scan watches,
  // and what BetweenTicks() judges leads against (loss spec, loss-blamed links, noisy hosts).
  void PlanRechecks(const Evaluation& ev);
  // The flow's way (FlowObs's path fields) from its paths, its trace or the map's convention, as
  // the scan sets it. True when a fresh trace named its path.
  bool ResolveWay(const PairRef& pair, const PathSet& paths, const FlowRef& flow, int64_t now_ns,
                  FlowObs& o) const;
  // BetweenTicks()'s leads from the flows noted lost since its last call.
  void LeadsBetweenTicks(int64_t now_ns);

  // A flow of the pair store: its pair, transport, source port and planned index.
  struct FlowKey {
    NodeId src = 0;
    NodeId dst = 0;
    Transport transport = Transport::kUdp;
    uint16_t src_port = 0;
    uint32_t flow_id = 0;
    auto operator<=>(const FlowKey&) const = default;
  };
  // A flow kept for Recheck: where it is in the pair store, and its way (FlowObs's path fields).
  struct WatchedFlow {
    FlowKey key;
    const PathSet* paths = nullptr;  // identifies the flow's NIC pair within its pair
    FlowObs way;
  };
  struct RecheckLink {
    std::string element;
    LinkIndex link = aggregator::kNoIndex;
    std::vector<WatchedFlow> flows;
  };
  // Links whose surely-crossing flows this scan keeps (suspect or weak after the last tick).
  std::vector<uint8_t> watch_;
  bool watching_ = false;
  std::unordered_map<LinkIndex, std::vector<WatchedFlow>> watched_flows_;
  std::vector<RecheckLink> rechecks_;
  SignalSpec recheck_spec_;  // the last tick's loss spec (background, threshold, significance)
  // What the last tick leaves for BetweenTicks()'s leads: links blamed for loss (weakly or not,
  // with their ties), and per node 1: noisy for loss as prober, 2: as target.
  std::vector<uint8_t> loss_blamed_;
  std::vector<uint8_t> loss_noisy_;
  std::vector<aggregator::EscalationRequest> between_leads_;
  mutable Mutex lost_mu_;
  std::vector<FlowKey> lost_notes_ FW_GUARDED_BY(lost_mu_);  // flows noted lost (NoteLost)

  const Clock& clock_;
  std::shared_ptr<const FabricMap> map_;
  const aggregator::PairTable* pairs_;  // never null
  AnalysisConfig config_;
  FindingsStore* store_;
  FlowTable flows_;
  std::unique_ptr<TracedPaths> traced_;  // null without a map
  std::unique_ptr<RailIndex> rails_;     // null without a map
  Tomography tomography_;
  ElementTracker tracker_;
  HostDelays host_delays_;
  RdmaLosses rdma_losses_;
  int64_t tick_count_ = 0;
  bool baseline_warmup_ = true;  // fewer than half of the pairs had a baseline at the last tick
  std::vector<aggregator::EscalationRequest> escalation_candidates_;          // tick thread
  std::map<std::string, aggregator::EscalationBudget::Escalated> escalated_;  // tick thread
  // Elements observed while escalated: their evidence, kept until the element is ok again.
  std::map<std::string, std::map<std::string, double>> escalation_evidence_;  // tick thread
  // The last tick's fresh latency leads (Evaluation::fresh_latency_leads), and the elements
  // observed at the tick after their lead: their findings carry evidence `fresh_latency_lead` 1
  // until the element is ok again.
  std::set<std::string> fresh_latency_leads_;   // tick thread
  std::set<std::string> led_by_fresh_latency_;  // tick thread

  // Fleet background per path class (last tick), used by this tick's judgements.
  struct ClassStats {
    double loss = 0;
    double slow = 0;
    double bw_median = 0;  // of the bursts in view last tick
    // The goodput a burst is judged against: the larger of bw_median and the median of the
    // per-tick medians of the last bandwidth_window_s. A fault on a link that most of a class's
    // bursts cross (a small fabric) drags bw_median down to its own goodput within one burst
    // round, after which its bursts no longer read low and a few bursts of other links, judged
    // against a median in motion, look like the fault; the history holds the expected figure for
    // half the window. A fleet that got faster is followed at once.
    double bw_expected = 0;
    std::deque<std::pair<double, double>> bw_history;  // (tick time s, bw_median)
    double rtt_median_s = 0;
    double rtt_mad_s = 0;
  };
  std::array<ClassStats, 3> class_stats_{};

  mutable Mutex inputs_mu_;
  std::map<std::tuple<std::string, std::string, int>, std::pair<PortSample, double>> ports_
      FW_GUARDED_BY(inputs_mu_);
  std::map<std::string, std::vector<Finding>> node_findings_ FW_GUARDED_BY(inputs_mu_);
  std::map<std::string, std::vector<Finding>> source_findings_ FW_GUARDED_BY(inputs_mu_);

  mutable Mutex views_mu_;
  std::vector<LinkView> links_view_ FW_GUARDED_BY(views_mu_);
  std::vector<TrackedFinding> active_view_ FW_GUARDED_BY(views_mu_);
  std::deque<TrackedFinding> history_ FW_GUARDED_BY(views_mu_);  // resolved, newest last
  TickStats stats_ FW_GUARDED_BY(views_mu_);
  int64_t last_persist_s_ = 0;
};

}  // namespace fw::analysis
