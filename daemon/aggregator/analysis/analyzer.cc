// The analyzer's tick: scan flows, refresh baselines, guard against noisy hosts, localize, track.
#include "daemon/aggregator/analysis/analyzer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <unordered_map>

#include "common/log.h"
#include "daemon/aggregator/analysis/escalation_candidates.h"
#include "daemon/aggregator/analysis/evaluation.h"
#include "daemon/aggregator/analysis/findings_store.h"
#include "daemon/aggregator/analysis/robust_stats.h"

namespace fw::analysis {
namespace {

constexpr int kClassCount = 3;
constexpr int64_t kPersistEverySeconds = 10;

int ClassIndex(PathClass c) { return static_cast<int>(c); }

bool JudgesLatency(Transport t) {
  return t != Transport::kTcpBw && t != Transport::kRdmaRc && t != Transport::kCollective;
}

uint64_t UnorderedKey(NodeId x, NodeId y) {
  const NodeId a = std::min(x, y), b = std::max(x, y);
  return (static_cast<uint64_t>(a) << 32) | b;
}

double SlowThreshold(const AnalysisConfig& c, double median_s, double mad_s) {
  return std::max({median_s * c.latency_inflation, median_s + c.latency_mad_k * 1.4826 * mad_s,
                   median_s + c.latency_floor_s});
}

}  // namespace

// Walks the flow table once per tick, filling the evaluation and the tomography.
class Analyzer::ScanVisitor final : public FlowTable::Visitor {
 public:
  ScanVisitor(Analyzer& a, Evaluation& ev, int64_t now_ns) : a_(a), ev_(ev), now_ns_(now_ns) {}

  void BeginPair(const PairRef& pair) override {
    cur_ = PairAgg{};
    cur_.a = std::min(pair.src, pair.dst);
    cur_.b = std::max(pair.src, pair.dst);
    cur_.mapped = a_.map_ && pair.paths.path_class != PathClass::kUnknown && pair.paths.core;
    cur_paths_ = cur_.mapped ? &pair.paths : nullptr;
    has_data_ = false;
    cur_guard_by_ = {};
    if (pair.baseline.median_s > 0) ++ev_.baselines_ready;
  }

  void Flow(const PairRef& pair, const FlowRef& flow, const FlowWindow& w) override {
    // The flow's access links' sums, its hosts' stats and its core paths are read below, each a
    // cache miss at fleet scale: asked for together here, they load while the flow is judged.
    {
      const PathSet& ps = flow.paths ? *flow.paths : pair.paths;
      a_.tomography_.Prefetch(ps.src_access);
      a_.tomography_.Prefetch(ps.dst_access);
      if (ps.core) __builtin_prefetch(ps.core.get());
      if (pair.src < ev_.hosts.size()) __builtin_prefetch(&ev_.hosts[pair.src]);
      if (pair.dst < ev_.hosts.size()) __builtin_prefetch(&ev_.hosts[pair.dst]);
    }
    has_data_ = true;
    ++ev_.flows;
    const int ci = ClassIndex(pair.paths.path_class);
    ev_.probes[ci] += w.probes;
    ev_.lost[ci] += w.lost;
    ev_.rtt[ci] += w.rtt;
    ev_.slow[ci] += w.slow;

    FlowObs o;
    o.src = pair.src;
    o.dst = pair.dst;
    o.pair_flows = flow.nic_flows;
    o.flow_bit = pair.transport == Transport::kUdp ? FlowBit(flow.flow_id) : 0;
    o.probes = w.probes;
    o.lost = w.lost;
    o.rtt = w.rtt;
    o.slow = w.slow;
    o.recent_probes = w.recent_probes;
    o.recent_lost = w.recent_lost;
    o.recent_rtt = w.recent_rtt;
    o.fresh_rtt = w.fresh_rtt;
    o.fresh_slow = w.fresh_slow;
    o.recent_slow = w.recent_slow;
    o.last_probes = w.last_probes;
    o.last_lost = w.last_lost;
    o.fresh_probes = w.fresh_probes;
    o.fresh_lost = w.fresh_lost;
    o.lost_run = w.lost_run;
    o.ratio_sum = static_cast<float>(w.ratio_sum);
    // A low burst from a prober whose CPUs were saturated (busy share) or contended (its
    // runnable tasks waited for a CPU, CPU pressure) during it measures the host, not the path:
    // it is set aside (neither a bandwidth sample nor a bad flow) and counted against the host
    // (HostStats::cpu_saturated_bursts). A saturated host's burst that reached the expected
    // goodput still counts: the path delivered it.
    bool cpu_set_aside = false;
    bool by_pressure = false;
    double set_aside_ratio = 0;
    if (w.goodput_bps > 0) {
      const double median = a_.class_stats_[ci].bw_expected;
      const double busy_limit = a_.config_.bandwidth_cpu_busy_limit;
      const double pressure_limit = a_.config_.bandwidth_cpu_pressure_limit;
      const bool low = median > 0 && w.goodput_bps / median < a_.config_.bandwidth_ratio;
      const bool busy = busy_limit > 0 && w.goodput_cpu_busy >= busy_limit;
      by_pressure = !busy && pressure_limit > 0 && w.goodput_cpu_pressure >= pressure_limit;
      if (low && (busy || by_pressure)) {
        cpu_set_aside = true;
        set_aside_ratio = w.goodput_bps / median;
        ++ev_.cpu_saturated_bursts;
      } else {
        ev_.goodputs[ci].push_back(static_cast<float>(w.goodput_bps));
        if (median > 0) {
          o.bw_ratio = static_cast<float>(w.goodput_bps / median);
          o.bw_bad = low;
        }
      }
    }
    const bool bad = o.lost > 0 || o.slow > 0 || o.bw_bad;
    if (bad) ++ev_.bad_flows;

    // Host guard: is this flow bad enough to speak about its endpoints?
    const bool guard_loss = w.probes >= 3 && 2 * w.lost >= w.probes;
    const bool guard_latency = w.rtt >= 3 && 2 * w.slow >= w.rtt;
    const bool guard_bad = guard_loss || guard_latency || o.bw_bad;
    cur_guard_by_[static_cast<int>(Signal::kLoss)] += guard_loss;
    cur_guard_by_[static_cast<int>(Signal::kLatency)] += guard_latency;
    cur_guard_by_[static_cast<int>(Signal::kBandwidth)] += o.bw_bad;
    if (pair.src >= ev_.hosts.size() || pair.dst >= ev_.hosts.size()) {
      ev_.hosts.resize(std::max(pair.src, pair.dst) + 1);
    }
    HostStats& s = ev_.hosts[pair.src];
    HostStats& d = ev_.hosts[pair.dst];
    ++s.out_flows;
    ++d.in_flows;
    if (w.goodput_bps > 0) {
      ++s.bursts;
      if (cpu_set_aside) {
        ++s.cpu_saturated_bursts;
        s.cpu_bw_ratio_sum += set_aside_ratio;
        if (by_pressure) {
          ++s.cpu_pressure_bursts;
          s.cpu_pressure_sum += w.goodput_cpu_pressure;
        } else {
          s.cpu_busy_sum += w.goodput_cpu_busy;
          s.cpu_peak_max = std::max(s.cpu_peak_max, w.goodput_cpu_peak);
        }
      }
    }
    if (guard_bad) {
      ++s.out_bad;
      ++d.in_bad;
    }

    ++cur_.flows;
    if (bad) ++cur_.bad_flows;
    cur_.loss_flows += o.lost > 0;
    cur_.slow_flows += o.slow > 0;
    cur_.probes += w.probes;
    cur_.lost += w.lost;
    cur_.recent_probes += w.recent_probes;
    cur_.recent_lost += w.recent_lost;
    cur_.rtt += w.rtt;
    cur_.slow += w.slow;
    cur_.ratio_sum += w.ratio_sum;
    if (o.bw_ratio >= 0) {
      ++cur_.bw;
      cur_.bw_bad += o.bw_bad;
      cur_.bw_ratio_sum += o.bw_ratio;
    }

    // The flow's own paths: its NIC pair's rail, leaves and access links when its results named
    // NICs, else the pair's (as before NICs were reported).
    const PathSet& paths = flow.paths ? *flow.paths : pair.paths;
    const bool own_paths = &paths != &pair.paths;
    const bool mapped = a_.map_ && paths.path_class != PathClass::kUnknown && paths.core;
    if (!mapped) return;
    if (own_paths && bad && !cur_.rail_bad) {
      // The pair's findings (and escalation) look at the paths of its bad flows' rail.
      cur_.mapped = true;
      cur_paths_ = &paths;
      cur_.rail_bad = true;
    }
    if (a_.ResolveWay(pair, paths, flow, now_ns_, o)) ++ev_.traced_flows;
    if (a_.watching_) a_.RecordWatched(pair, flow, o);
    if (bad) {
      ev_.deferred.push_back(o);
    } else {
      a_.tomography_.Add(o);
    }
  }

