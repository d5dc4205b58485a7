// Internal to the analyzer: the blame step, one class whose levels live in files of their own
// (blame_host.cc, blame_link.cc, blame_nic.cc, blame_pair.cc, blame_node_findings.cc) and whose
// shared judgements (a verdict's level, confidence, description, port counters) are here.
// Link blames become link, switch, NIC or host observations; pairs without a map path become pair
// or host observations; noisy hosts are named as such.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "daemon/aggregator/analysis/evaluation.h"
#include "daemon/aggregator/analysis/robust_stats.h"

namespace fw::analysis::blame {

using aggregator::kNoIndex;
using aggregator::Link;

inline std::string Fmt(const char* format, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), format, a, b, c, d);
  return buf;
}

// The blames of one link (or one group of indistinguishable links), by signal.
struct Verdict {
  std::vector<LinkIndex> group;
  std::array<const LinkBlame*, kSignalCount> sig{};
  // A group blamed on bandwidth alone, over untraced candidates, where traced flows exist and none
  // blames one of its links yet: it waits (ConfirmBandwidthGroups).
  bool bandwidth_unconfirmed = false;
  const LinkBlame* loss() const { return sig[static_cast<int>(Signal::kLoss)]; }
  const LinkBlame* latency() const { return sig[static_cast<int>(Signal::kLatency)]; }
  const LinkBlame* bandwidth() const { return sig[static_cast<int>(Signal::kBandwidth)]; }
};

enum class Level { kDown, kDegraded, kLatency };

// One tick's blame step over `ev` (see BuildObservations). The levels are public so that each can
// be tested on its own; Run() calls them in order.
class Blamer {
 public:
  Blamer(const BlameContext& ctx, Analyzer::Evaluation& ev) : ctx_(ctx), c_(ctx.config), ev_(ev) {}

  void Run() {
    HostLevel();
    if (ctx_.map) LinkLevel();
    PairLevel();
    NodeFindingLevel();
    RdmaLossLevel();
    HostDelayLevel();
  }

  // The levels, in Run()'s order.
  void HostLevel();
  void LinkLevel();
  // Switches (not rolled up in this evaluation) whose links queue on the freshest seconds alone,
  // correlated: Evaluation::fresh_latency_leads (AnalysisConfig::correlated_fresh_latency_lead).
  // `with_data`: per switch, its fabric links with probes in the window.
  // `rolled`: LinkLevel's switch roll-ups with their verdicts.
  void FreshLatencyLeads(
      const std::vector<uint32_t>& with_data,
      const std::map<aggregator::SwitchIndex, std::vector<const Verdict*>>& rolled);
  void PairLevel();
  void NodeFindingLevel();
  // A device shared by the lossy rdma_ud device pairs (rdma_loss.h) is a NIC fault.
  void RdmaLossLevel();
  // Last: a host or NIC that an earlier level named this tick gets the delays as more evidence.
  void HostDelayLevel();

 private:
  Level LevelOf(const Verdict& v) const {
    const LinkBlame* loss = v.loss();
    if (loss && loss->recent_probes >= 3 && loss->recent_loss >= c_.down_loss_ratio) {
      return Level::kDown;
    }
    // The last complete second alone, with enough probes: the first second of an outage, while
    // the two-second figure still holds a second before it (the flap reading, Instants(), uses
    // the same second).
    if (loss && loss->last_probes >= c_.down_last_second_min_probes &&
        loss->last_loss >= c_.down_loss_ratio) {
      return Level::kDown;
    }
    // Every flow across it (but a tenth) loses every probe now, over enough of them.
    if (loss && loss->sure_flows >= static_cast<uint32_t>(std::max(1, c_.down_run_min_flows)) &&
        loss->dead_flows >= c_.down_loss_ratio * loss->sure_flows &&
        loss->dead_run >= c_.down_run_min_lost) {
      return Level::kDown;
    }
    // Queueing with little loss is congestion even when probe bursts get less goodput: a busy
    // link shares its capacity. Lower goodput without queueing is a degraded link (half speed).
    if (loss) return Level::kDegraded;
    const LinkBlame* latency = v.latency();
    if (!latency) return Level::kDegraded;
    // ...unless the queue comes and goes (most probes are not slow) on a link that gives our
    // bursts a small share of the expected goodput: the bursts themselves fill a slow link.
    const LinkBlame* bw = v.bandwidth();
    if (bw && bw->bandwidth_ratio <= c_.self_queue_bandwidth_ratio &&
        latency->estimate < c_.standing_queue_fraction) {
      return Level::kDegraded;
    }
    return Level::kLatency;
  }

