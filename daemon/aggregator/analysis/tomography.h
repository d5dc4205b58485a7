// Link tomography: flows vote for the links on their candidate paths; the worst link explains its
// flows away, and the rest vote again (007-style voting with explain-away).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "daemon/aggregator/analysis/flow_table.h"
#include "daemon/aggregator/analysis/traced_paths.h"
#include "daemon/aggregator/plan/fabric_map.h"
#include "daemon/aggregator/plan/plan_overlay.h"

namespace fw::analysis {

using aggregator::LinkIndex;
using aggregator::SwitchPaths;

// One flow's short-window evidence, with where it may have gone.
struct FlowObs {
  NodeId src = 0;
  NodeId dst = 0;
  LinkIndex src_access = aggregator::kNoIndex;
  LinkIndex dst_access = aggregator::kNoIndex;
  const SwitchPaths* core = nullptr;  // owned by the FabricMap's path cache
  int32_t path = -1;                  // resolved path index, or -1: every path is a candidate
  // The path of `core` the echo takes back (a traced echo), or -1: the echo is taken to follow
  // `path`. Used only with a resolved `path`: a probe is lost or slowed on either way.
  int32_t echo_path = -1;
  uint32_t probes = 0;
  uint32_t lost = 0;
  uint32_t rtt = 0;
  uint32_t slow = 0;
  uint32_t recent_probes = 0;
  uint32_t recent_lost = 0;
  uint32_t recent_rtt = 0;  // RTT samples of the last two complete seconds, and the slow ones
  uint32_t recent_slow = 0;
  uint32_t last_probes = 0;
  uint32_t last_lost = 0;
  uint32_t fresh_probes = 0;  // FlowWindow::fresh_probes
  uint32_t fresh_lost = 0;
  uint32_t fresh_rtt = 0;  // FlowWindow::fresh_rtt
  uint32_t fresh_slow = 0;
  uint32_t lost_run = 0;  // FlowWindow::lost_run
  float ratio_sum = 0;  // Σ RTT/baseline over `rtt` samples
  float bw_ratio = -1;  // goodput / class median; < 0 when the flow has no bandwidth sample
  bool bw_bad = false;
  PathSource path_source = PathSource::kCandidates;  // how `path` was known
  // The flows of its NIC pair in this direction (FlowRef::nic_flows; 0: not known): its plan
  // entry's.
  uint32_t pair_flows = 0;
  // FlowBit(FlowRef::flow_id) for a UDP flow, else 0: which of its NIC pair's flows it is, for the
  // flows escalation raises (UDP ones). Flow ids are per plan entry, so per NIC pair: the same id
  // on two NIC pairs of one node pair is two flows, which may take different paths.
  uint64_t flow_bit = 0;
};

using aggregator::FlowBit;
using aggregator::kAllFlows;

// A NIC pair (one plan entry) one of whose flows surely crossed a link (its traced or only path,
// either way): src's NIC to dst's, named by the flows' access links (FlowObs::src_access,
// dst_access; both kNoIndex where the map lacks the NICs, the node pair then counting as one).
// Two NIC pairs of one node pair are two CrossingPairs: their flow ids are their own.
struct CrossingPair {
  NodeId src = 0;
  NodeId dst = 0;
  uint32_t flows = 0;  // the NIC pair's flows in this direction (FlowObs::pair_flows)
  // The ids of its UDP flows (src -> dst) that surely crossed the link in the window (FlowBit);
  // 0 when only other transports' did.
  uint64_t flow_ids = 0;
  LinkIndex src_access = aggregator::kNoIndex;  // the flows' access links (their NICs)
  LinkIndex dst_access = aggregator::kNoIndex;
  // Whether `o` is one of its flows: the same nodes and NICs.
  bool Holds(const FlowObs& o) const {
    return src == o.src && dst == o.dst && src_access == o.src_access &&
           dst_access == o.dst_access;
  }
};

enum class Signal : uint8_t { kLoss = 0, kLatency, kBandwidth };
inline constexpr int kSignalCount = 3;
const char* SignalName(Signal s);

// When a link's estimate is significant enough to blame it.
struct SignalSpec {
  double min_expected = 20;  // expected observations crossing the link (probes, samples)
  int min_flows = 3;         // distinct bad flows
  double threshold = 0.005;  // estimate (loss ratio, slow or bad-bandwidth fraction)
  double significance = 9;   // -log10 of the chance that the background alone explains it
  double background = 1e-4;  // fleet background rate of the signal
  // Latency only: judge the freshest data (the last two complete seconds and the tick's own so
  // far: FlowObs::fresh_rtt, fresh_slow) instead of the window (Tomography::LocalizeFreshLatency).
  bool fresh = false;
};

// Per-link totals over every observed flow (before any explaining away), for display.
struct LinkTotals {
  double probes = 0;  // expected probes crossing the link (Σ weight · probes)
  double lost = 0;    // Σ weight · lost
  double rtt = 0;     // Σ weight · RTT samples
  double slow = 0;    // Σ weight · slow RTT samples
  double ratio = 0;   // Σ weight · RTT/baseline
  double bw = 0;      // Σ weight · bandwidth samples
  double bw_ratio = 0;
  double bw_bad = 0;   // Σ weight · bandwidth samples below the threshold
  uint32_t flows = 0;  // flows with the link among their candidates
};

struct LinkBlame {
  LinkIndex link = aggregator::kNoIndex;
  Signal signal = Signal::kLoss;
  double estimate = 0;      // loss ratio, slow fraction or bad-bandwidth fraction
  double significance = 0;  // -log10 P(at least `bad` | background), Poisson
  double expected = 0;      // observations that crossed the link
  uint32_t bad = 0;         // bad observations (lost probes, slow samples, bad bandwidth samples)
  uint32_t bad_flows = 0;   // distinct flows it explained
  double recent_loss = 0;   // loss in the last two complete seconds (loss signal)
  double recent_probes = 0;
  double last_loss = 0;  // ... and in the last one
  double last_probes = 0;
  double fresh_loss = 0;  // ... and in those two and the tick's own second so far
  double fresh_probes = 0;
  // The flows that surely cross the link with fresh probes (FlowObs::fresh_probes), those of them
  // that lost every probe since their last answered one (FlowObs::lost_run > 0), and the sum of
  // those runs: a link that carries nothing now, read from each flow's newest results instead of
  // from seconds that still mix the answers of before the outage with the losses after it.
  uint32_t sure_flows = 0;
  uint32_t dead_flows = 0;
  uint32_t dead_run = 0;
  double recent_slow = 0;  // slow fraction of the last two complete seconds' RTT samples (latency)
  double recent_rtt = 0;
  double inflation = 0;             // mean RTT / baseline over the explained flows
  double bandwidth_ratio = 0;       // mean goodput / class median over the explained flows
  std::vector<LinkIndex> tied;      // links that explain exactly the same flows as well
  std::vector<uint32_t> explained;  // indices into bad_flows() of the flows it explained
};

// Not thread-safe: one tick thread owns it. Scratch memory is kept between ticks.
class Tomography {
 public:
  explicit Tomography(std::shared_ptr<const FabricMap> map);

