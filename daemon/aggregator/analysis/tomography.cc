// Voting and explain-away over the fabric's links.
#include "daemon/aggregator/analysis/tomography.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace fw::analysis {
namespace {
constexpr int kMaxBlamesPerSignal = 256;
constexpr double kTieTolerance = 0.02;
// Bad flows a covering link must have beyond a covered link's before it is preferred (one more
// lossy flow may be chance; two seldom are).
constexpr size_t kSupersetExtraFlows = 2;
}  // namespace

const char* SignalName(Signal s) {
  switch (s) {
    case Signal::kLoss:
      return "loss";
    case Signal::kLatency:
      return "latency";
    case Signal::kBandwidth:
      return "bandwidth";
  }
  return "unknown";
}

double PoissonSurprise(double k, double lambda) {
  if (k <= 0) return 0;
  if (lambda <= 0) return 300;
  if (k <= lambda) return 0;
  // Terms of the upper tail decrease from j = k on; sum them in log space until negligible.
  const double log_lambda = std::log(lambda);
  const double first = -lambda + k * log_lambda - std::lgamma(k + 1);
  double sum = 1.0;  // relative to the first term
  double term = 1.0;
  const int max_terms = 100 + static_cast<int>(10 * std::sqrt(lambda));
  for (int i = 1; i < max_terms; ++i) {
    term *= lambda / (k + i);
    sum += term;
    if (term < sum * 1e-12) break;
  }
  const double log10_p = (first + std::log(sum)) / std::log(10.0);
  return std::min(300.0, std::max(0.0, -log10_p));
}

bool BadAlone(const SignalSpec& spec, double bad, double samples, double min_samples) {
  if (samples < min_samples || samples <= 0) return false;
  return bad / samples >= spec.threshold &&
         PoissonSurprise(bad, spec.background * samples) >= spec.significance;
}

Tomography::Tomography(std::shared_ptr<const FabricMap> map) : map_(std::move(map)) {
  const size_t n = map_ ? map_->links().size() : 0;
  links_.resize(n);
  link_ends_.resize(n);
  for (size_t l = 0; l < n; ++l) link_ends_[l] = {map_->links()[l].a, map_->links()[l].b};
  crossing_.resize(n);
  stamp_.resize(n);
  weight_.resize(n);
  switch_sure_.resize(map_ ? map_->switches().size() : 0);
}

void Tomography::Reset() {
  std::fill(links_.begin(), links_.end(), PerLink{});
  std::fill(switch_sure_.begin(), switch_sure_.end(), Counts{});
  bad_.clear();
  for (auto& e : explained_) e.clear();
}

bool Tomography::IsBad(const FlowObs& o, Signal s, bool fresh) {
  switch (s) {
    case Signal::kLoss:
      return o.lost > 0;
    case Signal::kLatency:
      return fresh ? o.fresh_slow > 0 : o.slow > 0;
    case Signal::kBandwidth:
      return o.bw_bad;
  }
  return false;
}

double Tomography::Count(const FlowObs& o, Signal s, bool fresh) {
  switch (s) {
    case Signal::kLoss:
      return o.probes;
    case Signal::kLatency:
      return fresh ? o.fresh_rtt : o.rtt;
    case Signal::kBandwidth:
      return o.bw_ratio >= 0 ? 1 : 0;
  }
  return 0;
}

uint32_t Tomography::BadCount(const FlowObs& o, Signal s, bool fresh) {
  switch (s) {
    case Signal::kLoss:
      return o.lost;
    case Signal::kLatency:
      return fresh ? o.fresh_slow : o.slow;
    case Signal::kBandwidth:
      return o.bw_bad ? 1 : 0;
  }
  return 0;
}

double Tomography::Expected(const LinkTotals& t, Signal s) {
  switch (s) {
    case Signal::kLoss:
      return t.probes;
    case Signal::kLatency:
      return t.rtt;
    case Signal::kBandwidth:
      return t.bw;
  }
  return 0;
}