  double Confidence(const Verdict& v) const {
    double best = 0;
    for (const LinkBlame* b : v.sig) {
      if (b) best = std::max(best, b->bad_flows / (b->bad_flows + 1.0));
    }
    return best / static_cast<double>(v.group.size());
  }

  // "drops 4.8% of the probes crossing it (312 lost across 57 flows)" and evidence, per signal.
  std::string Describe(const Verdict& v, Finding& f) const {
    std::string out;
    if (const LinkBlame* b = v.loss()) {
      out += Fmt("drops %.1f%% of the probes crossing it (%.0f lost across %.0f flows",
                 100 * b->estimate, b->bad, b->bad_flows);
      out += Fmt("; %.0f%% in the last 2 s)", 100 * b->recent_loss);
      f.evidence["loss_ratio"] = b->estimate;
      f.evidence["lost"] = b->bad;
      f.evidence["probes"] = b->expected;
      f.evidence["recent_loss_ratio"] = b->recent_loss;
      if (b->sure_flows > 0) {
        f.evidence["flows_losing_every_probe"] = b->dead_flows;
        f.evidence["flows_with_fresh_probes"] = b->sure_flows;
      }
      f.evidence["bad_flows"] = b->bad_flows;
      f.evidence["significance"] = b->significance;
    }
    if (const LinkBlame* b = v.latency()) {
      if (!out.empty()) out += ", and ";
      out += Fmt(
          "inflates RTT: %.0f%% of samples are slow, %.1fx the baseline on average (%.0f flows)",
          100 * b->estimate, b->inflation, b->bad_flows);
      f.evidence["slow_fraction"] = b->estimate;
      f.evidence["latency_inflation"] = b->inflation;
      f.evidence["slow_flows"] = b->bad_flows;
    }
    if (const LinkBlame* b = v.bandwidth()) {
      if (!out.empty()) out += ", and ";
      out += Fmt("delivers %.0f%% of the expected bandwidth (%.0f of %.0f bursts were low)",
                 100 * b->bandwidth_ratio, b->bad, b->expected);
      f.evidence["bandwidth_ratio"] = b->bandwidth_ratio;
      f.evidence["bandwidth_bad_samples"] = b->bad;
    }
    if (v.group.size() > 1) f.evidence["candidates"] = static_cast<double>(v.group.size());
    PathSources({&v}, f);
    return out;
  }

  // How the paths of the bad flows a verdict explains were known: traced by their agents, the
  // map's (deterministic routing), or only their equal-cost candidates.
  void PathSources(const std::vector<const Verdict*>& list, Finding& f) const {
    std::array<double, kPathSourceCount> count{};
    std::set<uint32_t> seen;
    for (const Verdict* v : list) {
      for (const LinkBlame* b : v->sig) {
        if (!b) continue;
        for (uint32_t i : b->explained) {
          if (seen.insert(i).second) {
            ++count[static_cast<int>(ctx_.tomography.bad_flows()[i].path_source)];
          }
        }
      }
    }
    for (int s = 0; s < kPathSourceCount; ++s) {
      f.evidence[std::string("paths_") + PathSourceName(static_cast<PathSource>(s))] = count[s];
    }
  }