  void Reset();
  // Adds a flow to the totals; flows bad for any signal are also kept for localization.
  void Add(const FlowObs& obs);
  // Localizes one signal; flows explained by an earlier call stay usable for other signals.
  std::vector<LinkBlame> Localize(Signal signal, const SignalSpec& spec);
  // Localizes latency on the freshest data alone (SignalSpec::fresh: each flow's RTT samples of
  // the last two complete seconds and the tick's own so far, and the slow ones, stand for its
  // window's), with its own explaining away; what the window's latency blames explained is left
  // as it was.
  std::vector<LinkBlame> LocalizeFreshLatency(SignalSpec spec);
  // Escalation leads: each flow with a lost probe that the last Localize(kLoss) left unexplained
  // and whose path is known (fabric links it surely crossed) blames the one of those links with
  // the fewest probes, when its lost probes there reach `spec.significance` against
  // `spec.background` with `spec.min_expected` probes; one lead per link (the first flow's).
  // Cheap: one pass over the unexplained lost flows, no explaining away.
  std::vector<LinkBlame> Leads(const SignalSpec& spec);
  // One flow's lead by the same rule (its `explained` left empty), against the link totals of the
  // last scan: between ticks, a lost probe just ingested is judged as the next tick would judge it
  // (Analyzer::BetweenTicks). Nothing when the flow lost no probe or the rule is not met.
  std::optional<LinkBlame> LeadOf(const FlowObs& o, const SignalSpec& spec);