void Tomography::Add(const FlowObs& o) {
  const bool has_bw = o.bw_ratio >= 0;
  flow_switches_.clear();
  ForEachCandidate(o, [&](LinkIndex l, double w) {
    PerLink& pl = links_[l];
    if (w >= 0.999 && o.fresh_probes > 0) {
      ++pl.sure_flows;
      if (o.lost_run > 0) {
        ++pl.dead_flows;
        pl.dead_run += o.lost_run;
      }
    }
    if (w >= 0.999 && o.probes > 0 && map_) {
      pl.sure.probes += o.probes;
      pl.sure.lost += o.lost;
      for (aggregator::SwitchIndex sw : link_ends_[l]) {
        if (sw == aggregator::kNoIndex || sw >= switch_sure_.size()) continue;
        if (std::find(flow_switches_.begin(), flow_switches_.end(), sw) != flow_switches_.end()) {
          continue;
        }
        flow_switches_.push_back(sw);
        switch_sure_[sw].probes += o.probes;
        switch_sure_[sw].lost += o.lost;
      }
    }
    LinkTotals& t = pl.totals;
    t.probes += w * o.probes;
    t.lost += w * o.lost;
    t.rtt += w * o.rtt;
    t.slow += w * o.slow;
    t.ratio += w * o.ratio_sum;
    if (has_bw) {
      t.bw += w;
      t.bw_ratio += w * o.bw_ratio;
      if (o.bw_bad) t.bw_bad += w;
    }
    ++t.flows;
    pl.recent_probes += w * o.recent_probes;
    pl.last_probes += w * o.last_probes;
    pl.fresh_probes += w * o.fresh_probes;
    pl.recent_rtt += w * o.recent_rtt;
    pl.fresh_rtt += w * o.fresh_rtt;
    pl.fresh_slow += w * o.fresh_slow;
    // A link's first NIC pairs that surely crossed it, with their flows that did. The scan visits
    // a node pair's good flows together, so while they come the NIC pairs listed for it are the
    // link's last ones: once the list is full, a good flow looks among those alone (one
    // comparison for the other node pairs' flows). Bad flows come after the scan (deferred), and
    // are few: each looks for its NIC pair in the whole list, so that a listed NIC pair's lossy
    // flows are in its set; so does a flow while the list has room (another transport's flows of
    // a listed pair come apart from its others).
    uint8_t& n = pl.crossing_n;
    // A good flow of another node pair than the last listed, on a full list, adds nothing: known
    // from the link's record alone, without reading its list.
    const bool passes_full_list = n == kCrossingPairs && !(o.lost > 0 || o.slow > 0 || o.bw_bad) &&
                                  (pl.crossing_src != o.src || pl.crossing_dst != o.dst);
    if (w >= 0.999 && o.probes > 0 && !passes_full_list) {
      auto& pairs = crossing_[l];
      CrossingPair* known = nullptr;
      for (uint8_t k = n; k > 0 && pairs[k - 1].src == o.src && pairs[k - 1].dst == o.dst; --k) {
        if (pairs[k - 1].Holds(o)) {
          known = &pairs[k - 1];
          break;
        }
      }
      if (!known && (n < kCrossingPairs || o.lost > 0 || o.slow > 0 || o.bw_bad)) {
        auto* it = std::find_if(pairs.begin(), pairs.begin() + n,
                                [&](const CrossingPair& c) { return c.Holds(o); });
        if (it != pairs.begin() + n) known = it;
      }
      if (known) {
        known->flow_ids |= o.flow_bit;
      } else if (n < kCrossingPairs) {
        pairs[n++] =
            CrossingPair{o.src, o.dst, o.pair_flows, o.flow_bit, o.src_access, o.dst_access};
        pl.crossing_src = o.src;
        pl.crossing_dst = o.dst;
      }
    }
  });
  if (o.lost > 0 || o.slow > 0 || o.bw_bad) bad_.push_back(o);
}

double Tomography::RawEstimate(LinkIndex l, Signal s, double min_expected) const {
  const LinkTotals& t = links_[l].totals;
  const double expected = Expected(t, s);
  if (expected <= 0 || expected < min_expected) return -1;
  switch (s) {
    case Signal::kLoss:
      return t.lost / expected;
    case Signal::kLatency:
      return t.slow / expected;
    case Signal::kBandwidth:
      return t.bw_bad / expected;
  }
  return -1;
}