  // Port-counter signals of a node's NIC ports: (ports sampled, ports showing congestion).
  std::pair<int, int> PortCongestion(const std::string& node, const std::string& device) const {
    int sampled = 0, congested = 0;
    for (auto it = ev_.ports.lower_bound({node, device.empty() ? "" : device, 0});
         it != ev_.ports.end() && std::get<0>(it->first) == node; ++it) {
      if (!device.empty() && std::get<1>(it->first) != device) break;
      const PortSample& p = it->second;
      ++sampled;
      if (p.congestion_ratio >= c_.port_congestion_ratio || p.cnp_rate >= c_.port_cnp_rate ||
          p.ecn_rate >= c_.port_ecn_rate) {
        ++congested;
      }
    }
    return {sampled, congested};
  }
  bool PortDown(const std::string& node, const std::string& device) const {
    for (auto it = ev_.ports.lower_bound({node, device, 0});
         it != ev_.ports.end() && std::get<0>(it->first) == node &&
         std::get<1>(it->first) == device;
         ++it) {
      if (!it->second.up) return true;
    }
    return false;
  }
  // Corroboration of congestion on a switch link: the counters of the endpoints of its slow flows.
  void CorroborateCongestion(const LinkBlame& b, Finding& f) {
    std::set<NodeId> nodes;
    for (uint32_t i : b.explained) {
      const FlowObs& o = ctx_.tomography.bad_flows()[i];
      nodes.insert(o.src);
      nodes.insert(o.dst);
      if (nodes.size() >= 64) break;
    }
    int sampled = 0, congested = 0;
    for (NodeId n : nodes) {
      const auto [s, k] = PortCongestion(ctx_.names.NodeName(n), "");
      sampled += s > 0;
      congested += k > 0;
    }
    if (sampled == 0) return;
    f.evidence["ports_sampled"] = sampled;
    f.evidence["ports_congested"] = congested;
    if (2 * congested >= sampled) {
      f.confidence = 1 - (1 - f.confidence) / 2;
      f.summary +=
          Fmt(" Port counters agree: %.0f of %.0f endpoint NICs report congestion (xmit_wait, CNP "
              "or ECN).",
              congested, sampled);
    }
  }

  // Congestion when the links queue and none loses probes. Explain-away runs per signal, so one
  // link may keep only its bandwidth evidence: it does not make a congested switch "degraded".
  static bool QueuesWithoutLoss(const std::vector<const Verdict*>& list) {
    bool any_loss = false, any_latency = false;
    for (const Verdict* v : list) {
      any_loss = any_loss || v->loss();
      any_latency = any_latency || v->latency();
    }
    return any_latency && !any_loss;
  }
  static void SetSwitchKind(Finding& f, bool congestion) {
    f.kind = congestion ? "congestion" : "switch_degraded";
    f.severity = congestion ? Severity::kWarning : Severity::kCritical;
  }

