// Link level: link blames (with a map) become link, switch, ECMP-group and far-end observations;
// access links go to the NIC level.
#include "daemon/aggregator/analysis/blamer.h"

namespace fw::analysis::blame {
namespace {
// Evaluations a link waits while a switch of it with a finding is not cleared: until it is.
constexpr int kHeldWhileSwitchBlamed = 1 << 20;
}  // namespace

void Blamer::LinkLevel() {
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
  ConfirmBandwidthGroups(verdicts);
  for (const std::vector<LinkBlame>* list :
       {&ev_.blames[static_cast<int>(Signal::kLoss)], &ev_.weak_loss}) {
    for (const LinkBlame& b : *list) {
      std::vector<LinkIndex> group{b.link};
      group.insert(group.end(), b.tied.begin(), b.tied.end());
      for (LinkIndex l : group) {
        const Link& link = map.links()[l];
        if (link.IsAccess()) continue;
        lossy_[link.a].insert(l);
        if (link.b != kNoIndex) lossy_[link.b].insert(l);
      }
    }
  }
  // Switches: all (most) of a switch's links bad is one switch fault, not many link faults.
  std::vector<uint32_t> with_data(map.switches().size(), 0);
  for (LinkIndex l = 0; l < map.links().size(); ++l) {
    const Link& link = map.links()[l];
    if (link.IsAccess() || ctx_.tomography.totals(l).probes <= 0) continue;
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
    if (link.IsAccess() || blamed_.count(l) || ctx_.tomography.totals(l).probes <= 0) continue;
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
    // Hysteresis: a switch already blamed (suspect or firing) stays blamed while half of that
    // share is bad. Suspect too: escalation makes the first links of a lossy spine dense, and
    // explain-away then credits flows over two of its links to those, so its other links are
    // blamed or alike in one evaluation and not the next; the roll-up must not lapse for the
    // usual confirmation of its links to name them alone.
    const bool blamed =
        ctx_.tracker &&
        ctx_.tracker->HealthOf("switch:" + map.switches()[sw].name) != ElementHealth::kOk;
    const double fraction = blamed ? c_.switch_fraction / 2 : c_.switch_fraction;
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
    SwitchFinding(sw, list, alike[sw], static_cast<uint32_t>(bad_links[sw].size()), with_data[sw]);
  }
  for (const auto& [node, list] : by_node) NodeNics(node, list);
  AmbiguousGroups(ambiguous);
  FreshLatencyLeads(with_data, rolled);
}

void Blamer::FreshLatencyLeads(
    const std::vector<uint32_t>& with_data,
    const std::map<aggregator::SwitchIndex, std::vector<const Verdict*>>& rolled) {
  if (!c_.correlated_fresh_latency_lead || ev_.fresh_latency.empty()) return;
  const FabricMap& map = *ctx_.map;
  // Fabric links blamed on the freshest seconds (each link of a tied group), by the switch all of
  // a blame's links touch, and the blamed links' fresh slow shares.
  std::map<aggregator::SwitchIndex, std::set<LinkIndex>> fresh;
  std::map<aggregator::SwitchIndex, std::vector<double>> shares;
  for (const LinkBlame& b : ev_.fresh_latency) {
    std::vector<LinkIndex> group{b.link};
    group.insert(group.end(), b.tied.begin(), b.tied.end());
    if (map.links()[b.link].IsAccess()) continue;
    for (aggregator::SwitchIndex sw : CommonSwitches(group)) {
      fresh[sw].insert(group.begin(), group.end());
      shares[sw].push_back(ctx_.tomography.FreshSlowShare(b.link));
    }
  }
  for (auto& [sw, links] : fresh) {
    // Rolled up with a finding on the window's evidence (a roll-up whose verdicts all went to
    // other switches made none).
    if (auto it = rolled.find(sw); it != rolled.end() && !it->second.empty()) continue;
    // As for the window's roll-up (LinkLevel): explain-away credits a flow over two of the
    // switch's links to the first blamed, so with two blamed a link of the switch whose own
    // fresh share over all its flows is at least half theirs counts too.
    if (links.size() >= 2) {
      const double floor = 0.5 * Median(shares[sw]);
      for (LinkIndex l = 0; l < map.links().size(); ++l) {
        const Link& link = map.links()[l];
        if (link.IsAccess() || (link.a != sw && link.b != sw) || links.contains(l) ||
            ctx_.tomography.FreshRtt(l) < c_.min_rtt_samples) {
          continue;
        }
        if (ctx_.tomography.FreshSlowShare(l) >= floor) links.insert(l);
      }
    }
    if (links.size() < CorrelatedLinksNeeded() ||
        links.size() < c_.switch_fraction * with_data[sw]) {
      continue;
    }
    ev_.fresh_latency_leads.push_back("switch:" + map.switches()[sw].name);
  }
}

// Unresolved ECMP groups. One group is "one of these links" (Ambiguous). When most of the
// switches wired to the same far ends each have such a group toward them (every leaf's uplinks
// to the spines look alike), the fault is at the far ends: one finding for that set of switches
// replaces a finding per leaf. Which of them, ECMP hides; the far end of a group is the same for
// every spine, so no evidence can name one.
void Blamer::AmbiguousGroups(const std::vector<const Verdict*>& groups) {
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
    if (link.IsAccess() || ctx_.tomography.totals(l).probes <= 0) continue;
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

void Blamer::FarEndFinding(const std::vector<aggregator::SwitchIndex>& far,
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
              "; ECMP hides which one: check their buffers and counters, or list the switches' "
              "addresses in the map so that traced paths tell them apart." +
              WorstFigures(list, f);
  f.confidence = conf / far.size();
  const std::string element = "switches:" + names;
  for (const Verdict* v : list) {
    for (LinkIndex l : v->group) ev_.link_elements[l] = {element, f.confidence};
    ev_.superseded.push_back(GroupKey(*v));
  }
  const bool dense = congestion && DenseCorrelatedLatency(list, bad);
  if (congestion) {
    f.evidence["fresh_latency_links"] = FreshLatencyLinks(list);
    f.evidence["fresh_latency_confirmed"] = dense ? 1 : 0;
  }
  Emit(element, std::move(f), false,
       std::max(congestion ? LatencyConfirm(list, bad) : 0, BandwidthWait(list)), dense);
}

// The last complete second read as down (≥ down_loss_ratio) or up (< 50 %), for flapping.
void Blamer::Instants(const Verdict& v, const std::string& key) {
  const LinkBlame* loss = v.loss();
  if (!loss || loss->last_probes < 3) return;
  if (loss->last_loss >= c_.down_loss_ratio) ev_.instants.push_back({key, true, false});
  if (loss->last_loss < 0.5) {
    ev_.instants.push_back({key, false, loss->last_loss <= c_.flap_return_loss, loss->last_probes});
  }
}

void Blamer::Ambiguous(const Verdict& v) {
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
              "; ECMP hides which one: check each, or list the switches' addresses in the map so "
              "that traced paths tell them apart.";
  f.confidence = Confidence(v);
  const std::string element = key;
  for (LinkIndex l : v.group) ev_.link_elements[l] = {element, f.confidence};
  // One of the group goes down and up: the group flaps, not link_down, since it came back.
  Instants(v, element);
  Emit(element, std::move(f), true,
       std::max(level == Level::kLatency ? LatencyConfirm({&v}) : 0, BandwidthWait({&v})));
}

void Blamer::SwitchFinding(aggregator::SwitchIndex sw, const std::vector<const Verdict*>& list,
                           const std::vector<LinkIndex>& alike, uint32_t bad_links,
                           uint32_t with_data) {
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
                              "before its links.") +
              WorstFigures(list, f);
  f.confidence = conf;
  PathSources(list, f);
  const std::string element = "switch:" + name;
  for (const Verdict* v : list) {
    for (LinkIndex l : v->group) ev_.link_elements[l] = {element, conf};
    ev_.superseded.push_back(GroupKey(*v));
  }
  for (LinkIndex l : alike) ev_.link_elements[l] = {element, conf};
  const bool dense = latency_only && DenseCorrelatedLatency(list, bad_links);
  if (latency_only) {
    f.evidence["fresh_latency_links"] = FreshLatencyLinks(list);
    f.evidence["fresh_latency_confirmed"] = dense ? 1 : 0;
  }
  Emit(element, std::move(f), false,
       std::max(latency_only ? LatencyConfirm(list, bad_links) : 0, BandwidthWait(list)), dense);
}

void Blamer::SwitchLink(const Verdict& v) {
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
    const LinkBlame* loss = v.loss();
    const std::string runs =
        loss && loss->sure_flows > 0
            ? Fmt("; %.0f of the %.0f flows across it with fresh probes lose every probe now",
                  loss->dead_flows, loss->sure_flows)
            : std::string();
    f.summary = "Link " + link.id + " is down: it " + what + runs +
                "; check the link state, cable and optics on " + a + " and " + b + ".";
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
  // How the decision can be made: the freshest two seconds alone show the loss (dense data),
  // unless a link beside it under one of its switches loses probes too: then it waits
  // `switch_wait_ticks` more than the usual confirmation, so that the switch roll-up gets its
  // evaluations (a lossy spine's first escalated links are not named alone); or unless its
  // switches' other flows cannot clear them yet: then it waits up to `switch_clear_wait_ticks`
  // more (for as long as it takes while such a switch has a finding itself), and the usual
  // confirmation once they are cleared. A link held down fires as it would.
  const LinkBlame* loss = v.loss();
  const bool degraded = level == Level::kDegraded && loss;
  const bool sibling = degraded && SiblingLossy(v.group.front());
  const bool uncleared = degraded && !sibling && SwitchNotCleared(v.group.front(), loss->estimate);
  const bool held = sibling || uncleared;
  const bool fresh = level != Level::kLatency && !held && FreshLoss(v);
  if (fresh) f.evidence["recent_probes"] = v.loss()->fresh_probes;
  if (level != Level::kLatency) f.evidence["fresh_loss_confirmed"] = fresh ? 1 : 0;
  if (held) f.evidence["held_for_switch"] = 1;
  const int wait = sibling                               ? c_.switch_wait_ticks
                   : !uncleared                          ? 0
                   : SwitchOfLinkFiring(v.group.front()) ? kHeldWhileSwitchBlamed
                                                         : c_.switch_clear_wait_ticks;
  const int confirm = level == Level::kLatency ? LatencyConfirm({&v})
                      : held                   ? c_.confirm_ticks + std::max(0, wait)
                                               : 0;
  Emit(element, std::move(f), true, confirm, fresh);
  // Read again between ticks as the escalated probes' results arrive (Analyzer::Recheck).
  if (level != Level::kLatency && !held && !fresh && !ev_.observations.empty() &&
      ev_.observations.back().first == element) {
    ev_.observations.back().second.dense_recheck = true;
  }
}

}  // namespace fw::analysis::blame
