// Blame levels: link blames become link, switch, NIC or host observations; pairs without a map path
// become pair or host observations; noisy hosts are named as such.
#include <algorithm>
#include <cstdio>
#include <set>

#include "daemon/aggregator/analysis/evaluation.h"
#include "daemon/aggregator/analysis/robust_stats.h"

namespace fw::analysis {
namespace {

using aggregator::kNoIndex;
using aggregator::Link;

std::string Fmt(const char* format, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), format, a, b, c, d);
  return buf;
}

// The blames of one link (or one group of indistinguishable links), by signal.
struct Verdict {
  std::vector<LinkIndex> group;
  std::array<const LinkBlame*, kSignalCount> sig{};
  const LinkBlame* loss() const { return sig[static_cast<int>(Signal::kLoss)]; }
  const LinkBlame* latency() const { return sig[static_cast<int>(Signal::kLatency)]; }
  const LinkBlame* bandwidth() const { return sig[static_cast<int>(Signal::kBandwidth)]; }
};

enum class Level { kDown, kDegraded, kLatency };

class Blamer {
 public:
  Blamer(const BlameContext& ctx, Analyzer::Evaluation& ev) : ctx_(ctx), c_(ctx.config), ev_(ev) {}

  void Run() {
    HostLevel();
    if (ctx_.map) LinkLevel();
    PairLevel();
    NodeFindingLevel();
  }