  // Confirmation of a latency-only verdict: long for mild queueing, the usual for a severe one,
  // short for queueing on `correlated_links` links of one switch at once (a switch or far-end
  // roll-up: background episodes are independent per link).
  int LatencyConfirm(const std::vector<const Verdict*>& list, size_t correlated_links = 0) const {
    double worst = 0;
    for (const Verdict* v : list) {
      if (const LinkBlame* lat = v->latency()) worst = std::max(worst, lat->inflation);
    }
    if (worst >= c_.severe_latency_inflation) return 0;
    if (correlated_links >= CorrelatedLinksNeeded()) {
      return FreshCorrelatedLatency(list) ? c_.correlated_fresh_latency_confirm_ticks
                                          : c_.correlated_latency_confirm_ticks;
    }
    return c_.latency_confirm_ticks;
  }
  size_t CorrelatedLinksNeeded() const {
    return static_cast<size_t>(std::max(2, c_.correlated_latency_links));
  }
  // Whether at least CorrelatedLinksNeeded() verdicts of `list` queue on the freshest seconds
  // alone (FreshLatency).
  bool FreshCorrelatedLatency(const std::vector<const Verdict*>& list) const {
    return FreshLatencyLinks(list) >= CorrelatedLinksNeeded();
  }
  // Whether a latency-only roll-up of `correlated_links` links (a switch, far ends) is densely
  // confirmed in this evaluation (AnalysisConfig::correlated_fresh_latency_dense): correlated,
  // queueing on the freshest seconds, not severe (which confirms in confirm_ticks anyway). The
  // tracker keeps the element's longest confirmation, so an evaluation that fails the fresh test
  // (asking for correlated_latency_confirm_ticks) rules the dense path out for the suspicion.
  bool DenseCorrelatedLatency(const std::vector<const Verdict*>& list,
                              size_t correlated_links) const {
    return c_.correlated_fresh_latency_dense &&
           LatencyConfirm(list, correlated_links) == c_.correlated_fresh_latency_confirm_ticks &&
           correlated_links >= CorrelatedLinksNeeded() && FreshCorrelatedLatency(list);
  }
  // Whether the verdict's latency is slow on the last two complete seconds alone: at least
  // min_rtt_samples samples on the link, slow_fraction of them slow, at slow_significance against
  // this tick's background (AnalysisConfig::correlated_fresh_latency_confirm_ticks).
  bool FreshLatency(const Verdict& v) const {
    const LinkBlame* lat = v.latency();
    return lat &&
           FreshAlone(Signal::kLatency, lat->recent_slow, lat->recent_rtt, c_.min_rtt_samples);
  }
  // Whether `fraction` of `samples` (the last two complete seconds) is bad at a finding's level
  // for `signal` on its own: at least `min_samples`, the signal's threshold, and its significance
  // against this tick's background.
  bool FreshAlone(Signal signal, double fraction, double samples, double min_samples) const {
    return BadAlone(ev_.specs[static_cast<int>(signal)], std::round(fraction * samples), samples,
                    min_samples);
  }
  // Verdicts of `list` whose latency is slow on the freshest data alone (FreshLatency); a group
  // of tied links counts once.
  size_t FreshLatencyLinks(const std::vector<const Verdict*>& list) const {
    return static_cast<size_t>(std::count_if(list.begin(), list.end(),
                                             [&](const Verdict* v) { return FreshLatency(*v); }));
  }
  // Unconfirmed bandwidth groups (every verdict of `list`) wait as long as latency alone does.
  int BandwidthWait(const std::vector<const Verdict*>& list) const {
    const bool all = !list.empty() && std::all_of(list.begin(), list.end(), [](const Verdict* v) {
      return v->bandwidth_unconfirmed;
    });
    return all ? c_.latency_confirm_ticks : 0;
  }
  // Drops bandwidth-only candidate groups that traced evidence explains; marks the rest waiting.
  void ConfirmBandwidthGroups(std::map<LinkIndex, Verdict>& verdicts);
  // " Worst link: leaf1~spine2, which drops 4.8% ...": the figures of the verdict of `list` with
  // the most bad flows, for the summaries of roll-ups; its evidence goes into `f` as well.
  std::string WorstFigures(const std::vector<const Verdict*>& list, Finding& f) const;

  // In a multi-rail fabric, the rail of the finding's element (evidence `rail`), said in its
  // summary (blame_rail.cc).
  void AddRail(Finding& f) const;

  // Emits `f` for `key`, or adds its evidence to an observation of `key` emitted this tick.
  void Merge(const std::string& key, Finding f);

  void Emit(std::string key, Finding f, bool can_flap, int confirm_ticks = 0,
            bool dense_confirmed = false) {
    AddRail(f);
    ev_.observations.emplace_back(
        std::move(key), Observation{std::move(f), can_flap, confirm_ticks, dense_confirmed});
  }

