// Link level, before the roll-ups: bandwidth groups that traced evidence explains, and the figures
// that roll-up summaries quote.
#include "daemon/aggregator/analysis/blamer.h"

namespace fw::analysis::blame {

// Bursts are TCP, and TCP is not traced: a group of candidate links blamed on bandwidth alone
// says only "one of these". Where traced UDP flows cross the fabric, their loss or latency
// evidence is what localizes. A group with a link that such evidence blames is explained by that
// finding (a congested spine's bursts are slow on one uplink of every leaf; the spine's latency
// names it) and is dropped; a group without one waits as long as latency alone does, so that a
// few low bursts on an otherwise clean traced fabric are not a finding within seconds.
namespace {

// Whether a flow may have crossed one of `links`: its access links or any of its candidate paths.
bool MayCross(const FlowObs& o, const std::set<LinkIndex>& links) {
  if (links.count(o.src_access) || links.count(o.dst_access)) return true;
  if (!o.core) return false;
  for (const auto& path : o.core->paths) {
    for (LinkIndex l : path) {
      if (links.count(l)) return true;
    }
  }
  return false;
}

}  // namespace

void Blamer::ConfirmBandwidthGroups(std::map<LinkIndex, Verdict>& verdicts) {
  if (!c_.traced_explains_bandwidth_groups || ev_.traced_flows == 0) return;
  const std::vector<FlowObs>& bad = ctx_.tomography.bad_flows();
  std::set<LinkIndex> traced_blamed;
  for (const auto& [primary, v] : verdicts) {
    for (const LinkBlame* b : {v.loss(), v.latency()}) {
      if (!b) continue;
      const bool traced = std::any_of(b->explained.begin(), b->explained.end(), [&](uint32_t i) {
        return bad[i].path_source != PathSource::kCandidates;
      });
      if (traced) traced_blamed.insert(v.group.begin(), v.group.end());
    }
  }
  for (auto it = verdicts.begin(); it != verdicts.end();) {
    Verdict& v = it->second;
    const LinkBlame* bw = v.bandwidth();
    const bool candidates_only =
        bw && std::all_of(bw->explained.begin(), bw->explained.end(), [&](uint32_t i) {
          return bad[i].path_source == PathSource::kCandidates;
        });
    if (v.group.size() < 2 || v.loss() || v.latency() || !candidates_only) {
      ++it;
      continue;
    }
    // Explained: a member is blamed on traced evidence, or at least half of the group's low bursts
    // may have crossed such a link (a congested spine's latency is blamed on some of its links,
    // the rest only look alike; every burst through it crosses two of them).
    const bool member = std::any_of(v.group.begin(), v.group.end(),
                                    [&](LinkIndex l) { return traced_blamed.count(l) > 0; });
    const auto through = static_cast<size_t>(
        std::count_if(bw->explained.begin(), bw->explained.end(),
                      [&](uint32_t i) { return MayCross(bad[i], traced_blamed); }));
    if (member || (through > 0 && 2 * through >= bw->explained.size())) {
      ev_.superseded.push_back(GroupKey(v));
      it = verdicts.erase(it);
      continue;
    }
    v.bandwidth_unconfirmed = true;
    ++it;
  }
}

std::string Blamer::WorstFigures(const std::vector<const Verdict*>& list, Finding& f) const {
  const Verdict* worst = nullptr;
  uint32_t most = 0;
  for (const Verdict* v : list) {
    uint32_t flows = 0;
    for (const LinkBlame* b : v->sig) {
      if (b) flows = std::max(flows, b->bad_flows);
    }
    if (!worst || flows > most) {
      worst = v;
      most = flows;
    }
  }
  if (!worst) return "";
  Finding scratch;
  const std::string what = Describe(*worst, scratch);
  for (const char* key : {"loss_ratio", "recent_loss_ratio", "slow_fraction", "latency_inflation",
                          "bandwidth_ratio", "bandwidth_bad_samples"}) {
    auto it = scratch.evidence.find(key);
    if (it != scratch.evidence.end() && !f.evidence.contains(key)) f.evidence[key] = it->second;
  }
  const std::string id = worst->group.size() == 1 ? ctx_.map->links()[worst->group.front()].id
                                                  : "one of " + GroupKey(*worst).substr(6);
  return " Worst: " + id + ", which " + what + ".";
}

}  // namespace fw::analysis::blame
