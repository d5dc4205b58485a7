// Pair level: pairs without a map path, or unreachable pairs whose links look healthy, become pair
// findings, and a host bad toward most of its peers one host finding.
#include "daemon/aggregator/analysis/blamer.h"

namespace fw::analysis::blame {

void Blamer::PairLevel() {
  const SignalSpec& loss = ev_.specs[static_cast<int>(Signal::kLoss)];
  const SignalSpec& lat = ev_.specs[static_cast<int>(Signal::kLatency)];
  std::map<NodeId, std::vector<std::pair<std::string, Finding>>> by_host;
  for (const auto& [key, p] : ev_.pairs) {
    if (noisy_.count(p.a) || noisy_.count(p.b) || p.probes == 0) continue;
    bool unreachable =
        p.recent_probes >= 3 && p.recent_lost >= c_.down_loss_ratio * p.recent_probes;
    if (p.mapped) {
      if (!unreachable || PathBlamed(p.paths)) continue;
    }
    const double loss_ratio = double(p.lost) / p.probes;
    const double slow = p.rtt ? double(p.slow) / p.rtt : 0;
    const double inflation = p.rtt ? p.ratio_sum / p.rtt : 0;
    const double bw_ratio = p.bw ? p.bw_ratio_sum / p.bw : 0;
    // Each signal needs its own bad flows: the pair's flows that are bad in that signal.
    const uint32_t flows_needed = std::max<uint32_t>(1, std::min<uint32_t>(c_.min_flows, p.flows));
    const bool loss_bad = p.probes >= loss.min_expected && loss_ratio >= loss.threshold &&
                          p.loss_flows >= flows_needed &&
                          PoissonSurprise(p.lost, p.probes * loss.background) >= loss.significance;
    const bool slow_bad = p.rtt >= lat.min_expected && slow >= lat.threshold &&
                          p.slow_flows >= flows_needed &&
                          PoissonSurprise(p.slow, p.rtt * lat.background) >= lat.significance;
    // Bandwidth is confirmed: at least `bandwidth_confirm_bursts` low bursts (different flows:
    // both directions, or several flows of the pair), and most of the pair's bursts low.
    const bool bw_bad =
        p.bw_bad >= static_cast<uint32_t>(std::max(1, c_.bandwidth_confirm_bursts)) &&
        2 * p.bw_bad > p.bw;
    unreachable = unreachable && p.loss_flows >= flows_needed;
    if (p.mapped && !unreachable) continue;
    if (!(unreachable || loss_bad || slow_bad || bw_bad)) continue;
    const std::string a = ctx_.names.NodeName(p.a), b = ctx_.names.NodeName(p.b);
    const std::string id = PairId(a, b);
    Finding f;
    f.location = FindingLocation{"pair", id, a, "", 0};
    f.evidence = {{"loss_ratio", loss_ratio},
                  {"probes", p.probes},
                  {"bad_flows", p.bad_flows},
                  {"slow_fraction", slow},
                  {"latency_inflation", inflation}};
    if (p.bw) {
      f.evidence["bandwidth_ratio"] = bw_ratio;
      f.evidence["bandwidth_bursts"] = p.bw;
      f.evidence["bandwidth_low_bursts"] = p.bw_bad;
    }
    // What fired, each with its figure: the summary names only the signals that are bad.
    std::string what;
    auto add = [&what](const std::string& part) { what += (what.empty() ? "" : ", and ") + part; };
    if (loss_bad) {
      add(Fmt("loses %.1f%% of probes (%.0f of %.0f, across %.0f flows)", 100 * loss_ratio, p.lost,
              p.probes, p.loss_flows));
    }
    if (bw_bad) {
      add(Fmt("delivers %.0f%% of the expected bandwidth on average (%.0f of %.0f bursts low)",
              100 * bw_ratio, p.bw_bad, p.bw));
    }
    if (slow_bad) {
      add(Fmt("has inflated latency (%.0f%% of samples slow, %.1fx the baseline on average)",
              100 * slow, inflation));
    }
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
      f.severity = loss_bad && loss_ratio >= 0.05 ? Severity::kCritical : Severity::kWarning;
      f.summary = "The path between " + a + " and " + b + " " + what + "; " + why + ".";
    } else {
      f.kind = "congestion";
      f.severity = Severity::kWarning;
      f.summary =
          "The path between " + a + " and " + b + " " + what + " with little loss; " + why + ".";
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
        (ctx_.map ? "the fabric map does not place it, so the fault is localized only to the host."
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

}  // namespace fw::analysis::blame