 private:
  Level LevelOf(const Verdict& v) const {
    const LinkBlame* loss = v.loss();
    if (loss && loss->recent_probes >= 3 && loss->recent_loss >= c_.down_loss_ratio) {
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
    return out;
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

  // Confirmation of a latency-only verdict: long for mild queueing, the usual for a severe one.
  int LatencyConfirm(const std::vector<const Verdict*>& list) const {
    double worst = 0;
    for (const Verdict* v : list) {
      if (const LinkBlame* lat = v->latency()) worst = std::max(worst, lat->inflation);
    }
    return worst >= c_.severe_latency_inflation ? 0 : c_.latency_confirm_ticks;
  }

  void Emit(std::string key, Finding f, bool can_flap, int confirm_ticks = 0) {
    ev_.observations.emplace_back(std::move(key),
                                  Observation{std::move(f), can_flap, confirm_ticks});
  }

  void HostLevel() {
    for (NodeId id = 0; id < ev_.hosts.size(); ++id) {
      const HostStats& h = ev_.hosts[id];
      if (!h.noisy_out && !h.noisy_in) continue;
      const std::string name = ctx_.names.NodeName(id);
      noisy_.insert(id);
      Finding f;
      f.kind = "host_network";
      f.severity = Severity::kWarning;
      f.location = FindingLocation{"node", name, name, "", 0};
      const double out = h.out_flows ? double(h.out_bad) / h.out_flows : 0;
      const double in = h.in_flows ? double(h.in_bad) / h.in_flows : 0;
      f.evidence = {{"bad_fraction_as_prober", out},
                    {"bad_fraction_as_target", in},
                    {"flows_as_prober", h.out_flows},
                    {"flows_as_target", h.in_flows}};
      const auto& by = h.noisy_out ? h.noisy_out_by : h.noisy_in_by;
      std::string signals;
      for (int s = 0; s < kSignalCount; ++s) {
        f.evidence[std::string("noisy_") + SignalName(static_cast<Signal>(s))] = by[s] ? 1 : 0;
        if (by[s]) signals += (signals.empty() ? "" : ", ") + std::string(SignalName(Signal(s)));
      }
      f.confidence = std::clamp(std::abs(out - in), 0.0, 0.99);
      const double mine = h.noisy_out ? out : in, other = h.noisy_out ? in : out;
      f.summary = name + (h.noisy_out ? "'s own probes are noisy (" : " answers probes badly (") +
                  signals + "): " + Fmt("%.0f%% of the peers it ", 100 * mine) +
                  (h.noisy_out ? "probes" : "is probed by") +
                  Fmt(" look bad while only %.0f%% in the other direction do; the host (CPU "
                      "contention, interrupts, NIC driver) is the likely cause, not the fabric.",
                      100 * other);
      // Latency alone waits as long as latency alone does elsewhere: when the aggregator falls
      // behind, a host's own results and its peers' results about it arrive seconds apart, so a
      // queueing episode on its cable reads as slow in one role only for a while (17 such
      // findings in an 11-minute saturated 16,000-agent run). Loss or bandwidth stay quick.
      const bool latency_only = by[static_cast<int>(Signal::kLatency)] &&
                                !by[static_cast<int>(Signal::kLoss)] &&
                                !by[static_cast<int>(Signal::kBandwidth)];
      Emit("node:" + name, std::move(f), false, latency_only ? c_.latency_confirm_ticks : 0);
    }
  }

  void LinkLevel() {
    const FabricMap& map = *ctx_.map;
    std::map<LinkIndex, Verdict> verdicts;
    for (int s = 0; s < kSignalCount; ++s) {
      for (const LinkBlame& b : ev_.blames[s]) {
        std::vector<LinkIndex> group{b.link};
        group.insert(group.end(), b.tied.begin(), b.tied.end());
        std::sort(group.begin(), group.end());
        Verdict& v = verdicts[group.front()];
        if (group.size() > v.group.size()) v.group = group;
        v.sig[s] = &b;
        for (LinkIndex l : group) blamed_.insert(l);
      }
    }
    // Switches: all (most) of a switch's links bad is one switch fault, not many link faults.
    std::vector<uint32_t> with_data(map.switches().size(), 0);
    for (LinkIndex l = 0; l < map.links().size(); ++l) {
      const Link& link = map.links()[l];
      if (link.IsAccess() || ctx_.tomography.totals()[l].probes <= 0) continue;
      ++with_data[link.a];
      ++with_data[link.b];
    }
    // A verdict counts for the switch that every link of it touches: a group of indistinguishable
    // links means "one of these" and counts once, for the switch its links share (a leaf's
    // uplinks: the leaf, never one of the spines).
    std::map<aggregator::SwitchIndex, std::set<LinkIndex>> bad_links;
    std::map<aggregator::SwitchIndex, std::array<std::vector<double>, kSignalCount>> estimates;
    for (const auto& [primary, v] : verdicts) {
      if (map.links()[primary].IsAccess()) continue;
      for (aggregator::SwitchIndex sw : CommonSwitches(v.group)) {
        bad_links[sw].insert(primary);
        if (v.group.size() > 1) continue;
        for (int s = 0; s < kSignalCount; ++s) {
          if (v.sig[s]) estimates[sw][s].push_back(RawRate(v.group, static_cast<Signal>(s)));
        }
      }
    }
    // A switch fault hits its links alike, but explain-away credits a flow that crossed two of its
    // links to the first one blamed, so the last links of a congested spine keep too few
    // unexplained flows to be blamed themselves. A link of a switch with blamed links counts as bad
    // when its own rate over all its flows is at least half the blamed links' median rate.
    std::map<aggregator::SwitchIndex, std::array<double, kSignalCount>> reference;
    for (auto& [sw, by_signal] : estimates) {
      for (int s = 0; s < kSignalCount; ++s) {
        reference[sw][s] = by_signal[s].empty() ? -1 : Median(by_signal[s]);
      }
    }
    // Only for a switch with at least two links blamed on their own evidence: with one, the raw
    // rates of its other links are the blamed link's shadow (on 2 spines x 3 leaves every flow
    // over leaf1~spine1 also crosses spine1's link to leaf2 or leaf3, so one congested uplink
    // made all three of spine1's links look alike and came out as switch_degraded on spine1).
    std::map<aggregator::SwitchIndex, size_t> blamed_count;
    for (const auto& [sw, links] : bad_links) blamed_count[sw] = links.size();
    std::map<aggregator::SwitchIndex, std::vector<LinkIndex>> alike;
    for (LinkIndex l = 0; l < map.links().size(); ++l) {
      const Link& link = map.links()[l];
      if (link.IsAccess() || blamed_.count(l) || ctx_.tomography.totals()[l].probes <= 0) continue;
      for (aggregator::SwitchIndex sw : {link.a, link.b}) {
        auto it = reference.find(sw);
        if (it == reference.end() || blamed_count[sw] < 2) continue;
        for (int s = 0; s < kSignalCount; ++s) {
          if (it->second[s] < 0) continue;
          if (LikeTheBlamed(l, static_cast<Signal>(s), 0.5 * it->second[s])) {
            bad_links[sw].insert(l);
            alike[sw].push_back(l);
            break;
          }
        }
      }
    }
    std::map<aggregator::SwitchIndex, std::vector<const Verdict*>> rolled;
    for (const auto& [sw, links] : bad_links) {
      // Hysteresis: a switch already blamed stays blamed while half of that share is bad.
      const bool firing =
          ctx_.tracker &&
          ctx_.tracker->HealthOf("switch:" + map.switches()[sw].name) >= ElementHealth::kFiring;
      const double fraction = firing ? c_.switch_fraction / 2 : c_.switch_fraction;
      if (links.size() >= 2 && links.size() >= fraction * with_data[sw]) rolled[sw];
    }
    std::map<std::string, std::vector<const Verdict*>> by_node;
    std::vector<const Verdict*> ambiguous;
    for (const auto& [primary, v] : verdicts) {
      // Subsumed by a switch when every link of the verdict touches that switch.
      bool subsumed = false;
      for (auto& [sw, list] : rolled) {
        // A copy: clang 14 does not let a lambda capture a structured binding.
        const aggregator::SwitchIndex s = sw;
        const bool all = std::all_of(v.group.begin(), v.group.end(), [&](LinkIndex l) {
          const Link& link = map.links()[l];
          return !link.IsAccess() && (link.a == s || link.b == s);
        });
        if (all) {
          list.push_back(&v);
          subsumed = true;
          break;
        }
      }
      if (subsumed) continue;
      if (v.group.size() > 1) {
        ambiguous.push_back(&v);
        continue;
      }
      const Link& link = map.links()[primary];
      if (link.IsAccess()) {
        by_node[map.host_nics()[link.host_nic].node].push_back(&v);
      } else {
        SwitchLink(v);
      }
      Instants(v, ElementOf(primary));
    }
    for (const auto& [sw, list] : rolled) {
      if (list.empty()) continue;  // its bad links all belong to verdicts of other switches
      SwitchFinding(sw, list, alike[sw], static_cast<uint32_t>(bad_links[sw].size()),
                    with_data[sw]);
    }
    for (const auto& [node, list] : by_node) NodeNics(node, list);
    AmbiguousGroups(ambiguous);
  }

  // Unresolved ECMP groups. One group is "one of these links" (Ambiguous). When most of the
  // switches wired to the same far ends each have such a group toward them (every leaf's uplinks
  // to the spines look alike), the fault is at the far ends: one finding for that set of switches
  // replaces a finding per leaf. Which of them, ECMP hides; the far end of a group is the same for
  // every spine, so no evidence can name one.
  void AmbiguousGroups(const std::vector<const Verdict*>& groups) {
    const FabricMap& map = *ctx_.map;
    std::map<std::vector<aggregator::SwitchIndex>, std::vector<const Verdict*>> by_far;
    for (const Verdict* v : groups) {
      const std::vector<aggregator::SwitchIndex> common = CommonSwitches(v->group);
      if (common.size() != 1 || map.links()[v->group.front()].IsAccess()) {
        Ambiguous(*v);
        continue;
      }
      std::vector<aggregator::SwitchIndex> far;
      for (LinkIndex l : v->group) {
        const Link& link = map.links()[l];
        far.push_back(link.a == common[0] ? link.b : link.a);
      }
      std::sort(far.begin(), far.end());
      by_far[far].push_back(v);
    }
    if (by_far.empty()) return;
    // Links with data between two switches, by switch and neighbor (fabric links only).
    std::map<aggregator::SwitchIndex, std::map<aggregator::SwitchIndex, LinkIndex>> neighbors;
    for (LinkIndex l = 0; l < map.links().size(); ++l) {
      const Link& link = map.links()[l];
      if (link.IsAccess() || ctx_.tomography.totals()[l].probes <= 0) continue;
      neighbors[link.a][link.b] = l;
      neighbors[link.b][link.a] = l;
    }
    for (const auto& [far, list] : by_far) {
      // As for a switch's links: explain-away leaves the last leaves' groups too few unexplained
      // flows, so a leaf wired to the same far ends whose links there all show at least half the
      // groups' median rate counts as alike.
      std::array<std::vector<double>, kSignalCount> estimates;
      std::set<aggregator::SwitchIndex> near;
      for (const Verdict* v : list) {
        near.insert(CommonSwitches(v->group).front());
        for (int s = 0; s < kSignalCount; ++s) {
          if (v->sig[s]) estimates[s].push_back(RawRate(v->group, static_cast<Signal>(s)));
        }
      }
      size_t wired = 0, alike = 0;
      for (const auto& [sw, links] : neighbors) {
        const bool all_wired =
            std::all_of(far.begin(), far.end(), [&ls = links](auto f) { return ls.count(f) > 0; });
        if (!all_wired) continue;
        ++wired;
        if (near.count(sw)) continue;
        for (int s = 0; s < kSignalCount; ++s) {
          if (estimates[s].empty()) continue;
          const double floor = 0.5 * Median(estimates[s]);
          const bool all_bad = std::all_of(far.begin(), far.end(), [&, &ls = links](auto f) {
            return LikeTheBlamed(ls.at(f), static_cast<Signal>(s), floor);
          });
          if (all_bad) {
            ++alike;
            break;
          }
        }
      }
      if (list.size() < 2 || list.size() + alike < c_.switch_fraction * wired) {
        for (const Verdict* v : list) Ambiguous(*v);
        continue;
      }
      FarEndFinding(far, list, list.size() + alike, wired);
    }
  }

  void FarEndFinding(const std::vector<aggregator::SwitchIndex>& far,
                     const std::vector<const Verdict*>& list, size_t bad, size_t wired) {
    std::string names;
    for (aggregator::SwitchIndex sw : far) {
      names += (names.empty() ? "" : ",") + ctx_.map->switches()[sw].name;
    }
    double conf = 0;
    for (const Verdict* v : list) conf += Confidence(*v) * v->group.size() / list.size();
    const bool congestion = QueuesWithoutLoss(list);
    Finding f;
    SetSwitchKind(f, congestion);
    f.location = FindingLocation{"switch", names, "", "", 0};
    f.evidence = {{"switches_alike", bad},
                  {"switches_grouped", list.size()},
                  {"switches_wired", wired},
                  {"candidates", far.size()}};
    f.summary = Fmt("The links of %.0f of the %.0f switches wired to ", bad, wired) + names +
                (congestion ? " show inflated latency with little loss, each switch's links alike"
                            : " look bad, each switch's links alike") +
                Fmt(": one of these %.0f switches (or all of them) is ", far.size()) +
                (congestion ? "congested" : "at fault") +
                "; ECMP hides which one: check their buffers and counters, or give the map "
                "deterministic routing.";
    f.confidence = conf / far.size();
    const std::string element = "switches:" + names;
    for (const Verdict* v : list) {
      for (LinkIndex l : v->group) ev_.link_elements[l] = {element, f.confidence};
      ev_.superseded.push_back(GroupKey(*v));
    }
    Emit(element, std::move(f), false, congestion ? LatencyConfirm(list) : 0);
  }

  // The last complete second read as down (≥ down_loss_ratio) or up (< 50 %), for flapping.
  void Instants(const Verdict& v, const std::string& key) {
    const LinkBlame* loss = v.loss();
    if (!loss || loss->last_probes < 3) return;
    if (loss->last_loss >= c_.down_loss_ratio) ev_.instants.emplace_back(key, true);
    if (loss->last_loss < 0.5) ev_.instants.emplace_back(key, false);
  }

  std::string ElementOf(LinkIndex l) const {
    const Link& link = ctx_.map->links()[l];
    if (link.IsAccess()) {
      const auto& nic = ctx_.map->host_nics()[link.host_nic];
      return "nic:" + nic.node + "/" + nic.nic;
    }
    return "link:" + link.id;
  }

  void Ambiguous(const Verdict& v) {
    const FabricMap& map = *ctx_.map;
    std::string ids;
    const std::string key = GroupKey(v);
    std::map<aggregator::SwitchIndex, size_t> count;
    for (LinkIndex l : v.group) {
      const Link& link = map.links()[l];
      ids += (ids.empty() ? "" : ", ") + link.id;
      ++count[link.a];
      if (link.b != kNoIndex) ++count[link.b];
    }
    Finding f;
    const Level level = LevelOf(v);
    f.kind = level == Level::kDown ? "link_down"
                                   : (level == Level::kDegraded ? "link_degraded" : "congestion");
    f.severity = level == Level::kLatency ? Severity::kWarning : Severity::kCritical;
    f.location.type = "link";
    f.location.id = map.links()[v.group.front()].id;
    for (const auto& [sw, n] : count) {
      if (n == v.group.size())
        f.location = FindingLocation{"switch", map.switches()[sw].name, "", "", 0};
    }
    f.summary = Fmt("One of %.0f links that carry the same flows (", v.group.size()) + ids + ") " +
                Describe(v, f) +
                "; ECMP hides which one: check each, or give the map deterministic routing.";
    f.confidence = Confidence(v);
    const std::string element = key;
    for (LinkIndex l : v.group) ev_.link_elements[l] = {element, f.confidence};
    // One of the group goes down and up: the group flaps (it used to stay link_down).
    Instants(v, element);
    Emit(element, std::move(f), true, level == Level::kLatency ? LatencyConfirm({&v}) : 0);
  }

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
                     const std::vector<LinkIndex>& alike, uint32_t bad_links, uint32_t with_data) {
    const std::string& name = ctx_.map->switches()[sw].name;
    double conf = 0;
    for (const Verdict* v : list) conf += Confidence(*v) / list.size();
    const bool latency_only = QueuesWithoutLoss(list);
    Finding f;
    SetSwitchKind(f, latency_only);
    f.location = FindingLocation{"switch", name, "", "", 0};
    f.evidence = {{"bad_links", bad_links},
                  {"links_with_data", with_data},
                  {"links_alike_unblamed", alike.size()}};
    f.summary = "Switch " + name + Fmt(": %.0f of its %.0f links ", bad_links, with_data) +
                (latency_only ? "show inflated latency with little loss; the switch is congested "
                                "(look at its buffers and the traffic through it)."
                              : "look bad; suspect the switch itself (line card, fabric, power) "
                                "before its links.");
    f.confidence = conf;
    const std::string element = "switch:" + name;
    for (const Verdict* v : list) {
      for (LinkIndex l : v->group) ev_.link_elements[l] = {element, conf};
      ev_.superseded.push_back(GroupKey(*v));
    }
    for (LinkIndex l : alike) ev_.link_elements[l] = {element, conf};
    Emit(element, std::move(f), false, latency_only ? LatencyConfirm(list) : 0);
  }

  void SwitchLink(const Verdict& v) {
    const Link& link = ctx_.map->links()[v.group.front()];
    const std::string& a = ctx_.map->switches()[link.a].name;
    const std::string& b = ctx_.map->switches()[link.b].name;
    Finding f;
    const Level level = LevelOf(v);
    f.location = FindingLocation{"link", link.id, "", "", 0};
    const std::string what = Describe(v, f);
    f.confidence = Confidence(v);
    if (level == Level::kDown) {
      f.kind = "link_down";
      f.severity = Severity::kCritical;
      f.summary = "Link " + link.id + " is down: it " + what +
                  "; check the link state, cable and "
                  "optics on " +
                  a + " and " + b + ".";
    } else if (level == Level::kDegraded) {
      f.kind = "link_degraded";
      const LinkBlame* loss = v.loss();
      f.severity = (loss && loss->estimate >= 0.05) ? Severity::kCritical : Severity::kWarning;
      f.summary = "Link " + link.id + " " + what +
                  "; check its cable, optics and error counters "
                  "on " +
                  a + " and " + b + ", or drain it.";
    } else {
      f.kind = "congestion";
      f.severity = Severity::kWarning;
      f.summary = "Link " + link.id + " is congested: it " + what +
                  " with little loss; look for "
                  "hot spots or ECMP imbalance through " +
                  a + " and " + b + ".";
      CorroborateCongestion(*v.latency(), f);
    }
    const std::string element = "link:" + link.id;
    ev_.link_elements[v.group.front()] = {element, f.confidence};
    Emit(element, std::move(f), true, level == Level::kLatency ? LatencyConfirm({&v}) : 0);
  }

  void NodeNics(const std::string& node, const std::vector<const Verdict*>& list) {
    const FabricMap& map = *ctx_.map;
    const size_t nics = map.NicsOfNode(node).size();
    const std::optional<NodeId> id = ctx_.names.FindNode(node);
    if (id && noisy_.count(*id)) return;  // already named as a noisy host
    bool all_down = true;
    for (const Verdict* v : list) all_down = all_down && LevelOf(*v) == Level::kDown;
    const bool sends = id && *id < ev_.hosts.size() && ev_.hosts[*id].out_flows > 0;
    if (list.size() == nics && all_down && !sends) {
      Finding f;
      f.kind = "probe_unreachable";
      f.severity = Severity::kCritical;
      f.location = FindingLocation{"node", node, node, "", 0};
      f.evidence = {{"nics_down", list.size()}};
      f.summary = node +
                  " answers no probes on any NIC and sends no results: the host or its "
                  "agent is down, or all its cables are out.";
      f.confidence = Confidence(*list.front());
      for (const Verdict* v : list)
        ev_.link_elements[v->group.front()] = {"node:" + node, f.confidence};
      Emit("node:" + node, std::move(f), false);
      return;
    }
    if (nics >= 2 && list.size() == nics) {
      Finding f;
      f.kind = "host_network";
      f.severity = all_down ? Severity::kCritical : Severity::kWarning;
      f.location = FindingLocation{"node", node, node, "", 0};
      f.evidence = {{"bad_nics", list.size()}};
      f.summary = "Every NIC of " + node +
                  " looks bad toward its peers; the host itself (driver, "
                  "PCIe, firmware, CPU) is the likely cause, not the fabric.";
      f.confidence = Confidence(*list.front());
      for (const Verdict* v : list)
        ev_.link_elements[v->group.front()] = {"node:" + node, f.confidence};
      Emit("node:" + node, std::move(f), false);
      return;
    }
    for (const Verdict* v : list) Nic(node, *v);
  }

  void Nic(const std::string& node, const Verdict& v) {
    const Link& link = ctx_.map->links()[v.group.front()];
    const std::string& device = ctx_.map->host_nics()[link.host_nic].nic;
    const std::string leaf = ctx_.map->switches()[link.a].name;
    const Level level = LevelOf(v);
    Finding f;
    f.location = FindingLocation{"nic", node + "/" + device, node, device, 0};
    const std::string what = Describe(v, f);
    f.confidence = Confidence(v);
    std::string element = "nic:" + node + "/" + device;
    if (PortDown(node, device)) {
      f.evidence["port_up"] = 0;
      f.confidence = 1 - (1 - f.confidence) / 2;
    }
    const LinkBlame* lat = v.latency();
    // Hysteresis: once the host is named for drops and delays, its drops alone (a tick whose slow
    // fraction dips under the threshold) stay the host's, not a second finding on its NIC.
    const bool host_named = ctx_.tracker &&
                            ctx_.tracker->HealthOf("node:" + node) >= ElementHealth::kFiring &&
                            ctx_.tracker->KindOf("node:" + node) == "host_network";
    const bool stack_delays =
        v.loss() && (host_named || (lat && lat->inflation >= c_.host_delay_inflation));
    int confirm_ticks = 0;
    if (level == Level::kDown) {
      f.kind = "nic_down";
      f.severity = Severity::kCritical;
      f.summary = "NIC " + device + " on " + node + " is unreachable: it " + what +
                  "; check its link state and the cable to " + leaf + ".";
    } else if (level == Level::kDegraded && stack_delays) {
      // Drops plus delays far beyond what a switch port can queue: the host holds the packets.
      f.kind = "host_network";
      f.severity = Severity::kWarning;
      f.location = FindingLocation{"node", node, node, "", 0};
      element = "node:" + node;
      f.summary = "Probes to and from " + node +
                  " are lost and delayed by its own stack (its NIC " + device + " " + what +
                  Fmt("; delays of %.0fx the baseline are more than a switch port queues), toward "
                      "all its peers in both directions; the host (CPU contention, interrupts, "
                      "driver) is the likely cause, not the fabric.",
                      lat ? lat->inflation : 0.0);
    } else if (level == Level::kDegraded) {
      f.kind = "nic_degraded";
      const LinkBlame* loss = v.loss();
      f.severity = (loss && loss->estimate >= 0.05) ? Severity::kCritical : Severity::kWarning;
      f.summary = "NIC " + device + " on " + node + " " + what +
                  " toward all its peers, "
                  "intra-leaf included; check its cable to " +
                  leaf +
                  ", optics and port "
                  "counters, or replace it.";
    } else {
      const auto [sampled, congested] = PortCongestion(node, device);
      f.evidence["ports_sampled"] = sampled;
      f.evidence["ports_congested"] = congested;
      if (congested > 0) {
        f.kind = "congestion";
        f.severity = Severity::kWarning;
        f.summary = "The access link of " + node + "/" + device + " is congested: it " + what +
                    ", and its port counters report congestion; check what the host sends.";
      } else {
        f.kind = "host_network";
        f.severity = Severity::kWarning;
        f.location = FindingLocation{"node", node, node, "", 0};
        element = "node:" + node;
        f.summary = "Probes to and from " + node + " are slow (its NIC " + device + " " + what +
                    ") with no loss and no congestion counters, and have been for at least " +
                    Fmt("%.0f evaluations", c_.latency_confirm_ticks) +
                    "; the host (CPU contention, interrupts, driver) is the likely cause, not "
                    "the fabric.";
      }
      // A queueing episode on the cable looks the same while it lasts: ask for persistence.
      confirm_ticks = c_.latency_confirm_ticks;
    }
    ev_.link_elements[v.group.front()] = {element, f.confidence};
    Emit(element, std::move(f), element.starts_with("nic:"), confirm_ticks);
  }

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

  void PairLevel() {
    const SignalSpec& loss = ev_.specs[static_cast<int>(Signal::kLoss)];
    const SignalSpec& lat = ev_.specs[static_cast<int>(Signal::kLatency)];
    std::map<NodeId, std::vector<std::pair<std::string, Finding>>> by_host;
    for (const auto& [key, p] : ev_.pairs) {
      if (noisy_.count(p.a) || noisy_.count(p.b) || p.probes == 0) continue;
      const bool unreachable =
          p.recent_probes >= 3 && p.recent_lost >= c_.down_loss_ratio * p.recent_probes;
      if (p.mapped) {
        if (!unreachable || PathBlamed(p.paths)) continue;
      }
      const double loss_ratio = double(p.lost) / p.probes;
      const bool loss_bad =
          p.probes >= loss.min_expected && loss_ratio >= loss.threshold &&
          PoissonSurprise(p.lost, p.probes * loss.background) >= loss.significance;
      const double slow = p.rtt ? double(p.slow) / p.rtt : 0;
      const bool slow_bad = p.rtt >= lat.min_expected && slow >= lat.threshold &&
                            PoissonSurprise(p.slow, p.rtt * lat.background) >= lat.significance;
      const bool bw_bad = p.bw > 0 && 2 * p.bw_bad > p.bw;
      const uint32_t flows_needed =
          std::max<uint32_t>(1, std::min<uint32_t>(c_.min_flows, p.flows));
      if (!(unreachable || loss_bad || slow_bad || bw_bad) || p.bad_flows < flows_needed) continue;
      const std::string a = ctx_.names.NodeName(p.a), b = ctx_.names.NodeName(p.b);
      const std::string id = PairId(a, b);
      Finding f;
      f.location = FindingLocation{"pair", id, a, "", 0};
      f.evidence = {{"loss_ratio", loss_ratio},
                    {"probes", p.probes},
                    {"bad_flows", p.bad_flows},
                    {"slow_fraction", slow},
                    {"latency_inflation", p.rtt ? p.ratio_sum / p.rtt : 0}};
      if (p.bw) f.evidence["bandwidth_ratio"] = p.bw_ratio_sum / p.bw;
      f.confidence = p.bad_flows / (p.bad_flows + 1.0);
      const std::string why = !ctx_.map
                                  ? "without a fabric map the fault is localized only to this pair"
                                  : (p.mapped ? "the links between them look healthy, so check "
                                                "routing, firewalls and addresses on both hosts"
                                              : "the fabric map does not place both nodes, so the "
                                                "fault is localized only to this pair");
      if (unreachable) {
        f.kind = "probe_unreachable";
        f.severity = Severity::kCritical;
        f.summary = a + " and " + b +
                    Fmt(" cannot reach each other (%.0f%% of recent probes lost); ",
                        100.0 * p.recent_lost / p.recent_probes) +
                    why + ".";
      } else if (loss_bad || bw_bad) {
        f.kind = "link_degraded";
        f.severity = loss_ratio >= 0.05 ? Severity::kCritical : Severity::kWarning;
        f.summary =
            "The path between " + a + " and " + b +
            Fmt(" loses %.1f%% of probes across %.0f flows; ", 100 * loss_ratio, p.bad_flows) +
            why + ".";
      } else {
        f.kind = "congestion";
        f.severity = Severity::kWarning;
        f.summary =
            "The path between " + a + " and " + b +
            Fmt(" has inflated latency (%.0f%% of samples slow) with little loss; ", 100 * slow) +
            why + ".";
      }
      by_host[p.a].emplace_back("pair:" + id, f);
      by_host[p.b].emplace_back("pair:" + id, std::move(f));
    }
    // A host bad toward most of its peers is a host problem (the map cannot say more).
    std::set<std::string> subsumed;
    for (const auto& [host, list] : by_host) {
      const HostStats& h = ev_.hosts[host];
      const double peers = std::max(h.out_pairs, h.in_pairs);
      const std::string name = ctx_.names.NodeName(host);
      // Hysteresis: a host already blamed stays blamed while a good part of its peers are bad.
      const bool firing =
          ctx_.tracker && ctx_.tracker->HealthOf("node:" + name) >= ElementHealth::kFiring;
      const double fraction = firing ? c_.host_peer_fraction / 2 : c_.host_peer_fraction;
      if (list.size() < (firing ? 2u : 3u) || list.size() < fraction * peers) continue;
      Finding f;
      f.kind = "host_network";
      f.severity = Severity::kWarning;
      f.location = FindingLocation{"node", name, name, "", 0};
      f.evidence = {{"bad_peers", list.size()}, {"peers", peers}};
      f.confidence = std::min(0.99, list.size() / peers);
      f.summary =
          name + Fmt(" is bad toward %.0f of its %.0f peers; ", list.size(), peers) +
          (ctx_.map
               ? "the fabric map does not place it, so the fault is localized only to the host."
               : "without a fabric map the fault is localized only to the host.");
      Emit("node:" + name, std::move(f), false);
      for (const auto& [k, pf] : list) {
        subsumed.insert(k);
        ev_.superseded.push_back(k);
      }
    }
    std::set<std::string> emitted;
    for (auto& [host, list] : by_host) {
      for (auto& [k, f] : list) {
        if (subsumed.count(k) || !emitted.insert(k).second) continue;
        const int confirm = f.kind == "congestion" ? c_.latency_confirm_ticks : 0;
        Emit(k, std::move(f), false, confirm);
      }
    }
  }

  void NodeFindingLevel() {
    for (const auto& [node, list] : ev_.node_findings) {
      for (const Finding& f : list) {
        Emit("check:" + node + "/" + f.kind + "/" + f.location.id, f, false);
      }
    }
  }

  const BlameContext& ctx_;
  const AnalysisConfig& c_;
  Analyzer::Evaluation& ev_;
  std::set<NodeId> noisy_;
  std::set<LinkIndex> blamed_;
};

}  // namespace

std::string PairId(const std::string& x, const std::string& y) {
  return x < y ? x + "~" + y : y + "~" + x;
}

void BuildObservations(const BlameContext& ctx, Analyzer::Evaluation& ev) { Blamer(ctx, ev).Run(); }

}  // namespace fw::analysis
