// Adaptive escalation within a fleet budget.
#include "daemon/aggregator/plan/escalation.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

namespace fw::aggregator {
namespace {

// Both directions' raised flows.
uint32_t RaisedFlows(const EscalationPair& p) {
  return RaisedFlowCount(p.a_flows, p.flows) + RaisedFlowCount(p.b_flows, p.flows);
}

// A pair's flow sets ordered as its nodes are by name (lower first), as overlays list members.
std::pair<uint64_t, uint64_t> SetsInOrder(const EscalationPair& p) {
  return p.a <= p.b ? std::pair{p.a_flows, p.b_flows} : std::pair{p.b_flows, p.a_flows};
}

// The plan entries a pair raises: its two nodes and their NICs, lower node first (flow ids are
// per entry, so per NIC pair; empty NICs: the first entry toward the peer).
using NicPairKey = std::tuple<std::string, std::string, std::string, std::string>;
NicPairKey KeyOf(const EscalationPair& p) {
  return p.a <= p.b ? NicPairKey{p.a, p.b, p.a_nic, p.b_nic} : NicPairKey{p.b, p.a, p.b_nic, p.a_nic};
}

}  // namespace

double EscalationBudget::PairCost(const EscalationPair& p, double factor) const {
  // The raised flows of both directions, from the base rate up to `factor` times it.
  return RaisedFlows(p) * base_rate_pps_ * std::max(0.0, factor - 1);
}

bool EscalationBudget::Update(double now_s, const std::vector<EscalationRequest>& suspects,
                              double baseline_pps, double base_rate_pps) {
  if (base_rate_pps > 0) base_rate_pps_ = base_rate_pps;
  if (last_now_s_ >= 0 && now_s > last_now_s_) {
    stats_.extra_probes += stats_.extra_pps * (now_s - last_now_s_);
  }
  last_now_s_ = now_s;
  bool changed = false;

  std::map<std::string, const EscalationRequest*> asked;
  for (const EscalationRequest& r : suspects) asked.emplace(r.element, &r);
  // A lead asked for as an ordinary escalation now runs as one: widened below, renewed from now.
  std::set<std::string> promoted;
  // End what is no longer suspect (confirmed, or dropped), and what ran its course.
  for (auto it = active_.begin(); it != active_.end();) {
    Active& a = it->second;
    const auto q = asked.find(it->first);
    const bool still = q != asked.end();
    const bool ordinary = still && !q->second->lead;
    if (ordinary && a.lead) {
      a.lead = false;
      promoted.insert(it->first);
      // The lead's dense course is over: its pairs run on at the ordinary rate.
      double extra = 0;
      for (EscalationPair& p : a.pairs) {
        if (p.rate_factor > config_.rate_factor) {
          p.rate_factor = config_.rate_factor;
          changed = true;
        }
        extra += PairCost(p, p.rate_factor);
      }
      a.extra_pps = extra;
    }
    if (ordinary && now_s < a.since_s + config_.max_duration_s) {
      a.until_s = std::min(now_s + config_.duration_s, a.since_s + config_.max_duration_s);
    }
    // A lead's budget lent to weak evidence ends with a lead's course: the pairs it paid for end.
    if (a.boost_until_s > 0 && now_s >= a.boost_until_s) {
      a.boost_until_s = 0;
      if (a.pairs.size() > a.plain_pairs) {
        a.pairs.resize(a.plain_pairs);
        a.extra_pps = a.plain_extra_pps;
        changed = true;
      }
    }
    // A lead runs its short course even when its link is no longer asked for: the link a lead
    // names moves along its lost flow's path as the escalated probes add to the links' counts.
    if ((!still && !a.lead) || now_s >= a.until_s) {
      (a.lead ? lead_cooling_ : cooling_)[it->first] = now_s + config_.cooldown_s;
      it = active_.erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  auto cooled = [now_s](auto& cooling) {
    std::erase_if(cooling, [now_s](const auto& kv) { return now_s >= kv.second; });
  };
  cooled(cooling_);
  cooled(lead_cooling_);
  cooled(lead_pairs_cooling_);
  Recount();

  // Start new ones, highest priority first, while the budget lasts. A pair already escalated for
  // another element costs nothing more.
  const bool suspicion = std::any_of(suspects.begin(), suspects.end(),
                                     [](const EscalationRequest& r) { return r.suspicion; });
  const double budget = BudgetPps(baseline_pps, suspicion);
  last_budget_pps_ = budget;
  // What a new request may spend (with what is spent already): a lead, and weak evidence for a
  // lead's course, also what leads may.
  const double lead_cap = std::max(budget, LeadBudgetPps(baseline_pps));
  std::vector<const EscalationRequest*> order;
  for (const EscalationRequest& r : suspects) {
    if (active_.count(r.element) || cooling_.count(r.element) || r.pairs.empty()) continue;
    // One lost flow makes one lead: its pair (a lead's first) cools down whatever link names it.
    if (r.lead && (lead_cooling_.count(r.element) ||
                   lead_pairs_cooling_.count(std::minmax(r.pairs.front().a, r.pairs.front().b)))) {
      continue;
    }
    order.push_back(&r);
  }
  // Leads after every other request: they spend what the others left.
  std::stable_sort(order.begin(), order.end(),
                   [](const EscalationRequest* x, const EscalationRequest* y) {
                     if (x->lead != y->lead) return y->lead;
                     return x->priority > y->priority;
                   });
  // Running leads spend what leads may (lead_cap), not the ordinary requests' budget: they last
  // a fraction of a second, and the evidence they were started for is confirmed only by their
  // dense probes. A lead gives way when an ordinary request's first pair at the full rate would
  // take all escalations together past what leads may spend (with leads at the plain budget,
  // whenever that pair does not fit beside them): the running leads end (their element may start
  // a lead again after cooldown_s).
  double lead_extra = 0;
  for (const auto& [element, a] : active_) {
    if (a.lead) lead_extra += a.extra_pps;
  }
  const auto first_ordinary = std::find_if(order.begin(), order.end(),
                                           [](const EscalationRequest* r) { return !r->lead; });
  if (first_ordinary != order.end() && lead_extra > 0 &&
      PairCost((*first_ordinary)->pairs.front(), config_.rate_factor) >
          lead_cap - stats_.extra_pps) {
    lead_extra = 0;
    for (auto it = active_.begin(); it != active_.end();) {
      if (!it->second.lead) {
        ++it;
        continue;
      }
      lead_cooling_[it->first] = now_s + config_.cooldown_s;
      it = active_.erase(it);
      changed = true;
    }
    Recount();
  }
  // The flows escalated per pair (both directions, in SetsInOrder's order): a pair whose flows
  // another escalation raises already costs nothing more; one whose other flows crossed this
  // element is escalated again for those.
  // Per NIC pair: another NIC pair's flows of the same nodes are other flows.
  std::map<NicPairKey, std::pair<uint64_t, uint64_t>> taken;
  auto take = [&](const EscalationPair& p) {
    const auto [lo, hi] = SetsInOrder(p);
    auto& t = taken[KeyOf(p)];
    t.first |= lo;
    t.second |= hi;
  };
  auto is_taken = [&](const EscalationPair& p) {
    auto it = taken.find(KeyOf(p));
    if (it == taken.end()) return false;
    const auto [lo, hi] = SetsInOrder(p);
    return (lo & ~it->second.first) == 0 && (hi & ~it->second.second) == 0;
  };
  for (const auto& [element, a] : active_) {
    for (const EscalationPair& p : a.pairs) take(p);
  }
  // Adds `r`'s pairs not escalated yet to `a`, while the budget lasts and `a` has room.
  auto add_pairs = [&](const EscalationRequest& r, Active& a, double spent, double cap) {
    const double full = a.lead ? config_.lead_rate_factor : config_.rate_factor;
    for (const EscalationPair& p : r.pairs) {
      if (a.pairs.size() >= config_.max_pairs_per_element) break;
      if (p.a == p.b || RaisedFlows(p) == 0 || is_taken(p)) continue;
      const double left = cap - spent - a.extra_pps;
      double factor = full;
      if (PairCost(p, factor) > left) {
        // What the budget left pays for, if worth it.
        factor = 1 + left / PairCost(p, 2.0);
        if (factor < config_.min_rate_factor) continue;
      }
      a.extra_pps += PairCost(p, factor);
      a.pairs.push_back(p);
      a.pairs.back().rate_factor = factor;
      take(p);
    }
  };
  // An escalation started on weak evidence (the plain floor) whose element is a suspicion now is
  // widened with the suspicion's budget: otherwise the pairs it started with, as few as the plain
  // floor paid for, would carry the suspicion for the rest of its course. A lead asked for as an
  // ordinary escalation now is widened likewise: it started with the pairs of one lost flow.
  for (const EscalationRequest& r : suspects) {
    auto it = active_.find(r.element);
    if (it == active_.end()) continue;
    const bool wider = r.suspicion && !it->second.suspicion;
    if (!wider && !promoted.contains(r.element)) continue;
    Active& a = it->second;
    a.suspicion = a.suspicion || r.suspicion;
    if (a.suspicion) a.boost_until_s = 0;  // the pairs a lead's budget paid for stay
    const double before = a.extra_pps;
    const size_t pairs_before = a.pairs.size();
    add_pairs(r, a, stats_.extra_pps - before, budget);
    stats_.extra_pps += a.extra_pps - before;
    if (a.pairs.size() > pairs_before) {
      stats_.pairs_started += a.pairs.size() - pairs_before;
      changed = true;
    }
  }
  for (const EscalationRequest* r : order) {
    Active a;
    a.since_s = now_s;
    a.until_s =
        now_s + std::min(r->lead ? config_.lead_duration_s : config_.duration_s,
                         config_.max_duration_s);
    a.suspicion = r->suspicion;
    a.lead = r->lead;
    // A lead spends what all escalations leave of lead_cap; an ordinary request what ordinary
    // ones leave of the budget, and no more than all of them leave of lead_cap.
    const double spent =
        r->lead ? stats_.extra_pps
                : std::max(stats_.extra_pps - lead_extra, stats_.extra_pps - (lead_cap - budget));
    add_pairs(*r, a, spent, r->lead ? lead_cap : budget);
    if (r->lead_budget && !r->lead && !r->suspicion) {
      a.plain_pairs = a.pairs.size();
      a.plain_extra_pps = a.extra_pps;
      add_pairs(*r, a, stats_.extra_pps, lead_cap);
      if (a.pairs.size() > a.plain_pairs) {
        a.boost_until_s = now_s + std::min(config_.lead_duration_s, config_.duration_s);
      }
    }
    if (a.pairs.empty()) {
      ++stats_.refused_budget;
      continue;
    }
    a.trace_id = next_trace_id_++;
    ++stats_.started;
    if (a.lead) {
      ++stats_.leads_started;
      const auto [lo, hi] = std::minmax(r->pairs.front().a, r->pairs.front().b);
      lead_pairs_cooling_[{lo, hi}] = now_s + config_.cooldown_s;
    }
    stats_.pairs_started += a.pairs.size();
    stats_.extra_pps += a.extra_pps;
    active_.emplace(r->element, std::move(a));
    changed = true;
  }
  Recount();
  return changed;
}

double EscalationBudget::BudgetPps(double baseline_pps, bool suspicion) const {
  const double floor =
      suspicion ? std::max(config_.min_budget_pps, config_.suspicion_budget_pps)
                : config_.min_budget_pps;
  return std::max(floor, config_.budget_fraction * std::max(0.0, baseline_pps));
}

double EscalationBudget::LeadBudgetPps(double baseline_pps) const {
  return std::max(config_.lead_budget_pps, BudgetPps(baseline_pps, false));
}

void EscalationBudget::Recount() {
  stats_.active_elements = active_.size();
  stats_.active_pairs = 0;
  stats_.active_flows = 0;
  stats_.extra_pps = 0;
  for (const auto& [element, a] : active_) {
    stats_.active_pairs += a.pairs.size();
    for (const EscalationPair& p : a.pairs) stats_.active_flows += RaisedFlows(p);
    stats_.extra_pps += a.extra_pps;
  }
}

std::vector<PlanOverlay> EscalationBudget::Overlays() const {
  // One overlay per NIC pair of a node pair (the plan entries between those two NICs, both ways):
  // a NIC pair two elements escalate (different flows of it) raises the flows of both at the
  // higher rate. Every overlay of a node pair traces under the newest id of its escalations.
  std::map<std::pair<std::string, std::string>, uint64_t> trace_ids;
  for (const auto& [element, a] : active_) {
    for (const EscalationPair& p : a.pairs) {
      uint64_t& id = trace_ids[std::minmax(p.a, p.b)];
      id = std::max(id, a.trace_id);
    }
  }
  std::map<NicPairKey, PlanOverlay> by_pair;
  for (const auto& [element, a] : active_) {
    for (const EscalationPair& p : a.pairs) {
      const NicPairKey key = KeyOf(p);
      const auto& [lo, hi, lo_nic, hi_nic] = key;
      const auto [lo_flows, hi_flows] = SetsInOrder(p);
      auto [it, fresh] = by_pair.try_emplace(key);
      PlanOverlay& o = it->second;
      if (fresh) {
        // The NIC-less id for a pair without NICs, as before NIC pairs had overlays of their own.
        o.id = "escalation:" + lo + "~" + hi;
        o.nodes = {lo, hi};
        if (!lo_nic.empty() && !hi_nic.empty()) {
          o.id += "/" + lo_nic + "~" + hi_nic;
          o.nics = {lo_nic, hi_nic};
        }
        o.flows = 1;  // the planned flows stay; those in flow_sets get the raised rate
        o.probe_timeout_ms = config_.probe_timeout_ms;
        // The newest escalation's trace id: a second element's flows on an escalated pair change
        // the id, which is what makes the stage set the overlay again (EscalationStage::Apply).
        o.trace_id = trace_ids[{lo, hi}];
        o.flow_sets = {0, 0};
      }
      o.rate_pps = std::max(o.rate_pps, p.rate_factor * base_rate_pps_);
      o.flow_sets[0] |= lo_flows;
      o.flow_sets[1] |= hi_flows;
    }
  }
  std::vector<PlanOverlay> out;
  out.reserve(by_pair.size());
  for (auto& [pair, o] : by_pair) {
    // Every flow of both: the plain overlay (as before flow sets).
    if (o.flow_sets[0] == kAllFlows && o.flow_sets[1] == kAllFlows) o.flow_sets.clear();
    out.push_back(std::move(o));
  }
  return out;
}

std::map<std::string, EscalationBudget::Escalated> EscalationBudget::Escalations() const {
  std::map<std::string, Escalated> out;
  for (const auto& [element, a] : active_) out[element] = Escalated{a.since_s, a.pairs};
  return out;
}

bool EscalationBudget::HasExpiredBy(double now_s) const {
  return std::any_of(active_.begin(), active_.end(), [now_s](const auto& kv) {
    const Active& a = kv.second;
    return now_s >= a.until_s || (a.boost_until_s > 0 && now_s >= a.boost_until_s);
  });
}

double EscalationBudget::EscalatedSince(const std::string& element) const {
  auto it = active_.find(element);
  return it == active_.end() ? -1 : it->second.since_s;
}

}  // namespace fw::aggregator