  // Whether the verdict's loss is significant on the freshest probes alone (the last two complete
  // seconds and the tick's own second so far, LinkBlame::fresh_*), at a finding's level
  // (loss_significance and loss_ratio against this tick's background, from at least
  // dense_confirm_min_probes probes): the freshest data, escalated where escalation is in force,
  // confirms the suspicion (Observation::dense_confirmed). The tick's own second counts because
  // the probes an escalation raises arrive from the tick that raised them on, and the complete
  // seconds hold them only up to the last second boundary, anywhere in the tick's period.
  bool FreshLoss(const Verdict& v) const {
    const LinkBlame* loss = v.loss();
    return loss && FreshAlone(Signal::kLoss, loss->fresh_loss, loss->fresh_probes,
                              c_.dense_confirm_min_probes);
  }

  // Unresolved ECMP groups. One group is "one of these links" (Ambiguous). When most of the
  // switches wired to the same far ends each have such a group toward them (every leaf's uplinks
  // to the spines look alike), the fault is at the far ends: one finding for that set of switches
  // replaces a finding per leaf. Which of them, ECMP hides; the far end of a group is the same for
  // every spine, so no evidence can name one.
  void AmbiguousGroups(const std::vector<const Verdict*>& groups);

  void FarEndFinding(const std::vector<aggregator::SwitchIndex>& far,
                     const std::vector<const Verdict*>& list, size_t bad, size_t wired);

  // The last complete second read as down (≥ down_loss_ratio) or up (< 50 %), for flapping.
  void Instants(const Verdict& v, const std::string& key);

  std::string ElementOf(LinkIndex l) const {
    const Link& link = ctx_.map->links()[l];
    if (link.IsAccess()) {
      const auto& nic = ctx_.map->host_nics()[link.host_nic];
      return "nic:" + nic.node + "/" + nic.nic;
    }
    return "link:" + link.id;
  }

  void Ambiguous(const Verdict& v);

  std::string GroupKey(const Verdict& v) const {
    if (v.group.size() == 1) return ElementOf(v.group.front());
    std::string key = "links:";
    for (LinkIndex l : v.group) key += (key.size() > 6 ? "," : "") + ctx_.map->links()[l].id;
    return key;
  }

  // The lowest rate of bad observations over all flows (RawEstimate) among the links of a group.
  // Blames' own estimates are not comparable with it: explain-away has removed flows from them,
  // and with unresolved ECMP they count bad observations whole against weighted expectations.
  double RawRate(const std::vector<LinkIndex>& group, Signal s) const {
    double lowest = 1;
    for (LinkIndex l : group) lowest = std::min(lowest, ctx_.tomography.RawEstimate(l, s, 0));
    return lowest;
  }

  // Whether link l's own rate over all its flows reaches `floor` (half the blamed links' median
  // rate) with enough observations, and its bad observations are as surprising under the
  // background as a blame's must be. The signal's absolute threshold is not asked: with unresolved
  // ECMP a leaf's uplinks show a quarter of a spine's rate, the same for every uplink.
  bool LikeTheBlamed(LinkIndex l, Signal s, double floor) const {
    const SignalSpec& spec = ev_.specs[static_cast<int>(s)];
    const double raw = ctx_.tomography.RawEstimate(l, s, spec.min_expected);
    return raw > 0 && raw >= floor &&
           ctx_.tomography.RawSurprise(l, s, spec.background) >= spec.significance;
  }

  // The switches that every link of `group` touches.
  std::vector<aggregator::SwitchIndex> CommonSwitches(const std::vector<LinkIndex>& group) const {
    const Link& first = ctx_.map->links()[group.front()];
    std::vector<aggregator::SwitchIndex> out;
    for (aggregator::SwitchIndex sw : {first.a, first.b}) {
      if (sw == kNoIndex) continue;
      const bool all = std::all_of(group.begin(), group.end(), [&](LinkIndex l) {
        const Link& link = ctx_.map->links()[l];
        return link.a == sw || link.b == sw;
      });
      if (all) out.push_back(sw);
    }
    return out;
  }