double Tomography::RawSurprise(LinkIndex l, Signal s, double background) const {
  const LinkTotals& t = links_[l].totals;
  const double bad = s == Signal::kLoss ? t.lost : (s == Signal::kLatency ? t.slow : t.bw_bad);
  return PoissonSurprise(std::floor(bad), Expected(t, s) * background);
}

std::optional<LinkBlame> Tomography::LeadOf(const FlowObs& o, const SignalSpec& spec) {
  if (!map_ || o.lost == 0) return std::nullopt;
  LinkIndex best = aggregator::kNoIndex;
  ForEachCandidate(o, [&](LinkIndex l, double w) {
    if (w < 0.999 || l >= links_.size() || map_->links()[l].IsAccess()) return;
    if (best == aggregator::kNoIndex || links_[l].totals.probes < links_[best].totals.probes)
      best = l;
  });
  if (best == aggregator::kNoIndex) return std::nullopt;
  const double expected = links_[best].totals.probes;
  if (expected < spec.min_expected) return std::nullopt;
  const double surprise = PoissonSurprise(o.lost, expected * spec.background);
  if (surprise < spec.significance) return std::nullopt;
  LinkBlame b;
  b.link = best;
  b.signal = Signal::kLoss;
  b.estimate = std::min(1.0, o.lost / expected);
  b.significance = surprise;
  b.expected = expected;
  b.bad = o.lost;
  b.bad_flows = 1;
  return b;
}

std::vector<LinkBlame> Tomography::Leads(const SignalSpec& spec) {
  std::vector<LinkBlame> out;
  const auto& explained = explained_[Idx(Signal::kLoss)];
  if (!map_) return out;
  for (uint32_t i = 0; i < bad_.size(); ++i) {
    const FlowObs& o = bad_[i];
    if (i < explained.size() && explained[i]) continue;
    std::optional<LinkBlame> b = LeadOf(o, spec);
    if (!b) continue;
    if (std::any_of(out.begin(), out.end(),
                    [&](const LinkBlame& x) { return x.link == b->link; })) {
      continue;
    }
    b->explained = {i};
    out.push_back(std::move(*b));
  }
  return out;
}

std::vector<LinkBlame> Tomography::LocalizeFreshLatency(SignalSpec spec) {
  spec.fresh = true;
  auto& explained = explained_[Idx(Signal::kLatency)];
  std::vector<uint8_t> window = explained;
  std::vector<LinkBlame> out = Localize(Signal::kLatency, spec);
  explained.swap(window);
  return out;
}