  // REQUIRES: l < the map's links.
  const LinkTotals& totals(LinkIndex l) const { return links_[l].totals; }
  // Up to kCrossingPairs NIC pairs whose flows surely crossed link l in the window, the first the
  // scan met, each with the ids of its UDP flows that did (escalation raises those flows: their
  // probes cross the link). The scan visits a node pair's flows together (its NIC pairs'
  // interleaved), so a NIC pair listed has every such flow's id.
  static constexpr size_t kCrossingPairs = 8;
  std::span<const CrossingPair> CrossingPairs(LinkIndex l) const {
    return {crossing_[l].data(), links_[l].crossing_n};
  }
  // Probes and lost ones in the window over the flows whose path surely crossed a switch
  // (SureOfSwitch) or a link (SureOfLink); each flow counts once per switch. Together they give
  // what a switch's flows that avoid one of its links saw.
  struct Counts {
    double probes = 0;
    double lost = 0;
  };
  Counts SureOfSwitch(aggregator::SwitchIndex s) const {
    return s < switch_sure_.size() ? switch_sure_[s] : Counts{};
  }
  Counts SureOfLink(LinkIndex l) const { return l < links_.size() ? links_[l].sure : Counts{}; }
  // A link's RTT samples of the freshest data (the last two complete seconds and the tick's own
  // so far) over every flow that may cross it (Σ weight · samples), and the slow share of them,
  // before anything is explained away.
  double FreshRtt(LinkIndex l) const { return l < links_.size() ? links_[l].fresh_rtt : 0; }
  double FreshSlowShare(LinkIndex l) const {
    return l < links_.size() && links_[l].fresh_rtt > 0
               ? std::min(1.0, links_[l].fresh_slow / links_[l].fresh_rtt)
               : 0;
  }
  // A link's own rate of bad observations over every flow that may cross it, before anything is
  // explained away (loss ratio, slow fraction, bad-bandwidth fraction); -1 below `min_expected`.
  double RawEstimate(LinkIndex l, Signal s, double min_expected) const;
  // -log10 of the chance that a link's bad observations over all its flows (before explaining
  // away) arise from `background` alone (PoissonSurprise).
  double RawSurprise(LinkIndex l, Signal s, double background) const;
  const std::vector<FlowObs>& bad_flows() const { return bad_; }
  // Asks for link l's sums ahead of an Add() that will touch them (the scan's flows reach their
  // links in random order: each link's record is a cache miss otherwise). No effect on results.
  void Prefetch(LinkIndex l) const {
    if (l >= links_.size()) return;
    const auto* p = reinterpret_cast<const char*>(&links_[l]);
    for (size_t off = 0; off < sizeof(PerLink); off += 64) __builtin_prefetch(p + off);
  }
  // Whether bad flow i was explained by a blamed link of `signal`.
  bool Explained(Signal signal, uint32_t i) const { return explained_[Idx(signal)][i] != 0; }

  // Whether the flow is bad for the signal (a lost probe, a slow sample, a low burst); `fresh`:
  // latency on the freshest data (SignalSpec::fresh).
  static bool IsBad(const FlowObs& o, Signal s, bool fresh = false);

  // Calls fn(link, weight) once per candidate link of `obs`; weight is the share of its candidate
  // paths that cross the link.
  template <typename Fn>
  void ForEachCandidate(const FlowObs& obs, Fn&& fn);
  // Calls fn(link) once per link `obs` surely crossed: its access links, and the links of its way
  // when that is known (its resolved path and echo path, or its only path). True when that is all
  // of its candidates (the way is known, or it has no core paths); false when several candidate
  // paths remain, whose links ForEachCandidate weighs.
  template <typename Fn>
  static bool ForEachSureLink(const FlowObs& obs, Fn&& fn);

 private:
  static int Idx(Signal s) { return static_cast<int>(s); }
  // A flow's observations of the signal, and how many of them were bad.
  static double Count(const FlowObs& o, Signal s, bool fresh = false);
  static uint32_t BadCount(const FlowObs& o, Signal s, bool fresh = false);
  static double Expected(const LinkTotals& t, Signal s);

