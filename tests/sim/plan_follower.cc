#include "tests/sim/plan_follower.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace fw::sim {

namespace v1 = fabricwatch::v1;

namespace {

// The lowest of `v`, or `fallback` when it is empty.
double Lowest(const std::vector<double>& v, double fallback) {
  return v.empty() ? fallback : *std::min_element(v.begin(), v.end());
}

}  // namespace

FollowedRates RatesFromPlan(const FatTree& tree, int agent, const v1::ProbePlan& plan) {
  FollowedRates r;
  // Escalation overlays ask to trace the flows toward every peer they raise.
  std::set<int> traced;
  for (const v1::TraceRequest& t : plan.trace_requests()) {
    if (auto h = tree.FindHost(t.peer())) traced.insert(*h);
  }
  // Per class (0: in the agent's leaf, 1: outside): the rates of peers no trace request names, and
  // of all.
  std::vector<double> plain[2], all[2];
  if (plan.probe_timeout_ms() != 0) r.default_timeout_s = plan.probe_timeout_ms() * 1e-3;
  r.timeout_floor_s = plan.probe_timeout_floor_ms() * 1e-3;
  for (const v1::PlannedPeer& p : plan.peers()) {
    if (p.transport() != v1::TRANSPORT_UDP || !(p.rate_pps() > 0) || !std::isfinite(p.rate_pps())) {
      continue;
    }
    auto h = tree.FindHost(p.node());
    if (!h) continue;
    int rail = -1;
    for (int k = 0; k < tree.rails() && !p.address().empty(); ++k) {
      if (tree.Address(*h, k) == p.address()) rail = k;
    }
    // Per-flow rates: the listed flows at rate_pps, the entry's others at its unraised rate (0:
    // the agent's default, 1 probe/s).
    double entry_rate = p.rate_pps();
    if (p.raised_flows_size() > 0) {
      for (uint32_t id : p.raised_flows()) {
        double& fr = r.flow_rate[FollowedRates::FlowKey(static_cast<uint32_t>(*h), rail, id)];
        fr = std::max(fr, p.rate_pps());
      }
      entry_rate = p.unraised_rate_pps() > 0 && std::isfinite(p.unraised_rate_pps())
                       ? p.unraised_rate_pps()
                       : 1.0;
    }
    double& rate = rail >= 0 ? r.rail_rate[*h * kMaxRails + rail] : r.rate[*h];
    rate = std::max(rate, entry_rate);
    const double timeout = p.timeout_ms() != 0 ? p.timeout_ms() * 1e-3 : r.default_timeout_s;
    auto [t, added] = rail >= 0 ? r.rail_timeout_s.emplace(*h * kMaxRails + rail, timeout)
                                : r.timeout_s.emplace(*h, timeout);
    if (!added) t->second = std::min(t->second, timeout);
    const int c = tree.LeafGroup(*h) == tree.LeafGroup(agent) ? 0 : 1;
    all[c].push_back(entry_rate);
    if (!traced.count(*h)) plain[c].push_back(entry_rate);
  }
  double base[2];
  for (int c = 0; c < 2; ++c) {
    // Every peer of the class escalated (a host's or a small leaf's): the other class's baseline
    // (the same rate below the fleet cap), else the class's lowest, else 1 probe/s.
    base[c] = Lowest(plain[c], Lowest(plain[1 - c], Lowest(all[c], 1.0)));
  }
  r.base_intra = base[0];
  r.base_inter = base[1];
  return r;
}

void ExpandFlows(const std::vector<Flow>& flows, const FollowedRates& rates, Rng& rng,
                 std::vector<Flow>& out, double* base, double* extra) {
  out.clear();
  for (const Flow& f : flows) {
    const double rate = rates.RateOf(f);
    const bool raised = rates.Raised(f);
    int copies = static_cast<int>(rate);
    if ((raised || rate > copies) && rng.Uniform() < rate - copies) ++copies;
    for (int c = 0; c < copies; ++c) out.push_back(f);
    // Accounting: a raised flow's baseline share is its class's rate, the rest is escalation.
    if (raised) {
      *base += rates.BaseOf(f);
      *extra += copies - rates.BaseOf(f);
    } else {
      *base += copies;
    }
  }
}

void PlanFollower::OnPlan(int agent, const v1::ProbePlan& plan) {
  auto rates = std::make_shared<const FollowedRates>(RatesFromPlan(tree_, agent, plan));
  Agent& a = agents_[static_cast<size_t>(agent)];
  MutexLock lock(a.mu);
  for (const v1::TraceRequest& r : plan.trace_requests()) {
    if (!a.trace_ids.insert(r.id()).second) continue;
    if (auto h = tree_.FindHost(r.peer())) a.retrace.insert(*h);
  }
  a.rates = std::move(rates);
  a.report_ms = plan.report_interval_ms();
  a.plans++;
}

void PlanFollower::Take(int agent, std::shared_ptr<const FollowedRates>* rates,
                        std::set<int>* retrace, uint32_t* report_ms) {
  Agent& a = agents_[static_cast<size_t>(agent)];
  MutexLock lock(a.mu);
  *report_ms = a.report_ms;
  *rates = a.rates;
  retrace->merge(a.retrace);
  a.retrace.clear();
}

}  // namespace fw::sim