std::vector<LinkBlame> Tomography::Localize(Signal signal, const SignalSpec& spec) {
  const size_t n = links_.size();
  std::vector<LinkBlame> blames;
  auto& explained = explained_[Idx(signal)];
  explained.assign(bad_.size(), 0);
  if (n == 0) return blames;

  // Working copies: expected observations, bad observations and bad flows per link.
  std::vector<double> expected(n);
  const bool fresh = spec.fresh && signal == Signal::kLatency;
  for (size_t l = 0; l < n; ++l) {
    expected[l] = fresh ? links_[l].fresh_rtt : Expected(links_[l].totals, signal);
  }
  std::vector<double> bad(n, 0.0);
  std::vector<uint32_t> flows(n, 0);
  std::vector<uint32_t> offsets(n + 1, 0);
  std::vector<LinkIndex> touched;
  for (const FlowObs& o : bad_) {
    if (!IsBad(o, signal, fresh)) continue;
    const uint32_t b = BadCount(o, signal, fresh);
    ForEachCandidate(o, [&](LinkIndex l, double) {
      if (flows[l] == 0) touched.push_back(l);
      bad[l] += b;
      ++flows[l];
      ++offsets[l + 1];
    });
  }
  if (touched.empty()) return blames;
  // The bad flows of each link, in flow order (CSR).
  for (size_t l = 0; l < n; ++l) offsets[l + 1] += offsets[l];
  std::vector<uint32_t> entries(offsets[n]);
  {
    std::vector<uint32_t> fill(offsets.begin(), offsets.end() - 1);
    for (uint32_t i = 0; i < bad_.size(); ++i) {
      if (!IsBad(bad_[i], signal, fresh)) continue;
      ForEachCandidate(bad_[i], [&](LinkIndex l, double) { entries[fill[l]++] = i; });
    }
  }
  auto unexplained_of = [&](LinkIndex l) {
    std::vector<uint32_t> out;
    for (uint32_t k = offsets[l]; k < offsets[l + 1]; ++k) {
      if (!explained[entries[k]]) out.push_back(entries[k]);
    }
    return out;
  };
  std::vector<uint8_t> blamed(n, 0);
  // An access link whose unexplained bad flows all surely cross one switch-to-switch link cannot
  // be told from that link by these flows; the shared link is the likelier cause (a NIC fault
  // also spoils the host's intra-leaf flows and its flows over other links). It is not blamed
  // while that holds: escalated flows over a lossy uplink otherwise weigh one host's access link
  // up to the uplink's own estimate.
  std::vector<uint32_t> sure(n, 0);
  uint32_t sure_seq = 0;
  auto one_core_link_explains = [&](LinkIndex l) {
    if (!map_ || !map_->links()[l].IsAccess()) return false;
    const std::vector<uint32_t> mine = unexplained_of(l);
    if (mine.empty()) return false;
    // sure[x] == base + k: core link x is surely crossed by the first k flows (values of earlier
    // calls are all below base).
    const uint32_t base = sure_seq;
    uint32_t k = 0;
    bool any = false;
    for (uint32_t i : mine) {
      any = false;
      ForEachCandidate(bad_[i], [&](LinkIndex x, double w) {
        if (w < 0.999 || map_->links()[x].IsAccess()) return;
        if (k != 0 && sure[x] != base + k) return;
        sure[x] = base + k + 1;
        any = true;
      });
      ++k;
      if (!any) break;
    }
    sure_seq = base + static_cast<uint32_t>(mine.size()) + 1;
    return any;  // some core link was crossed by every flow, the last included
  };

  auto passes = [&](LinkIndex l) {
    return flows[l] >= static_cast<uint32_t>(spec.min_flows) &&
           BadAlone(spec, bad[l], expected[l], spec.min_expected);
  };
  // A switch-to-switch link whose unexplained bad flows all surely cross another such link, which
  // also has bad flows of its own (at least kSupersetExtraFlows), is not blamed while that holds:
  // the other link explains everything it does and more. Escalation makes this matter: it raises
  // the probes of a few pairs across the lossy link, and a second link on those pairs' paths,
  // whose other flows are sparse and clean, can then show a higher loss estimate than the lossy
  // link itself, which also carries sparse flows that lose less by chance.
  std::vector<uint32_t> covering(n, 0);
  auto superset_link_explains = [&](LinkIndex l) {
    if (!map_ || map_->links()[l].IsAccess()) return false;
    const std::vector<uint32_t> mine = unexplained_of(l);
    if (mine.empty()) return false;
    std::vector<LinkIndex> seen;
    for (uint32_t i : mine) {
      ForEachCandidate(bad_[i], [&](LinkIndex x, double w) {
        if (x == l || w < 0.999 || blamed[x] || map_->links()[x].IsAccess()) return;
        if (covering[x]++ == 0) seen.push_back(x);
      });
    }
    bool found = false;
    for (LinkIndex x : seen) {
      if (!found && covering[x] == mine.size() &&
          unexplained_of(x).size() >= mine.size() + kSupersetExtraFlows && passes(x)) {
        found = true;
      }
      covering[x] = 0;
    }
    return found;
  };

  for (int round = 0; round < kMaxBlamesPerSignal; ++round) {
    LinkIndex best = aggregator::kNoIndex;
    double best_estimate = 0;
    double best_surprise = 0;
    for (LinkIndex l : touched) {
      if (blamed[l] || flows[l] < static_cast<uint32_t>(spec.min_flows) ||
          expected[l] < spec.min_expected) {
        continue;
      }
      const double estimate = std::min(1.0, bad[l] / expected[l]);
      if (estimate < spec.threshold) continue;
      const double surprise = PoissonSurprise(bad[l], expected[l] * spec.background);
      if (surprise < spec.significance) continue;
      if (one_core_link_explains(l) || superset_link_explains(l)) continue;
      const bool better = best == aggregator::kNoIndex || estimate > best_estimate + 1e-12 ||
                          (std::abs(estimate - best_estimate) <= 1e-12 &&
                           (bad[l] > bad[best] || (bad[l] == bad[best] && l < best)));
      if (better) {
        best = l;
        best_estimate = estimate;
        best_surprise = surprise;
      }
    }
    if (best == aggregator::kNoIndex) break;

    LinkBlame blame;
    blame.link = best;
    blame.signal = signal;
    blame.estimate = best_estimate;
    blame.significance = best_surprise;
    blame.expected = expected[best];
    blame.bad = static_cast<uint32_t>(bad[best]);
    blame.explained = unexplained_of(best);
    blame.bad_flows = static_cast<uint32_t>(blame.explained.size());
    // Links with exactly the same unexplained bad flows and the same estimate are
    // indistinguishable: the evidence names a group, not one of them.
    for (LinkIndex l : touched) {
      if (l == best || blamed[l] || flows[l] != flows[best] || bad[l] != bad[best] ||
          expected[l] <= 0) {
        continue;
      }
      const double estimate = std::min(1.0, bad[l] / expected[l]);
      if (std::abs(estimate - best_estimate) > kTieTolerance * best_estimate) continue;
      if (unexplained_of(l) == blame.explained) blame.tied.push_back(l);
    }
    std::sort(blame.tied.begin(), blame.tied.end());

    double recent_lost = 0, last_lost = 0, fresh_lost = 0, recent_slow = 0, ratio = 0, rtt = 0,
           bw = 0, bw_n = 0;
    for (uint32_t i : blame.explained) {
      const FlowObs& o = bad_[i];
      recent_lost += o.recent_lost;
      last_lost += o.last_lost;
      fresh_lost += o.fresh_lost;
      recent_slow += o.recent_slow;
      ratio += o.ratio_sum;
      rtt += o.rtt;
      if (o.bw_ratio >= 0) {
        bw += o.bw_ratio;
        ++bw_n;
      }
    }
    blame.recent_probes = links_[best].recent_probes;
    blame.last_probes = links_[best].last_probes;
    blame.recent_loss = links_[best].recent_probes > 0
                            ? std::min(1.0, recent_lost / links_[best].recent_probes)
                            : 0;
    blame.last_loss =
        links_[best].last_probes > 0 ? std::min(1.0, last_lost / links_[best].last_probes) : 0;
    blame.fresh_probes = links_[best].fresh_probes;
    blame.sure_flows = links_[best].sure_flows;
    blame.dead_flows = links_[best].dead_flows;
    blame.dead_run = links_[best].dead_run;
    blame.fresh_loss =
        links_[best].fresh_probes > 0 ? std::min(1.0, fresh_lost / links_[best].fresh_probes) : 0;
    blame.recent_rtt = links_[best].recent_rtt;
    blame.recent_slow =
        links_[best].recent_rtt > 0 ? std::min(1.0, recent_slow / links_[best].recent_rtt) : 0;
    blame.inflation = rtt > 0 ? ratio / rtt : 0;
    blame.bandwidth_ratio = bw_n > 0 ? bw / bw_n : 0;

    // Explain away: the blamed link's flows no longer vote for anything else.
    blamed[best] = 1;
    for (LinkIndex l : blame.tied) blamed[l] = 1;
    for (uint32_t i : blame.explained) {
      explained[i] = 1;
      const FlowObs& o = bad_[i];
      const double count = Count(o, signal, fresh);
      const uint32_t b = BadCount(o, signal, fresh);
      ForEachCandidate(o, [&](LinkIndex l, double w) {
        expected[l] = std::max(0.0, expected[l] - w * count);
        bad[l] = std::max(0.0, bad[l] - b);
        if (flows[l] > 0) --flows[l];
      });
    }
    blames.push_back(std::move(blame));
  }
  return blames;
}

}  // namespace fw::analysis