  void EndPair(const PairRef& pair) override {
    if (!has_data_) return;
    ++ev_.pairs_seen;
    if (JudgesLatency(pair.transport)) {
      ++ev_.latency_pairs;
      ev_.latency_pairs_ready += pair.baseline.median_s > 0;
    }
    HostStats& s = ev_.hosts[pair.src];
    HostStats& d = ev_.hosts[pair.dst];
    ++s.out_pairs;
    ++d.in_pairs;
    for (int k = 0; k < kSignalCount; ++k) {
      if (cur_guard_by_[k] > 0 && 2 * cur_guard_by_[k] >= cur_.flows) {
        ++s.out_bad_pairs_by[k];
        ++d.in_bad_pairs_by[k];
      }
    }
    // A pair that looks bad keeps its baseline: a fault must not become the new normal.
    PairBaseline& b = pair.baseline;
    b.hold = (cur_.rtt > 0 && cur_.slow * 5 >= cur_.rtt) ||
             (cur_.probes > 0 && cur_.lost * 20 >= cur_.probes);
    // Until a pair has a baseline of its own it is judged against its class (fleet comparison).
    const ClassStats& cls = a_.class_stats_[ClassIndex(pair.paths.path_class)];
    if (b.median_s <= 0 && cls.rtt_median_s > 0 && JudgesLatency(pair.transport)) {
      b.reference_s = static_cast<float>(cls.rtt_median_s);
      b.slow_threshold_s =
          static_cast<float>(SlowThreshold(a_.config_, cls.rtt_median_s, cls.rtt_mad_s));
    }
    const int ci = ClassIndex(pair.paths.path_class);
    // A pair speaks for its class's background with 5 samples in the short window: a 1 Hz flow
    // has 9 or 10 probes in 10 s, and requiring 10 dropped half the intra-leaf pairs of a small
    // fabric at random, so its background fell back to the inter-leaf class a fault had raised.
    if (cur_.probes >= 5) ev_.pair_loss[ci].push_back(double(cur_.lost) / cur_.probes);
    if (cur_.rtt >= 5) ev_.pair_slow[ci].push_back(double(cur_.slow) / cur_.rtt);
    if (cur_.bad_flows == 0 && cur_.mapped) return;
    PairAgg& agg = ev_.pairs[UnorderedKey(pair.src, pair.dst)];
    const bool fresh = agg.flows == 0;
    if (fresh) {
      agg = cur_;
      if (cur_paths_) agg.paths = *cur_paths_;
      return;
    }
    agg.flows += cur_.flows;
    agg.bad_flows += cur_.bad_flows;
    agg.loss_flows += cur_.loss_flows;
    agg.slow_flows += cur_.slow_flows;
    agg.probes += cur_.probes;
    agg.lost += cur_.lost;
    agg.recent_probes += cur_.recent_probes;
    agg.recent_lost += cur_.recent_lost;
    agg.rtt += cur_.rtt;
    agg.slow += cur_.slow;
    agg.ratio_sum += cur_.ratio_sum;
    agg.bw += cur_.bw;
    agg.bw_bad += cur_.bw_bad;
    agg.bw_ratio_sum += cur_.bw_ratio_sum;
    // The paths of a bad flow's own rail win over the pair's first common rail (a burst's or an
    // unnamed result's), as for a single PairRef above: escalation and pair findings look there.
    if ((!agg.mapped && cur_.mapped) || (cur_.rail_bad && !agg.rail_bad)) {
      agg.mapped = true;
      agg.paths = *cur_paths_;
      agg.rail_bad = cur_.rail_bad;
    }
  }

