// Suspect elements -> escalation requests with the pairs that cross them.
#include "daemon/aggregator/analysis/escalation_candidates.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

#include "daemon/aggregator/analysis/traced_paths.h"

namespace fw::analysis {
namespace {

using aggregator::EscalationPair;
using aggregator::EscalationRequest;
using aggregator::LinkIndex;
using aggregator::PathSet;
using aggregator::SwitchIndex;

// Planned flows per direction asked of an escalated pair at most: the cost of one pair stays
// bounded whatever the pair's plan.
constexpr uint32_t kMaxFlowsPerPair = 64;

bool PathsCross(const PathSet& paths, const auto& crosses_link) {
  if (paths.src_access != aggregator::kNoIndex && crosses_link(paths.src_access)) return true;
  if (paths.dst_access != aggregator::kNoIndex && crosses_link(paths.dst_access)) return true;
  if (!paths.core) return false;
  for (const auto path : paths.core->paths) {
    for (LinkIndex l : path) {
      if (crosses_link(l)) return true;
    }
  }
  return false;
}

// Own pairs of a link suspicion that go before its siblings' (SiblingPairs), and sibling pairs at
// most: with the 8 pairs an element may escalate (EscalationConfig::max_pairs_per_element), half
// confirms the link, half looks at the switches beside it.
constexpr size_t kOwnPairsFirst = 4;
constexpr size_t kMaxSiblingPairs = 4;

template <typename F>
void ForEachLink(const PathSet& paths, const F& f) {
  if (paths.src_access != aggregator::kNoIndex) f(paths.src_access);
  if (paths.dst_access != aggregator::kNoIndex) f(paths.dst_access);
  if (!paths.core) return;
  for (const auto path : paths.core->paths) {
    for (LinkIndex l : path) f(l);
  }
}

// The fabric links beside fabric link `l`: those of its switches, `l` excepted.
std::set<LinkIndex> SiblingLinks(const FabricMap& map, LinkIndex l) {
  const auto& links = map.links();
  const aggregator::Link& k = links[l];
  std::set<LinkIndex> siblings;
  for (LinkIndex x = 0; x < links.size(); ++x) {
    const aggregator::Link& o = links[x];
    if (x == l || o.IsAccess()) continue;
    if (o.a == k.a || o.b == k.a || (k.b != aggregator::kNoIndex && (o.a == k.b || o.b == k.b))) {
      siblings.insert(x);
    }
  }
  return siblings;
}

// For a suspicion on fabric link `l`: pairs whose paths cross a link beside it (another fabric
// link of one of its switches) but never `l`, the cheapest pair for each such link, at most
// kMaxSiblingPairs. Their dense data tells a fault of the link from a fault of its switch within
// the evaluation that confirms the link: a lossy spine's other links lose the escalated probes
// too (Blamer::SiblingLossy then holds the link's dense confirmation for the switch roll-up); a
// lossy link's do not. The pairs come from `ev.pairs`, which holds only pairs with a bad flow (or
// unmapped ones), so a sibling is a pair already bad on some other evidence (a slow sample, a
// lost probe elsewhere on its path).
std::vector<const PairAgg*> SiblingPairs(const BlameContext& ctx, const Analyzer::Evaluation& ev,
                                         LinkIndex l) {
  const std::set<LinkIndex> siblings = SiblingLinks(*ctx.map, l);
  std::map<LinkIndex, const PairAgg*> best;
  auto cheaper = [](const PairAgg* x, const PairAgg* y) {
    return std::tie(x->flows, x->a, x->b) < std::tie(y->flows, y->a, y->b);
  };
  for (const auto& [key, p] : ev.pairs) {
    if (!p.mapped || PathsCross(p.paths, [l](LinkIndex x) { return x == l; })) continue;
    ForEachLink(p.paths, [&, pp = &p](LinkIndex x) {
      if (!siblings.contains(x)) return;
      auto [it, fresh] = best.emplace(x, pp);
      if (!fresh && cheaper(pp, it->second)) it->second = pp;
    });
  }
  std::vector<const PairAgg*> out;
  for (const auto& [x, p] : best) {
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  std::sort(out.begin(), out.end(), cheaper);
  if (out.size() > kMaxSiblingPairs) out.resize(kMaxSiblingPairs);
  return out;
}

// The fabric (switch-to-switch) links of a loss blame, its link and those tied with it, as
// "link:<id>" elements, for those the tracker holds healthy: what weak or lead loss escalates.
template <typename F>
void ForEachHealthyFabricLink(const BlameContext& ctx, const ElementTracker& tracker,
                              const LinkBlame& b, const F& f) {
  std::vector<LinkIndex> group{b.link};
  group.insert(group.end(), b.tied.begin(), b.tied.end());
  for (LinkIndex l : group) {
    if (ctx.map->links()[l].IsAccess()) continue;
    const std::string element = "link:" + ctx.map->links()[l].id;
    if (tracker.HealthOf(element) == ElementHealth::kOk) f(element);
  }
}

// The node an element "nic:<node>/<device>" or "host:<node>" names, else empty.
std::string_view NodeOf(std::string_view element) {
  if (element.starts_with("host:")) return element.substr(5);
  if (element.starts_with("nic:")) {
    std::string_view rest = element.substr(4);
    return rest.substr(0, rest.find('/'));
  }
  return {};
}

// An escalated pair of nodes a and b with `flows` planned flows per direction; `rail` (or null)
// the paths of its bad flows' rail, whose NIC pair the overlay then raises (a multi-rail plan
// holds one entry per NIC pair toward a peer, and the first is another rail's).
EscalationPair MakePair(const BlameContext& ctx, NodeId a, NodeId b, uint32_t flows,
                        const PathSet* rail) {
  EscalationPair e;
  e.a = ctx.names.NodeName(a);
  e.b = ctx.names.NodeName(b);
  e.flows = std::clamp<uint32_t>(flows, 1, kMaxFlowsPerPair);
  if (rail && ctx.map) {
    const FlowNics nics = NicsOfPaths(*ctx.map, *rail);
    if (nics.known()) {
      const aggregator::HostNic& s = ctx.map->host_nics()[nics.src];
      const aggregator::HostNic& d = ctx.map->host_nics()[nics.dst];
      if (s.node == e.a && d.node == e.b) {
        e.a_nic = s.nic;
        e.b_nic = d.nic;
      } else if (s.node == e.b && d.node == e.a) {
        e.a_nic = d.nic;
        e.b_nic = s.nic;
      }
    }
  }
  return e;
}

// A directed NIC pair (one plan entry): src's NIC to dst's, named by its flows' access links, as
// Tomography::CrossingPair names it.
struct NicPairKey {
  NodeId src = 0;
  NodeId dst = 0;
  LinkIndex src_access = aggregator::kNoIndex;
  LinkIndex dst_access = aggregator::kNoIndex;
  static NicPairKey Of(const CrossingPair& c) { return {c.src, c.dst, c.src_access, c.dst_access}; }
  static NicPairKey Of(const FlowObs& o) { return {o.src, o.dst, o.src_access, o.dst_access}; }
  // The entry of the other direction between the same two NICs.
  NicPairKey Reversed() const { return {dst, src, dst_access, src_access}; }
  auto operator<=>(const NicPairKey&) const = default;
};

// `e`'s NICs (EscalationPair::a_nic, b_nic) at the access links of its a and b, when the map names
// both: a multi-NIC plan raises the entries between them.
void SetNics(const BlameContext& ctx, LinkIndex a_access, LinkIndex b_access, EscalationPair& e) {
  if (!ctx.map || a_access == aggregator::kNoIndex || b_access == aggregator::kNoIndex) return;
  const auto& nics = ctx.map->host_nics();
  e.a_nic = nics[ctx.map->links()[a_access].host_nic].nic;
  e.b_nic = nics[ctx.map->links()[b_access].host_nic].nic;
}

// Whether `x` escalates the same two NICs of the same two nodes as `e`, and if so whether with
// its ends swapped.
std::optional<bool> SameNicPair(const EscalationPair& x, const EscalationPair& e) {
  if (x.a == e.a && x.b == e.b && x.a_nic == e.a_nic && x.b_nic == e.b_nic) return false;
  if (x.a == e.b && x.b == e.a && x.a_nic == e.b_nic && x.b_nic == e.a_nic) return true;
  return std::nullopt;
}

// Adds `e` to `raised`, unless its NIC pair is listed there already, which then raises `e`'s
// flows too; whether it was added.
bool AddPair(EscalationPair e, std::vector<EscalationPair>& raised) {
  for (EscalationPair& x : raised) {
    const std::optional<bool> swapped = SameNicPair(x, e);
    if (!swapped) continue;
    x.a_flows |= *swapped ? e.b_flows : e.a_flows;
    x.b_flows |= *swapped ? e.a_flows : e.b_flows;
    x.flows = std::max(x.flows, e.flows);
    return false;
  }
  raised.push_back(std::move(e));
  return true;
}

// The UDP flows that surely crossed a link at the last scan, by directed NIC pair (FlowBit sets;
// flow ids are per plan entry, so per NIC pair): those of the NIC pairs the link lists
// (Tomography::CrossingPairs, the first the scan met) and its bad flows (lost or slow probes), so
// that a lossy flow is known whatever the list's room. These are what an escalation of the link
// raises.
class FlowsAcrossLink {
 public:
  FlowsAcrossLink(const BlameContext& ctx, LinkIndex link) {
    for (const CrossingPair& c : ctx.tomography.CrossingPairs(link)) {
      // Listed by other transports' flows alone: which UDP flows crossed is not known.
      Add(NicPairKey::Of(c), c.flow_ids == 0 ? kAllFlows : c.flow_ids, c.flows);
    }
    for (const FlowObs& o : ctx.tomography.bad_flows()) {
      if (o.flow_bit == 0) continue;
      bool crossed = false;
      Tomography::ForEachSureLink(o, [&](LinkIndex l) { crossed |= l == link; });
      if (crossed) Add(NicPairKey::Of(o), o.flow_bit, o.pair_flows);
    }
  }
  // The flows of one directed NIC pair that crossed; 0 when none is known.
  uint64_t Of(const NicPairKey& key) const {
    const auto it = sets_.find(key);
    return it == sets_.end() ? 0 : it->second.ids;
  }
  // One escalation pair per NIC pair of nodes a and b that crossed in either direction: a's flows
  // toward b from its NIC to b's, and b's toward a between the same two NICs (a NIC pair known in
  // one direction crossed with none in the other). Empty when none is known (not traced over the
  // link, or past the list's room): the caller raises every flow.
  std::vector<EscalationPair> PairsOf(const BlameContext& ctx, NodeId a, NodeId b) const {
    std::vector<EscalationPair> out;
    std::vector<std::pair<LinkIndex, LinkIndex>> accesses;  // out[i]'s a and b access links
    auto add = [&](NodeId src, NodeId dst, bool forward) {
      for (auto it = sets_.lower_bound(NicPairKey{src, dst, 0, 0});
           it != sets_.end() && it->first.src == src && it->first.dst == dst; ++it) {
        const NicPairKey& k = it->first;
        const std::pair<LinkIndex, LinkIndex> ends =
            forward ? std::pair{k.src_access, k.dst_access} : std::pair{k.dst_access, k.src_access};
        auto at = std::find(accesses.begin(), accesses.end(), ends);
        if (at == accesses.end()) {
          EscalationPair e;
          e.a = ctx.names.NodeName(a);
          e.b = ctx.names.NodeName(b);
          e.flows = 0;
          e.a_flows = e.b_flows = 0;
          SetNics(ctx, ends.first, ends.second, e);
          out.push_back(std::move(e));
          accesses.push_back(ends);
          at = accesses.end() - 1;
        }
        EscalationPair& e = out[static_cast<size_t>(at - accesses.begin())];
        (forward ? e.a_flows : e.b_flows) |= it->second.ids;
        e.flows = std::max(e.flows, it->second.flows);
      }
    };
    add(a, b, true);
    add(b, a, false);
    for (EscalationPair& e : out) e.flows = std::clamp<uint32_t>(e.flows, 1, kMaxFlowsPerPair);
    return out;
  }

 private:
  struct Crossed {
    uint64_t ids = 0;
    uint32_t flows = 0;  // the NIC pair's flows in this direction
  };
  void Add(const NicPairKey& key, uint64_t ids, uint32_t flows) {
    Crossed& c = sets_[key];
    c.ids |= ids;
    c.flows = std::max(c.flows, flows);
  }
  std::map<NicPairKey, Crossed> sets_;
};

// A lead's lost flow is one flow: its pair alone gives the link a few extra probes a second.
// Pairs whose flows surely crossed the link (traced) follow, so that the next evaluation has
// dense data from several flows over it, as a finding needs (min_flows).
// Adds a NIC pair whose flows surely crossed a link (traced) to `raised`, unless it is listed
// there (then its flows that crossed are raised too); whether it was added.
bool AddCrossingPair(const BlameContext& ctx, const CrossingPair& c,
                     std::vector<EscalationPair>& raised) {
  EscalationPair e;
  e.a = ctx.names.NodeName(c.src);
  e.b = ctx.names.NodeName(c.dst);
  e.flows = std::clamp<uint32_t>(c.flows, 1, kMaxFlowsPerPair);
  // Its flows that crossed the link (the other direction's come as a pair of their own).
  e.a_flows = c.flow_ids == 0 ? kAllFlows : c.flow_ids;
  e.b_flows = 0;
  // Its NICs: the plan entry between them is the one raised.
  SetNics(ctx, c.src_access, c.dst_access, e);
  return AddPair(std::move(e), raised);
}

void AddCrossingPairs(const BlameContext& ctx, LinkIndex link,
                      std::vector<EscalationPair>& raised) {
  for (const CrossingPair& c : ctx.tomography.CrossingPairs(link)) AddCrossingPair(ctx, c, raised);
}

// A fabric link's suspicion also raises, for each link beside it, a pair that crossed that link
// and not this one, lossy or not: their dense data clears the switches the link shares with them,
// or shows that one of those is at fault (Blamer::SwitchNotCleared holds the link until then).
// SiblingPairs finds only pairs already bad.
void AddClearingPairs(const BlameContext& ctx, LinkIndex link,
                      std::vector<EscalationPair>& raised) {
  const auto own = ctx.tomography.CrossingPairs(link);
  auto crosses_own = [&](const CrossingPair& c) {
    return std::any_of(own.begin(), own.end(), [&](const CrossingPair& o) {
      return (o.src == c.src && o.dst == c.dst) || (o.src == c.dst && o.dst == c.src);
    });
  };
  size_t added = 0;
  for (LinkIndex x : SiblingLinks(*ctx.map, link)) {
    if (added >= kMaxSiblingPairs) break;
    for (const CrossingPair& c : ctx.tomography.CrossingPairs(x)) {
      if (crosses_own(c)) continue;
      if (AddCrossingPair(ctx, c, raised)) ++added;
      break;
    }
  }
}

}  // namespace

EscalationRequest LeadRequest(const BlameContext& ctx, const std::string& element, LinkIndex link,
                              NodeId src, NodeId dst, uint32_t flows, uint64_t lost_flow,
                              const PathSet& paths) {
  EscalationRequest r;
  r.element = element;
  r.lead = true;
  r.priority = 10.0;  // one lost flow, as EscalationCandidates prices a lead's pair
  r.pairs.push_back(MakePair(ctx, src, dst, flows, &paths));
  // The lost flow (it surely crossed the link), and its NIC pair's flows that did at the last
  // tick, both ways between its two NICs.
  if (lost_flow != 0) {
    const FlowsAcrossLink across(ctx, link);
    const NicPairKey key{src, dst, paths.src_access, paths.dst_access};
    const uint64_t ab = across.Of(key), ba = across.Of(key.Reversed());
    r.pairs.back().a_flows = (ab == kAllFlows ? 0 : ab) | lost_flow;
    r.pairs.back().b_flows = ba == kAllFlows ? 0 : ba;
  }
  AddCrossingPairs(ctx, link, r.pairs);
  return r;
}

std::vector<LinkIndex> LeadLinks(const FabricMap& map, Tomography& tomography,
                                 const LinkBlame& lead) {
  std::set<LinkIndex> out{lead.link};
  out.insert(lead.tied.begin(), lead.tied.end());
  for (uint32_t i : lead.explained) {
    tomography.ForEachCandidate(tomography.bad_flows()[i], [&](LinkIndex l, double w) {
      if (w >= 0.999) out.insert(l);
    });
  }
  std::erase_if(out, [&](LinkIndex l) { return map.links()[l].IsAccess(); });
  return {out.begin(), out.end()};
}

std::vector<EscalationRequest> EscalationCandidates(const BlameContext& ctx,
                                                    const Analyzer::Evaluation& ev,
                                                    const ElementTracker& tracker) {
  std::vector<EscalationRequest> out;
  std::set<std::string> seen;
  std::vector<std::string> elements;
  // Suspicions raise the budget's floor: suspect on evidence that fires within `confirm_ticks`
  // (loss, down; not latency alone, which background queueing episodes of a healthy fleet make
  // suspect for seconds), or weak loss at the suspicion's significance.
  std::set<std::string> suspicions;
  for (const auto& [element, obs] : ev.observations) {
    if (tracker.HealthOf(element) != ElementHealth::kSuspect) continue;
    elements.push_back(element);
    if (obs.confirm_ticks <= ctx.config.confirm_ticks) suspicions.insert(element);
  }
  std::set<std::string> leads;
  std::set<std::string> weak;  // fabric links weakly lossy, not suspect
  if (ctx.map) {
    // Links whose loss is significant only at the weak level: denser data decides them sooner.
    for (const LinkBlame& b : ev.weak_loss) {
      ForEachHealthyFabricLink(ctx, tracker, b, [&](const std::string& element) {
        elements.push_back(element);
        weak.insert(element);
        if (b.significance >= ctx.config.escalate_suspicion_significance) {
          suspicions.insert(element);
        }
      });
    }
    // Leads: one lost flow on a fabric link. Served last and briefly (EscalationBudget); an
    // element already asked for above is no lead.
    for (const LinkBlame& b : ev.lead_loss) {
      ForEachHealthyFabricLink(ctx, tracker, b, [&](const std::string& element) {
        if (std::find(elements.begin(), elements.end(), element) != elements.end()) return;
        leads.insert(element);
        elements.push_back(element);
      });
    }
  }
  for (const std::string& element : elements) {
    if (!seen.insert(element).second) continue;
    // What a pair must cross (or be) to speak for the element.
    std::function<bool(const PairAgg&)> crosses;
    std::optional<LinkIndex> fabric_link;  // a switch-to-switch link's suspicion
    if (element.starts_with("link:") && ctx.map) {
      const std::optional<LinkIndex> link = ctx.map->FindLink(element.substr(5));
      if (!link) continue;
      fabric_link = link;
      crosses = [&, l = *link](const PairAgg& p) {
        return p.mapped && PathsCross(p.paths, [&](LinkIndex x) { return x == l; });
      };
    } else if (element.starts_with("links:") && ctx.map) {
      // An unresolved group ("one of these links", flows not traced): its pairs' escalation also
      // asks their flows to be traced, which names the link.
      std::set<LinkIndex> group;
      std::string_view ids = std::string_view(element).substr(6);
      while (!ids.empty()) {
        const size_t comma = ids.find(',');
        const std::optional<LinkIndex> l = ctx.map->FindLink(std::string(ids.substr(0, comma)));
        if (l) group.insert(*l);
        ids = comma == std::string_view::npos ? std::string_view() : ids.substr(comma + 1);
      }
      if (group.empty()) continue;
      crosses = [&, group = std::move(group)](const PairAgg& p) {
        return p.mapped && PathsCross(p.paths, [&](LinkIndex x) { return group.contains(x); });
      };
    } else if (element.starts_with("switch:") && ctx.map) {
      const std::optional<SwitchIndex> sw = ctx.map->FindSwitch(element.substr(7));
      if (!sw) continue;
      crosses = [&, s = *sw](const PairAgg& p) {
        return p.mapped && PathsCross(p.paths, [&](LinkIndex x) {
                 const aggregator::Link& k = ctx.map->links()[x];
                 return k.a == s || k.b == s;
               });
      };
    } else if (element.starts_with("pair:")) {
      crosses = [&, id = element.substr(5)](const PairAgg& p) {
        return PairId(ctx.names.NodeName(p.a), ctx.names.NodeName(p.b)) == id;
      };
    } else if (std::string_view node = NodeOf(element); !node.empty()) {
      crosses = [&, node](const PairAgg& p) {
        return ctx.names.NodeName(p.a) == node || ctx.names.NodeName(p.b) == node;
      };
    } else {
      continue;
    }
    std::vector<const PairAgg*> pairs;
    EscalationRequest r;
    r.element = element;
    r.suspicion = suspicions.contains(element);
    r.lead = leads.contains(element);
    // Weak loss that is no suspicion yet is at least a lead's evidence: it may spend a lead's
    // budget for a lead's course (EscalationRequest::lead_budget), on the pairs that crossed the
    // link as well.
    r.lead_budget = fabric_link && !r.lead && !r.suspicion && weak.contains(element);
    for (const auto& [key, p] : ev.pairs) {
      if (p.bad_flows == 0 || !crosses(p)) continue;
      // A lead raises only the pairs that lost probes: pairs with a slow sample cross every link
      // of a healthy fleet, and a lead must stay cheap.
      if (r.lead && p.loss_flows == 0) continue;
      pairs.push_back(&p);
      r.priority += 10.0 * p.loss_flows + p.slow_flows + p.bw_bad;
    }
    if (pairs.empty()) continue;
    std::sort(pairs.begin(), pairs.end(), [](const PairAgg* x, const PairAgg* y) {
      return std::tie(y->bad_flows, x->a, x->b) < std::tie(x->bad_flows, y->a, y->b);
    });
    // A fabric link's suspicion looks beside it too: its first own pairs, then a pair for each
    // link beside it (up to kMaxSiblingPairs), then its other own pairs.
    if (fabric_link && r.suspicion && !ctx.map->links()[*fabric_link].IsAccess()) {
      std::vector<const PairAgg*> siblings = SiblingPairs(ctx, ev, *fabric_link);
      const auto split =
          pairs.begin() + static_cast<std::ptrdiff_t>(std::min(kOwnPairsFirst, pairs.size()));
      pairs.insert(split, siblings.begin(), siblings.end());
    }
    std::vector<EscalationPair> raised;
    std::optional<FlowsAcrossLink> across;
    if (fabric_link) across.emplace(ctx, *fabric_link);
    for (const PairAgg* p : pairs) {
      // A link's pair raises, per NIC pair (plan entry), its flows that crossed the link, where
      // the link knows them: each NIC pair's own ids, on its own entry.
      if (across) {
        std::vector<EscalationPair> nic_pairs = across->PairsOf(ctx, p->a, p->b);
        for (EscalationPair& e : nic_pairs) AddPair(std::move(e), raised);
        if (!nic_pairs.empty()) continue;
      }
      // Every flow. PairAgg counts both directions; the budget prices one direction's flows.
      AddPair(MakePair(ctx, p->a, p->b, (p->flows + 1) / 2, p->rail_bad ? &p->paths : nullptr),
              raised);
    }
    // Weak evidence on the lead's budget raises the crossing pairs as a lead does.
    if ((r.lead || r.lead_budget) && fabric_link) AddCrossingPairs(ctx, *fabric_link, raised);
    if (fabric_link && r.suspicion && !ctx.map->links()[*fabric_link].IsAccess()) {
      AddClearingPairs(ctx, *fabric_link, raised);
    }
    r.pairs = std::move(raised);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace fw::analysis