  std::shared_ptr<const FabricMap> map_;
  // What a scan adds up per link, in one record: Add() touches a flow's few links, each in one
  // or two cache lines rather than one per sum (the scan's cost at fleet scale).
  struct PerLink {
    LinkTotals totals;
    double recent_probes = 0;  // Σ weight · probes of the last two seconds
    double last_probes = 0;    // the same for the last second
    double fresh_probes = 0;   // ...for the last two seconds and the tick's own so far
    double recent_rtt = 0;     // Σ weight · RTT samples of the last two seconds
    double fresh_rtt = 0;      // ...for the last two seconds and the tick's own so far
    double fresh_slow = 0;     // ...and of those the slow ones
    Counts sure;               // SureOfLink
    // Over the flows that surely cross it with fresh probes: their count, those on a run of
    // losses, and the runs' sum (LinkBlame::sure_flows, dead_flows, dead_run).
    uint32_t sure_flows = 0;
    uint32_t dead_flows = 0;
    uint32_t dead_run = 0;
    uint8_t crossing_n = 0;   // entries of crossing_ in use
    NodeId crossing_src = 0;  // the last entry's nodes
    NodeId crossing_dst = 0;
  };
  std::vector<PerLink> links_;
  std::vector<std::array<aggregator::SwitchIndex, 2>> link_ends_;  // per link, its switches a, b
  std::vector<FlowObs> bad_;
  std::array<std::vector<uint8_t>, kSignalCount> explained_;
  std::vector<std::array<CrossingPair, kCrossingPairs>> crossing_;  // per link (CrossingPairs)
  std::vector<Counts> switch_sure_;                                 // per switch (SureOfSwitch)
  std::vector<aggregator::SwitchIndex> flow_switches_;  // scratch of Add()
  // Candidate-dedup scratch.
  std::vector<uint32_t> stamp_;
  std::vector<float> weight_;
  std::vector<LinkIndex> scratch_;
  uint32_t seq_ = 0;
};

template <typename Fn>
bool Tomography::ForEachSureLink(const FlowObs& obs, Fn&& fn) {
  if (obs.src_access != aggregator::kNoIndex) fn(obs.src_access);
  if (obs.dst_access != aggregator::kNoIndex && obs.dst_access != obs.src_access) {
    fn(obs.dst_access);
  }
  if (!obs.core || obs.core->paths.empty()) return true;
  const auto& paths = obs.core->paths;
  if (obs.path >= 0 && static_cast<size_t>(obs.path) < paths.size()) {
    for (LinkIndex l : paths[obs.path]) fn(l);
    if (obs.echo_path < 0 || obs.echo_path == obs.path ||
        static_cast<size_t>(obs.echo_path) >= paths.size()) {
      return true;
    }
    // The echo's own links, once each: links the two ways share were reported above.
    for (LinkIndex l : paths[obs.echo_path]) {
      if (std::find(paths[obs.path].begin(), paths[obs.path].end(), l) == paths[obs.path].end()) {
        fn(l);
      }
    }
    return true;
  }
  if (paths.size() == 1) {
    for (LinkIndex l : paths[0]) fn(l);
    return true;
  }
  return false;
}

template <typename Fn>
void Tomography::ForEachCandidate(const FlowObs& obs, Fn&& fn) {
  if (ForEachSureLink(obs, [&](LinkIndex l) { fn(l, 1.0); })) return;
  const auto& paths = obs.core->paths;
  // Links shared by several candidate paths are reported once, with their summed share.
  if (++seq_ == 0) {
    std::fill(stamp_.begin(), stamp_.end(), 0);
    seq_ = 1;
  }
  scratch_.clear();
  const float share = 1.0f / static_cast<float>(paths.size());
  for (const auto& path : paths) {
    for (LinkIndex l : path) {
      if (stamp_[l] != seq_) {
        stamp_[l] = seq_;
        weight_[l] = 0;
        scratch_.push_back(l);
      }
      weight_[l] += share;
    }
  }
  for (LinkIndex l : scratch_) fn(l, std::min(1.0, static_cast<double>(weight_[l])));
}

// -log10 P(X >= k) for X ~ Poisson(lambda); large for surprising counts, 0 when k <= 0.
double PoissonSurprise(double k, double lambda);

// Whether `bad` of `samples` observations are bad at a finding's level on their own: at least
// `min_samples`, `spec.threshold`, and `spec.significance` against `spec.background`.
bool BadAlone(const SignalSpec& spec, double bad, double samples, double min_samples);

}  // namespace fw::analysis