 private:
  Analyzer& a_;
  Evaluation& ev_;
  // The pair's sums so far; its `paths` stay empty: cur_paths_ stands for them (copied into
  // ev_.pairs only for the pairs kept there, not once per pair scanned).
  PairAgg cur_;
  const PathSet* cur_paths_ = nullptr;  // the pair's or a bad flow's paths while cur_.mapped
  std::array<uint32_t, kSignalCount> cur_guard_by_{};
  bool has_data_ = false;
  const int64_t now_ns_;
};

// The flow's way through the fabric: its access links, its core paths and the path it took (the
// map's convention, else its fresh trace, else every candidate). True when a trace named it.
bool Analyzer::ResolveWay(const PairRef& pair, const PathSet& paths, const FlowRef& flow,
                          int64_t now_ns, FlowObs& o) const {
  bool traced_now = false;
  o.src_access = paths.src_access;
  o.dst_access = paths.dst_access;
  o.core = paths.core.get();
  o.path = flow.path;
  o.path_source = flow.path >= 0 || !o.core || o.core->paths.size() <= 1 ? PathSource::kMap
                                                                         : PathSource::kCandidates;
  // A traced path is the flow's own: it wins over the map's convention. Only UDP flows: the
  // trace probes share their 5-tuple, and other transports hash differently.
  if (traced_ && o.core && o.core->paths.size() > 1 && pair.transport == Transport::kUdp &&
      !traced_->empty()) {
    // Only a trace taken between the flow's own NICs: two rails may share source ports.
    const FlowNics nics = NicsOfPaths(*map_, paths);
    const std::optional<int32_t> traced =
        traced_->PathOf(pair.src, pair.dst, flow.src_port, now_ns, nics);
    if (traced && static_cast<size_t>(*traced) < o.core->paths.size()) {
      const int32_t map_path = o.path;  // the map's convention (deterministic), or -1
      o.path = *traced;
      o.path_source = PathSource::kTraced;
      traced_now = true;
      const std::optional<int32_t> echo =
          traced_->EchoPathOf(pair.src, pair.dst, flow.src_port, now_ns, nics);
      if (echo && static_cast<size_t>(*echo) < o.core->paths.size()) {
        o.echo_path = *echo;
      } else if (map_path >= 0 && map_path != o.path) {
        // The trace shows the probe's way only. Where it left the map's path (its leaf routes
        // around a down uplink), the echo still follows the map's path, pinned the same way
        // from the far leaf: the down link's spine keeps dropping it there until a trace of
        // the echo says otherwise. Voting the flow onto the detour alone blamed the leaf's
        // other uplink for the down link's losses (switch_degraded on the leaf in the namespace
        // demo, `Scenarios.HeldDownUplinkWhoseLeafRoutesAroundItStaysLinkDown`).
        o.echo_path = map_path;
      }
    }
  }
  return traced_now;
}

Analyzer::Analyzer(const Clock& clock, std::shared_ptr<const FabricMap> map,
                   aggregator::PairTable* pairs, AnalysisConfig config, PathResolver resolver,
                   FindingsStore* store)
    : clock_(clock),
      map_(std::move(map)),
      pairs_(pairs),
      config_(config),
      store_(store),
      flows_(*pairs, std::move(resolver), config.bandwidth_window_s),
      traced_(map_ ? std::make_unique<TracedPaths>(map_, pairs->names()) : nullptr),
      rails_(map_ ? std::make_unique<RailIndex>(*map_) : nullptr),
      tomography_(map_),
      tracker_(config) {
  if (store_) {
    StatusOr<std::vector<TrackedFinding>> loaded = store_->LoadAll(config_.history_limit);
    if (!loaded.ok()) {
      spdlog::warn("component=analysis msg=\"findings history not loaded\" error={}",
                   LogQuote(loaded.status().ToString()));
    } else {
      const double now_s = clock_.MonotonicSeconds();
      for (TrackedFinding& f : *loaded) {
        if (f.active) {
          tracker_.Restore(f, now_s);
        } else {
          history_.push_front(std::move(f));  // loaded newest first
        }
      }
      active_view_ = tracker_.ActiveFindings();
    }
  }
}

Analyzer::~Analyzer() = default;

void Analyzer::OnPortSample(const PortSample& sample) {
  MutexLock lock(inputs_mu_);
  ports_[{sample.node, sample.device, sample.port}] = {sample, clock_.MonotonicSeconds()};
}

void Analyzer::OnHostDelays(std::span<const aggregator::ReportedProbe> results) {
  const int64_t now_ns = clock_.MonotonicNanos();
  if (results.empty() || results.front().src_id != kNoNode) {
    host_delays_.Record(results, now_ns);
    rdma_losses_.Record(results, now_ns);
    return;
  }
  // Results named by name (tests, tools): ids from the interner the pair table shares.
  std::vector<aggregator::ReportedProbe> named(results.begin(), results.end());
  for (aggregator::ReportedProbe& r : named) {
    r.src_id = flows_.FindNode(r.src_node).value_or(kNoNode);
    r.dst_id = flows_.FindNode(r.dst_node).value_or(kNoNode);
  }
  host_delays_.Record(named, now_ns);
  rdma_losses_.Record(named, now_ns);
}

void Analyzer::OnSessionStart(const std::string& node) {
  // Interned here: the agent's results, which ingest interns, carry the same id.
  host_delays_.NoteSessionStart(pairs_->names()->Intern(node), clock_.MonotonicNanos());
}

namespace {
// An empty list removes the key, so the maps hold only keys with findings.
void Replace(std::map<std::string, std::vector<Finding>>& by_key, const std::string& key,
             std::vector<Finding> findings) {
  if (findings.empty()) {
    by_key.erase(key);
  } else {
    by_key[key] = std::move(findings);
  }
}
}  // namespace

void Analyzer::SetNodeFindings(const std::string& node, std::vector<Finding> findings) {
  MutexLock lock(inputs_mu_);
  Replace(node_findings_, node, std::move(findings));
}

void Analyzer::SetSourceFindings(const std::string& source, std::vector<Finding> findings) {
  MutexLock lock(inputs_mu_);
  Replace(source_findings_, source, std::move(findings));
}

void Analyzer::RefreshBaselines(int64_t now_ns) {
  const int every = std::max(
      1, baseline_warmup_ ? config_.baseline_warmup_refresh_ticks : config_.baseline_refresh_ticks);
  const auto bucket = static_cast<NodeId>(tick_count_ % every);
  const auto min_samples = static_cast<uint64_t>(std::max(
      1, baseline_warmup_ ? config_.baseline_warmup_min_samples : config_.baseline_min_samples));
  const size_t nodes = flows_.NodeCount();
  aggregator::LogHistogram h;
  for (NodeId src = bucket; src < nodes; src += every) {
    flows_.ForEachPairWindowsFrom(src, [&](const PairRef& r, const aggregator::PairWindows& w) {
      if (r.baseline.hold || !JudgesLatency(r.transport)) return;
      uint64_t probes = 0, lost = 0;
      // Its RTT samples are at most its results that were not lost: too few, and the buckets
      // need not be merged.
      w.Counts(now_ns, aggregator::Window::k600s, &probes, &lost);
      if (probes - lost < min_samples) return;
      h.Clear();
      probes = lost = 0;
      w.MergeInto(now_ns, aggregator::Window::k600s, h, &probes, &lost);
      if (h.Count() < min_samples) return;
      const MedianMad stats = HistogramMedianMad(h);
      if (stats.median_s <= 0) return;
      r.baseline.median_s = static_cast<float>(stats.median_s);
      r.baseline.mad_s = static_cast<float>(stats.mad_s);
      r.baseline.reference_s = r.baseline.median_s;
      r.baseline.slow_threshold_s =
          static_cast<float>(SlowThreshold(config_, stats.median_s, stats.mad_s));
    });
  }
}

void Analyzer::Tick() {
  const int64_t started = RealClock::Get().MonotonicNanos();
  const int64_t now_ns = clock_.MonotonicNanos();
  const double now_s = static_cast<double>(now_ns) * 1e-9;
  const int64_t wall_ns = clock_.WallNanos();
  // The tick reads every lost probe itself: what BetweenTicks() has not judged yet is its.
  {
    MutexLock lock(lost_mu_);
    lost_notes_.clear();
  }
  between_leads_.clear();
  RefreshBaselines(now_ns);

  Evaluation ev;
  ev.hosts.resize(flows_.NodeCount());
  {
    MutexLock lock(inputs_mu_);
    for (const auto& [key, entry] : ports_) {
      if (now_s - entry.second <= config_.port_sample_max_age_s) ev.ports[key] = entry.first;
    }
    ev.node_findings = node_findings_;
    ev.source_findings = source_findings_;
  }
  HostDelayLimits delay_limits;
  delay_limits.window_s = FlowTable::kSlots;
  delay_limits.min_samples =
      static_cast<uint32_t>(std::max(1, config_.rdma_host_delay_min_samples));
  delay_limits.floor_ns = config_.rdma_host_delay_floor_s * 1e9;
  delay_limits.fleet_ratio = config_.rdma_host_delay_fleet_ratio;
  delay_limits.settle_s = config_.rdma_host_delay_settle_s;
  delay_limits.persist_s = config_.rdma_host_delay_persist_s;
  ev.host_delays = host_delays_.Judge(now_ns, delay_limits);
  RdmaLossLimits loss_limits;
  loss_limits.window_s = FlowTable::kSlots;
  loss_limits.significance = config_.loss_significance;
  ev.rdma_losses = rdma_losses_.Judge(now_ns, loss_limits);
  tomography_.Reset();
  ScanVisitor visitor(*this, ev, now_ns);
  flows_.Scan(now_ns, visitor);
  Evaluate(ev, now_s);
  AddEscalationEvidence(ev, now_s);

  for (auto& [element, obs] : ev.observations) {
    if (fresh_latency_leads_.contains(element) &&
        tracker_.HealthOf(element) == ElementHealth::kOk) {
      led_by_fresh_latency_.insert(element);
    }
    if (led_by_fresh_latency_.contains(element)) obs.finding.evidence["fresh_latency_lead"] = 1;
    tracker_.Observe(element, std::move(obs));
  }
  fresh_latency_leads_ = {ev.fresh_latency_leads.begin(), ev.fresh_latency_leads.end()};
  for (const auto& i : ev.instants) tracker_.Instant(i.element, i.down, i.clean, now_s, i.probes);
  for (const std::string& element : ev.superseded) tracker_.Supersede(element);
  if (map_) {
    for (const LinkBlame& b : ev.weak_loss) {
      if (b.tied.empty() && !map_->links()[b.link].IsAccess()) {
        tracker_.Weak("link:" + map_->links()[b.link].id);
      }
    }
    // A switch whose links queue on the freshest seconds may fire at the next evaluation, once
    // its windows show it too, on the dense test alone.
    for (const std::string& key : ev.fresh_latency_leads) tracker_.Weak(key);
    // Each link a lead speaks for may fire at the next evaluation on the dense data alone.
    for (const LinkBlame& b : ev.lead_loss) {
      for (LinkIndex l : LeadLinks(*map_, tomography_, b)) {
        tracker_.Weak("link:" + map_->links()[l].id);
      }
    }
  }
  const ElementTracker::Changes changes = tracker_.EndTick(now_s, wall_ns);
  PlanRechecks(ev);
  if (spdlog::should_log(spdlog::level::debug)) LogTimeline(ev);
  escalation_candidates_ =
      EscalationCandidates(BlameContext{map_.get(), flows_, tomography_, config_}, ev, tracker_);
  std::erase_if(escalation_evidence_,
                [&](const auto& kv) { return tracker_.HealthOf(kv.first) == ElementHealth::kOk; });
  std::erase_if(led_by_fresh_latency_,
                [&](const std::string& e) { return tracker_.HealthOf(e) == ElementHealth::kOk; });
  ++tick_count_;
  Publish(changes, ev, now_s, wall_ns);
  MutexLock lock(views_mu_);
  stats_.last_tick_seconds = (RealClock::Get().MonotonicNanos() - started) * 1e-9;
}

void Analyzer::RecordWatched(const PairRef& pair, const FlowRef& flow, const FlowObs& o) {
  tomography_.ForEachCandidate(o, [&](LinkIndex l, double w) {
    if (w < 0.999 || l >= watch_.size() || !watch_[l]) return;
    watched_flows_[l].push_back(WatchedFlow{
        {pair.src, pair.dst, pair.transport, flow.src_port, flow.flow_id}, flow.paths, o});
  });
}

namespace {
// 1 for each link of `n` that a blame of `lists` names, its tied links included.
std::vector<uint8_t> BlamedLinks(size_t n,
                                 std::initializer_list<const std::vector<LinkBlame>*> lists) {
  std::vector<uint8_t> out(n, 0);
  for (const std::vector<LinkBlame>* list : lists) {
    for (const LinkBlame& b : *list) {
      out[b.link] = 1;
      for (LinkIndex l : b.tied) out[l] = 1;
    }
  }
  return out;
}
}  // namespace

void Analyzer::PlanRechecks(const Evaluation& ev) {
  rechecks_.clear();
  recheck_spec_ = ev.specs[static_cast<int>(Signal::kLoss)];
  if (map_ && config_.between_ticks_s > 0) {
    loss_blamed_ = BlamedLinks(map_->links().size(),
                               {&ev.blames[static_cast<int>(Signal::kLoss)], &ev.weak_loss});
    loss_noisy_.assign(ev.hosts.size(), 0);
    const int k = static_cast<int>(Signal::kLoss);
    for (size_t n = 0; n < ev.hosts.size(); ++n) {
      loss_noisy_[n] = (ev.hosts[n].noisy_out_by[k] ? 1 : 0) | (ev.hosts[n].noisy_in_by[k] ? 2 : 0);
    }
  }
  if (map_ && config_.between_ticks_s > 0 && !watched_flows_.empty()) {
    const std::vector<uint8_t> blamed =
        BlamedLinks(map_->links().size(), {&ev.blames[static_cast<int>(Signal::kLoss)]});
    for (auto& [link, flows] : watched_flows_) {
      auto el = ev.link_elements.find(link);
      if (el == ev.link_elements.end() || !tracker_.DenseRecheckable(el->second.first)) continue;
      RecheckLink r{el->second.first, link, {}};
      // A flow that surely crossed another link blamed for loss too may have lost its probes
      // there (explain-away gave them to whichever was blamed first): it is left out.
      for (WatchedFlow& f : flows) {
        bool other = false;
        tomography_.ForEachCandidate(f.way, [&, own = link](LinkIndex l, double) {
          other |= l != own && l < blamed.size() && blamed[l];
        });
        if (!other) r.flows.push_back(std::move(f));
      }
      if (!r.flows.empty()) rechecks_.push_back(std::move(r));
    }
  }
  watched_flows_.clear();
  // The next scan keeps the flows that surely cross a link suspect or weakly lossy now: a link
  // weak now that turns suspect at the next tick may wait for its dense data after it.
  std::vector<LinkIndex> watch;
  if (map_ && config_.between_ticks_s > 0) {
    for (const std::string& key : tracker_.SuspectOrWeak()) {
      if (!key.starts_with("link:")) continue;
      if (auto l = map_->FindLink(std::string_view(key).substr(5))) watch.push_back(*l);
    }
  }
  if (!watching_ && watch.empty()) return;
  watch_.assign(map_->links().size(), 0);
  for (LinkIndex l : watch) watch_[l] = 1;
  watching_ = !watch.empty();
}

void Analyzer::NoteLost(std::span<const aggregator::ReportedProbe> results) {
  if (!map_ || config_.between_ticks_s <= 0 || config_.escalate_lead_significance <= 0) return;
  std::vector<FlowKey> notes;
  for (const aggregator::ReportedProbe& r : results) {
    if (!r.lost) continue;
    FlowKey n{r.src_id, r.dst_id, r.transport, r.src_port, r.flow_id};
    if (n.src == kNoNode) {  // named by name (tests, tools)
      n.src = flows_.FindNode(r.src_node).value_or(kNoNode);
      n.dst = flows_.FindNode(r.dst_node).value_or(kNoNode);
    }
    if (n.src != kNoNode && n.dst != kNoNode) notes.push_back(n);
  }
  if (notes.empty()) return;
  MutexLock lock(lost_mu_);
  const size_t room = kMaxLostNotes - std::min(kMaxLostNotes, lost_notes_.size());
  lost_notes_.insert(lost_notes_.end(), notes.begin(),
                     notes.begin() + static_cast<std::ptrdiff_t>(std::min(room, notes.size())));
}

int Analyzer::BetweenTicks() {
  if (config_.between_ticks_s <= 0) return 0;
  if (map_ && tick_count_ > 0) LeadsBetweenTicks(clock_.MonotonicNanos());
  const int fired = Recheck();
  if (fired > 0) {
    MutexLock lock(views_mu_);
    stats_.between_tick_findings += static_cast<uint64_t>(fired);
  }
  return fired;
}

void Analyzer::LeadsBetweenTicks(int64_t now_ns) {
  std::vector<FlowKey> notes;
  {
    MutexLock lock(lost_mu_);
    notes.swap(lost_notes_);
  }
  if (notes.empty() || loss_blamed_.empty()) return;
  std::sort(notes.begin(), notes.end());
  notes.erase(std::unique(notes.begin(), notes.end()), notes.end());
  SignalSpec spec = recheck_spec_;  // the last tick's loss background, as Evaluate's lead pass
  spec.significance = config_.escalate_lead_significance;
  const BlameContext ctx{map_.get(), flows_, tomography_, config_};
  std::set<LinkIndex> led;
  size_t found = 0, sources = 0;
  for (auto first = notes.begin(); first != notes.end();) {
    const NodeId src = first->src;
    // Each source costs a walk over its pairs: a fault that makes many sources lose probes at
    // once (a switch down) is the tick's to read, and the first sources already lead to it.
    if (++sources > kMaxLeadSourcesPerPass) break;
    const auto last =
        std::find_if(first, notes.end(), [&](const FlowKey& n) { return n.src != src; });
    if ((src < loss_noisy_.size() && (loss_noisy_[src] & 1)) || src >= flows_.NodeCount()) {
      first = last;
      continue;
    }
    flows_.ScanFrom(
        src, now_ns, [&](const PairRef& pair, const FlowRef& flow, const FlowWindow& w) {
          if (w.lost == 0) return;
          const FlowKey key{pair.src, pair.dst, pair.transport, flow.src_port, flow.flow_id};
          if (!std::binary_search(first, last, key)) return;
          if (pair.dst < loss_noisy_.size() && (loss_noisy_[pair.dst] & 2)) return;
          const PathSet& paths = flow.paths ? *flow.paths : pair.paths;
          if (paths.path_class == PathClass::kUnknown || !paths.core) return;
          FlowObs o;
          o.src = pair.src;
          o.dst = pair.dst;
          o.probes = w.probes;
          o.lost = w.lost;
          ResolveWay(pair, paths, flow, now_ns, o);
          // Explained by a link the last tick blamed for loss: that blame escalates it, not a lead.
          bool explained = false;
          tomography_.ForEachCandidate(o, [&](LinkIndex l, double) {
            explained |= l < loss_blamed_.size() && loss_blamed_[l];
          });
          if (explained) return;
          const std::optional<LinkBlame> lead = tomography_.LeadOf(o, spec);
          if (!lead || !led.insert(lead->link).second) return;
          const std::string element = "link:" + map_->links()[lead->link].id;
          if (tracker_.HealthOf(element) != ElementHealth::kOk) return;
          // The fabric links the lost flow surely crossed: each may fire at the next tick on its
          // dense data alone, as after a lead seen at a tick (LeadLinks).
          tomography_.ForEachCandidate(o, [&](LinkIndex l, double wt) {
            if (wt < 0.999 || map_->links()[l].IsAccess()) return;
            tracker_.WeakBeforeNextTick("link:" + map_->links()[l].id);
            if (watch_.size() != map_->links().size()) watch_.assign(map_->links().size(), 0);
            watch_[l] = 1;
            watching_ = true;
          });
          between_leads_.push_back(
              LeadRequest(ctx, element, lead->link, pair.src, pair.dst, flow.nic_flows,
                          pair.transport == Transport::kUdp ? FlowBit(flow.flow_id) : 0, paths));
          ++found;
          spdlog::debug(
              "component=analysis msg=\"lead between ticks\" link={} significance={:.1f} lost={}",
              map_->links()[lead->link].id, lead->significance, w.lost);
        });
    first = last;
  }
  if (found > 0) {
    MutexLock lock(views_mu_);
    stats_.between_tick_leads += found;
  }
}

int Analyzer::Recheck() {
  if (rechecks_.empty()) return 0;
  const int64_t now_ns = clock_.MonotonicNanos();
  const int64_t wall_ns = clock_.WallNanos();
  std::vector<TrackedFinding> opened;
  for (auto it = rechecks_.begin(); it != rechecks_.end();) {
    if (!tracker_.DenseRecheckable(it->element)) {
      it = rechecks_.erase(it);
      continue;
    }
    // The freshest probes of the link's flows, read where they are now: the two complete seconds
    // and this second so far, as a tick reads them (FlowWindow::fresh_*).
    std::map<NodeId, std::vector<const WatchedFlow*>> by_src;
    for (const WatchedFlow& f : it->flows) by_src[f.key.src].push_back(&f);
    double probes = 0, lost = 0;
    for (const auto& [src, of_src] : by_src) {
      const std::vector<const WatchedFlow*>& list = of_src;
      flows_.ScanFrom(src, now_ns, [&](const PairRef& p, const FlowRef& fr, const FlowWindow& w) {
        for (const WatchedFlow* f : list) {
          if (f->key == FlowKey{p.src, p.dst, p.transport, fr.src_port, fr.flow_id} &&
              f->paths == fr.paths) {
            probes += w.fresh_probes;
            lost += w.fresh_lost;
            break;
          }
        }
      });
    }
    // The tick's dense test (Blamer::FreshAlone) against the last tick's background.
    if (!BadAlone(recheck_spec_, lost, probes, config_.dense_confirm_min_probes)) {
      ++it;
      continue;
    }
    spdlog::debug(
        "component=analysis msg=\"dense between ticks\" element={} fresh_probes={:.0f} "
        "fresh_lost={:.0f}",
        it->element, probes, lost);
    const ElementTracker::Changes changes = tracker_.ConfirmDense(
        it->element, wall_ns,
        {{"fresh_loss_confirmed", 1}, {"recent_probes", probes}, {"dense_between_ticks", 1}});
    opened.insert(opened.end(), changes.material.begin(), changes.material.end());
    it = rechecks_.erase(it);
  }
  if (!opened.empty()) PublishFindings(opened);
  return static_cast<int>(opened.size());
}

void Analyzer::PublishFindings(const std::vector<TrackedFinding>& opened) {
  for (const TrackedFinding& f : opened) {
    spdlog::info("component=analysis msg=\"finding active\" id={} kind={} summary={}",
                 LogQuote(f.id), f.finding.kind, LogQuote(f.finding.summary));
  }
  uint64_t store_errors = 0;
  if (store_) {
    (void)store_->Save(opened);
    store_errors = store_->error_count();
  }
  std::vector<TrackedFinding> active = tracker_.ActiveFindings();
  MutexLock lock(views_mu_);
  active_view_ = std::move(active);
  stats_.active_findings = active_view_.size();
  if (store_) stats_.store_errors = store_errors;
}

void Analyzer::LogTimeline(const Evaluation& ev) const {
  if (map_) {
    for (int s = 0; s < kSignalCount; ++s) {
      for (const LinkBlame& b : ev.blames[s]) {
        spdlog::debug(
            "component=analysis msg=\"link blamed\" link={} signal={} estimate={:.4f} "
            "significance={:.1f} bad={} expected={:.0f} flows={} fresh_probes={:.0f} "
            "fresh_loss={:.4f} recent_probes={:.0f} recent_loss={:.4f} last_probes={:.0f} "
            "last_loss={:.4f}",
            map_->links()[b.link].id, SignalName(b.signal), b.estimate, b.significance, b.bad,
            b.expected, b.bad_flows, b.fresh_probes, b.fresh_loss, b.recent_probes, b.recent_loss,
            b.last_probes, b.last_loss);
      }
    }
    for (const LinkBlame& b : ev.weak_loss) {
      spdlog::debug(
          "component=analysis msg=\"link weakly lossy\" link={} estimate={:.4f} "
          "significance={:.1f} bad={} expected={:.0f}",
          map_->links()[b.link].id, b.estimate, b.significance, b.bad, b.expected);
    }
    for (const LinkBlame& b : ev.lead_loss) {
      spdlog::debug(
          "component=analysis msg=\"link lead\" link={} significance={:.1f} bad={} "
          "expected={:.0f}",
          map_->links()[b.link].id, b.significance, b.bad, b.expected);
    }
    for (const LinkBlame& b : ev.fresh_latency) {
      spdlog::debug(
          "component=analysis msg=\"link slow on the freshest seconds\" link={} estimate={:.4f} "
          "significance={:.1f} bad={} expected={:.0f} flows={}",
          map_->links()[b.link].id, b.estimate, b.significance, b.bad, b.expected, b.bad_flows);
    }
  }
  for (const std::string& element : ev.fresh_latency_leads) {
    spdlog::debug("component=analysis msg=\"fresh latency lead\" element={}", element);
  }
  for (const auto& [element, obs] : ev.observations) {
    spdlog::debug(
        "component=analysis msg=\"element bad\" element={} kind={} health={} escalated={}", element,
        obs.finding.kind, ElementHealthName(tracker_.HealthOf(element)),
        escalated_.contains(element) ? 1 : 0);
  }
}

void Analyzer::AddEscalationEvidence(Evaluation& ev, double now_s) {
  if (escalated_.empty() && escalation_evidence_.empty()) return;
  for (auto& [element, obs] : ev.observations) {
    if (auto it = escalated_.find(element); it != escalated_.end()) {
      double factor = 0;
      double flows = 0;  // raised, both directions
      for (const aggregator::EscalationPair& p : it->second.pairs) {
        factor = std::max(factor, p.rate_factor);
        flows += aggregator::RaisedFlowCount(p.a_flows, p.flows) +
                 aggregator::RaisedFlowCount(p.b_flows, p.flows);
      }
      // An escalation ends when its element fires; the finding keeps saying it was escalated.
      escalation_evidence_[element] = {
          {"escalated", 1},
          {"escalated_for_s", std::max(0.0, now_s - it->second.since_s)},
          {"escalated_pairs", static_cast<double>(it->second.pairs.size())},
          {"escalated_flows", flows},
          {"escalation_rate_factor", factor}};
    }
    if (auto it = escalation_evidence_.find(element); it != escalation_evidence_.end()) {
      for (const auto& [k, v] : it->second) obs.finding.evidence[k] = v;
    }
  }
}

void Analyzer::Evaluate(Evaluation& ev, double now_s) {
  // Fleet background per class for the next tick's judgements and for this tick's significance.
  for (int c = 0; c < kClassCount; ++c) {
    ClassStats& cls = class_stats_[c];
    // Trimmed means over pairs: the worst 10% of pairs (where faults are) do not count.
    cls.loss = TrimmedMean(ev.pair_loss[c], 0.9);
    cls.slow = TrimmedMean(ev.pair_slow[c], 0.9);
    if (!ev.goodputs[c].empty()) {
      std::vector<double> g(ev.goodputs[c].begin(), ev.goodputs[c].end());
      cls.bw_median = Median(g);
      cls.bw_history.emplace_back(now_s, cls.bw_median);
    }
    while (!cls.bw_history.empty() &&
           cls.bw_history.front().first < now_s - config_.bandwidth_window_s) {
      cls.bw_history.pop_front();
    }
    if (cls.bw_history.empty()) {
      cls.bw_expected = cls.bw_median;
    } else {
      std::vector<double> h;
      h.reserve(cls.bw_history.size());
      for (const auto& [t, m] : cls.bw_history) h.push_back(m);
      cls.bw_expected = std::max(cls.bw_median, Median(h));
    }
  }
  if (tick_count_ % 10 == 0 || baseline_warmup_) {
    // Class RTT baselines: median and MAD of the pairs' own medians (fleet comparison).
    std::array<std::vector<double>, kClassCount> medians;
    flows_.ForEachPair([&](const PairRef& r) {
      if (r.baseline.median_s > 0 && JudgesLatency(r.transport)) {
        medians[ClassIndex(r.paths.path_class)].push_back(r.baseline.median_s);
      }
    });
    for (int c = 0; c < kClassCount; ++c) {
      if (medians[c].size() < 3) continue;
      class_stats_[c].rtt_median_s = Median(medians[c]);
      class_stats_[c].rtt_mad_s = MedianAbsDeviation(medians[c], class_stats_[c].rtt_median_s);
    }
  }

  // Host guard: a host bad in one role and clean in the other is noisy itself; its flows in the
  // noisy role must not blame the network. It is judged per signal: a prober whose replies come
  // back late (CPU contention delays its receive path) still counts lost probes correctly, so its
  // loss evidence keeps speaking for the fabric.
  const AnalysisConfig& c = config_;
  const auto min_peers = static_cast<uint32_t>(c.host_min_flows);
  for (HostStats& h : ev.hosts) {
    const bool out_seen = h.out_pairs >= min_peers, in_seen = h.in_pairs >= min_peers;
    for (int k = 0; k < kSignalCount; ++k) {
      const bool out_bad = out_seen && h.out_bad_pairs_by[k] >= c.host_bad_fraction * h.out_pairs;
      const bool in_bad = in_seen && h.in_bad_pairs_by[k] >= c.host_bad_fraction * h.in_pairs;
      const bool out_clean =
          out_seen && h.out_bad_pairs_by[k] <= c.host_clean_fraction * h.out_pairs;
      const bool in_clean = in_seen && h.in_bad_pairs_by[k] <= c.host_clean_fraction * h.in_pairs;
      h.noisy_out_by[k] = out_bad && in_clean;
      h.noisy_in_by[k] = in_bad && out_clean;
      h.noisy_out = h.noisy_out || h.noisy_out_by[k];
      h.noisy_in = h.noisy_in || h.noisy_in_by[k];
    }
  }
  // A host with a high RDMA host delay (named by the host-delay level) posts and polls its
  // bandwidth bursts late and answers its peers' late: its low bursts are the host's, so its
  // flows' and pairs' bandwidth evidence blames no link and no pair. A median over the level
  // suffices here, before the delay has persisted long enough to name the host: setting evidence
  // aside names nothing.
  std::vector<bool> slow_host(ev.hosts.size(), false);
  for (const HostDelayVerdict& v : ev.host_delays) {
    if (v.over_level && v.node < slow_host.size()) slow_host[v.node] = true;
  }
  for (auto& [key, p] : ev.pairs) {
    if (p.a < slow_host.size() && p.b < slow_host.size() && (slow_host[p.a] || slow_host[p.b])) {
      p.bw = p.bw_bad = 0;
      p.bw_ratio_sum = 0;
    }
  }
  for (FlowObs& o : ev.deferred) {
    const HostStats& src = ev.hosts[o.src];
    const HostStats& dst = ev.hosts[o.dst];
    auto noisy = [&](Signal s) {
      const int k = static_cast<int>(s);
      if (s == Signal::kBandwidth && (slow_host[o.src] || slow_host[o.dst])) return true;
      return src.noisy_out_by[k] || dst.noisy_in_by[k];
    };
    if (noisy(Signal::kLoss)) {
      o.probes = o.lost = o.recent_probes = o.recent_lost = o.last_probes = o.last_lost = 0;
      o.fresh_probes = o.fresh_lost = o.lost_run = 0;
    }
    if (noisy(Signal::kLatency)) {
      o.rtt = o.slow = o.recent_rtt = o.recent_slow = o.fresh_rtt = o.fresh_slow = 0;
      o.ratio_sum = 0;
    }
    if (noisy(Signal::kBandwidth)) {
      o.bw_ratio = -1;
      o.bw_bad = false;
    }
    if (o.probes == 0 && o.rtt == 0 && o.bw_ratio < 0) continue;
    tomography_.Add(o);
  }

  // The background is what healthy paths show: the cleanest class with enough pairs (in a small
  // fabric one bad uplink touches most inter-leaf pairs, but no intra-leaf pair: 2 spines x 3
  // leaves x 2 hosts has 12 inter-leaf pairs, 8 of them crossing any one uplink, and only 6
  // intra-leaf pairs, which must count or the fault hides in its own background).
  double loss_bg = 1, slow_bg = 1;
  const auto min_pairs = static_cast<size_t>(std::max(1, c.background_min_pairs));
  for (int k = 0; k < kClassCount; ++k) {
    if (ev.pair_loss[k].size() >= min_pairs) loss_bg = std::min(loss_bg, class_stats_[k].loss);
    if (ev.pair_slow[k].size() >= min_pairs) slow_bg = std::min(slow_bg, class_stats_[k].slow);
  }
  loss_bg = std::max(loss_bg == 1 ? 0.0 : loss_bg, c.background_loss_floor);
  slow_bg = std::max(slow_bg == 1 ? 0.0 : slow_bg, c.background_slow_floor);
  ev.specs[static_cast<int>(Signal::kLoss)] = SignalSpec{
      static_cast<double>(c.min_probes), c.min_flows, c.loss_ratio, c.loss_significance, loss_bg};
  ev.specs[static_cast<int>(Signal::kLatency)] =
      SignalSpec{static_cast<double>(c.min_rtt_samples), c.min_flows, c.slow_fraction,
                 c.slow_significance, slow_bg};
  ev.specs[static_cast<int>(Signal::kBandwidth)] =
      SignalSpec{static_cast<double>(c.min_flows), c.min_flows, c.bad_bandwidth_fraction,
                 c.bandwidth_significance, c.background_bandwidth_floor};
  for (int s = 0; s < kSignalCount; ++s) {
    ev.blames[s] = tomography_.Localize(static_cast<Signal>(s), ev.specs[s]);
  }
  // Weak loss before the blame step: a link's dense confirmation waits while a link beside it
  // under the same switch loses probes too (Blamer::SiblingLossy).
  if (c.escalate_loss_significance > 0 && c.escalate_loss_significance < c.loss_significance) {
    SignalSpec weak = ev.specs[static_cast<int>(Signal::kLoss)];
    weak.significance = c.escalate_loss_significance;
    weak.min_flows = std::max(1, std::min(c.escalate_min_flows, c.min_flows));
    ev.weak_loss = tomography_.Localize(Signal::kLoss, weak);
  }
  if (c.escalate_lead_significance > 0 && map_) {
    // After the weak pass: the lost flows it left unexplained. One lost probe among a link's ~200
    // in the window is under a finding's loss ratio: significance alone decides a lead.
    SignalSpec lead = ev.specs[static_cast<int>(Signal::kLoss)];
    lead.significance = c.escalate_lead_significance;
    ev.lead_loss = tomography_.Leads(lead);
  }
  if (c.correlated_fresh_latency_lead && map_) {
    ev.fresh_latency =
        tomography_.LocalizeFreshLatency(ev.specs[static_cast<int>(Signal::kLatency)]);
  }
  BuildObservations(BlameContext{map_.get(), flows_, tomography_, config_, &tracker_, rails_.get()},
                    ev);
  // A fresh start: until half of the pairs have a baseline of their own, baselines refresh more
  // often, so that latency is judged (against the class first) seconds after the first samples.
  baseline_warmup_ = 2 * ev.latency_pairs_ready < ev.latency_pairs;
}

void Analyzer::Publish(const ElementTracker::Changes& changes, const Evaluation& ev, double now_s,
                       int64_t now_wall_ns) {
  (void)now_wall_ns;
  std::vector<LinkView> links =
      BuildLinkViews(BlameContext{map_.get(), flows_, tomography_, config_}, ev, tracker_);
  std::vector<TrackedFinding> active = tracker_.ActiveFindings();
  for (const TrackedFinding& f : changes.material) {
    spdlog::info("component=analysis msg=\"finding {}\" id={} kind={} summary={}",
                 f.active ? "active" : "resolved", LogQuote(f.id), f.finding.kind,
                 LogQuote(f.finding.summary));
  }
  uint64_t store_errors = 0;
  if (store_) {
    std::vector<TrackedFinding> batch = changes.material;
    const auto now_whole = static_cast<int64_t>(now_s);
    if (now_whole - last_persist_s_ >= kPersistEverySeconds) {
      batch.insert(batch.end(), changes.touched.begin(), changes.touched.end());
      last_persist_s_ = now_whole;
    }
    if (!batch.empty()) {
      // Errors are counted and logged by the store; the analyzer keeps running in memory.
      (void)store_->Save(batch);
    }
    store_errors = store_->error_count();
  }
  const uint64_t delay_refused = host_delays_.refused(), loss_refused = rdma_losses_.refused();
  MutexLock lock(views_mu_);
  links_view_ = std::move(links);
  active_view_ = std::move(active);
  for (const TrackedFinding& f : changes.material) {
    if (f.active) continue;
    history_.push_back(f);
    while (history_.size() > static_cast<size_t>(std::max(0, config_.history_limit))) {
      history_.pop_front();
    }
  }
  stats_.ticks = tick_count_;
  stats_.flows = ev.flows;
  stats_.bad_flows = ev.bad_flows;
  stats_.pairs = ev.pairs_seen;
  stats_.active_findings = active_view_.size();
  stats_.baselines_ready = ev.baselines_ready;
  stats_.cpu_saturated_bursts = ev.cpu_saturated_bursts;
  stats_.noisy_hosts =
      static_cast<size_t>(std::count_if(ev.hosts.begin(), ev.hosts.end(), [](const HostStats& h) {
        return h.noisy_in || h.noisy_out;
      }));
  stats_.store_errors = store_errors;
  stats_.rdma_host_delay_refused = delay_refused;
  stats_.rdma_loss_refused = loss_refused;
}

std::vector<TrackedFinding> Analyzer::Findings(bool active_only) const {
  MutexLock lock(views_mu_);
  std::vector<TrackedFinding> out = active_view_;
  std::stable_sort(out.begin(), out.end(), [](const TrackedFinding& a, const TrackedFinding& b) {
    const int sa = a.finding.severity == Severity::kCritical ? 0 : 1;
    const int sb = b.finding.severity == Severity::kCritical ? 0 : 1;
    return std::tie(sa, a.finding.kind, a.id) < std::tie(sb, b.finding.kind, b.id);
  });
  if (!active_only) out.insert(out.end(), history_.rbegin(), history_.rend());
  return out;
}

std::vector<LinkView> Analyzer::Links() const {
  MutexLock lock(views_mu_);
  return links_view_;
}

TickStats Analyzer::stats() const {
  MutexLock lock(views_mu_);
  return stats_;
}

}  // namespace fw::analysis
