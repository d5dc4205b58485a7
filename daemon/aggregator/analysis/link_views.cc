// Rows of /api/v1/links: every link of the map with its measured loss, latency and bandwidth, and
// the state its confirmed finding gives it.
#include <algorithm>

#include "daemon/aggregator/analysis/evaluation.h"

namespace fw::analysis {
namespace {

const char* StateOfKind(const std::string& kind) {
  if (kind == "link_down" || kind == "nic_down" || kind == "probe_unreachable") return "down";
  if (kind == "link_flapping") return "flapping";
  if (kind == "congestion") return "congested";
  return "degraded";
}

}  // namespace

std::vector<LinkView> BuildLinkViews(const BlameContext& ctx, const Analyzer::Evaluation& ev,
                                     const ElementTracker& tracker) {
  std::vector<LinkView> out;
  if (!ctx.map) return out;
  const FabricMap& map = *ctx.map;
  const size_t n = map.links().size();
  // This tick's estimates for blamed links (the group's estimate for each member of a group).
  std::vector<const LinkBlame*> blame(n * kSignalCount, nullptr);
  for (int s = 0; s < kSignalCount; ++s) {
    for (const LinkBlame& b : ev.blames[s]) {
      blame[b.link * kSignalCount + s] = &b;
      for (LinkIndex l : b.tied) blame[l * kSignalCount + s] = &b;
    }
  }
  out.reserve(n);
  for (LinkIndex l = 0; l < n; ++l) {
    const aggregator::Link& link = map.links()[l];
    const LinkTotals& t = ctx.tomography.totals(l);
    LinkView v;
    v.id = link.id;
    std::string own_element;
    if (link.IsAccess()) {
      const aggregator::HostNic& nic = map.host_nics()[link.host_nic];
      v.a = nic.node + ":" + nic.nic;
      v.b = map.switches()[link.a].name;
      v.a_tier = "host";
      v.b_tier = aggregator::SwitchTierName(map.switches()[link.a].tier);
      own_element = "nic:" + nic.node + "/" + nic.nic;
    } else {
      v.a = map.switches()[link.a].name;
      v.b = map.switches()[link.b].name;
      v.a_tier = aggregator::SwitchTierName(map.switches()[link.a].tier);
      v.b_tier = aggregator::SwitchTierName(map.switches()[link.b].tier);
      own_element = "link:" + link.id;
    }
    v.probes = t.probes;
    const LinkBlame* loss = blame[l * kSignalCount + static_cast<int>(Signal::kLoss)];
    const LinkBlame* lat = blame[l * kSignalCount + static_cast<int>(Signal::kLatency)];
    const LinkBlame* bw = blame[l * kSignalCount + static_cast<int>(Signal::kBandwidth)];
    v.loss_ratio = loss ? loss->estimate : (t.probes > 0 ? t.lost / t.probes : 0);
    v.latency_inflation = lat ? lat->inflation : (t.rtt > 0 ? t.ratio / t.rtt : 0);
    v.bandwidth_ratio = bw ? bw->bandwidth_ratio : (t.bw > 0 ? t.bw_ratio / t.bw : 0);

    std::string kind;
    double confidence = 0;
    if (auto it = ev.link_elements.find(l); it != ev.link_elements.end()) {
      kind = tracker.KindOf(it->second.first);
      confidence = it->second.second;
    }
    if (kind.empty()) {
      kind = tracker.KindOf(own_element);
      if (!kind.empty()) confidence = 0.5;  // confirmed earlier, not blamed in this tick
    }
    if (!kind.empty()) {
      v.state = StateOfKind(kind);
      v.confidence = confidence;
    } else if (t.probes > 0 || t.bw > 0) {
      v.state = "ok";
      v.confidence = 1.0 - 1.0 / (1.0 + t.flows);
    } else {
      v.state = "unknown";
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace fw::analysis