  void SwitchFinding(aggregator::SwitchIndex sw, const std::vector<const Verdict*>& list,
                     const std::vector<LinkIndex>& alike, uint32_t bad_links, uint32_t with_data);

  void SwitchLink(const Verdict& v);

  // Whether a fabric link other than `l` that shares a switch with it loses probes in this
  // evaluation on its own unexplained flows (a loss blame, or weak loss): a fault of that switch
  // may be what `l` shows, so `l` waits (AnalysisConfig::switch_wait_ticks) and the switch
  // roll-up, which needs its links blamed alike, gets the evaluations it needs (`lossy_` is
  // filled by LinkLevel).
  bool SiblingLossy(LinkIndex l) const {
    const Link& link = ctx_.map->links()[l];
    for (aggregator::SwitchIndex sw : {link.a, link.b}) {
      if (sw == kNoIndex) continue;
      auto it = lossy_.find(sw);
      if (it == lossy_.end()) continue;
      if (std::any_of(it->second.begin(), it->second.end(), [l](LinkIndex x) { return x != l; })) {
        return true;
      }
    }
    return false;
  }

  // Whether a switch of fabric link `l` (lossy at rate `loss` in the window) is not cleared of
  // what `l` shows: its flows that avoid `l` had too few probes in the window to show
  // `switch_clear_expected` lost ones at that rate, or lost `switch_clear_lost_share` of those
  // (AnalysisConfig).
  bool SwitchNotCleared(LinkIndex l, double loss) const {
    const Link& link = ctx_.map->links()[l];
    if (link.IsAccess() || loss <= 0 || c_.switch_clear_expected <= 0) return false;
    const Tomography::Counts mine = ctx_.tomography.SureOfLink(l);
    if (mine.probes <= 0) return false;  // no flow surely crossed it: nothing to compare with
    for (aggregator::SwitchIndex sw : {link.a, link.b}) {
      if (sw == kNoIndex) continue;
      const Tomography::Counts all = ctx_.tomography.SureOfSwitch(sw);
      const double expected = std::max(0.0, all.probes - mine.probes) * loss;
      const double lost = std::max(0.0, all.lost - mine.lost);
      if (expected < c_.switch_clear_expected || lost >= c_.switch_clear_lost_share * expected) {
        return true;
      }
    }
    return false;
  }

  // Whether a switch of link `l` has a finding (firing or recovering) in the tracker.
  bool SwitchOfLinkFiring(LinkIndex l) const {
    if (!ctx_.tracker) return false;
    const Link& link = ctx_.map->links()[l];
    for (aggregator::SwitchIndex sw : {link.a, link.b}) {
      if (sw == kNoIndex) continue;
      const ElementHealth h = ctx_.tracker->HealthOf("switch:" + ctx_.map->switches()[sw].name);
      if (h == ElementHealth::kFiring || h == ElementHealth::kRecovering) return true;
    }
    return false;
  }

  void NodeNics(const std::string& node, const std::vector<const Verdict*>& list);

  void Nic(const std::string& node, const Verdict& v);

  bool PathBlamed(const PathSet& p) const {
    if (blamed_.count(p.src_access) || blamed_.count(p.dst_access)) return true;
    if (!p.core) return false;
    for (const auto& path : p.core->paths) {
      for (LinkIndex l : path) {
        if (blamed_.count(l)) return true;
      }
    }
    return false;
  }

  const BlameContext& ctx_;
  const AnalysisConfig& c_;
  Analyzer::Evaluation& ev_;
  std::set<NodeId> noisy_;
  std::set<LinkIndex> blamed_;
  // Fabric links with loss evidence (a loss blame or weak loss) in this evaluation, by switch.
  std::map<aggregator::SwitchIndex, std::set<LinkIndex>> lossy_;
};

}  // namespace fw::analysis::blame
