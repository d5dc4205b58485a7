// Internal to the analyzer: one tick's evidence, and the step that turns it into observations of
// elements (links, switches, NICs, hosts, pairs) and rows of /api/v1/links.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/aggregator/analysis/analyzer.h"
#include "daemon/aggregator/analysis/host_delay.h"
#include "daemon/aggregator/analysis/rdma_loss.h"

namespace fw::analysis {

struct HostStats {
  uint32_t out_flows = 0;  // flows it probes
  uint32_t out_bad = 0;
  uint32_t in_flows = 0;  // flows that probe it
  uint32_t in_bad = 0;
  uint32_t out_pairs = 0;  // peers it probes
  uint32_t in_pairs = 0;   // peers that probe it
  // Of those, the pairs that look bad, per signal (Signal order: loss, latency, bandwidth): a host
  // whose own probes are slow is not thereby lossy, so its loss evidence still speaks for the
  // fabric.
  std::array<uint32_t, kSignalCount> out_bad_pairs_by{};
  std::array<uint32_t, kSignalCount> in_bad_pairs_by{};
  std::array<bool, kSignalCount> noisy_out_by{};
  std::array<bool, kSignalCount> noisy_in_by{};
  // Its bursts (as prober) in the bandwidth window, and of those the low ones set aside because
  // its CPUs were saturated or contended during them (AnalysisConfig::bandwidth_cpu_busy_limit,
  // bandwidth_cpu_pressure_limit), with their
  // mean CPU busy share, the busiest single CPU's highest, and their mean bandwidth ratio.
  // Of the set-aside bursts, `cpu_pressure_bursts` were set aside by their CPU pressure alone
  // (bandwidth_cpu_pressure_limit; their busy share was under its limit or not measured), with
  // their mean pressure share; the busy sums cover the others.
  uint32_t bursts = 0;
  uint32_t cpu_saturated_bursts = 0;
  double cpu_busy_sum = 0;
  double cpu_peak_max = -1;
  double cpu_bw_ratio_sum = 0;
  uint32_t cpu_pressure_bursts = 0;
  double cpu_pressure_sum = 0;
  bool noisy_out = false;  // its own probes are bad in some signal while its peers' are clean
  bool noisy_in = false;   // probes to it are bad in some signal while its own probes are clean
};

// Both directions of a node pair, summed over flows and transports. Kept only for pairs that have
// a bad flow or no map path.
struct PairAgg {
  NodeId a = 0;  // a < b
  NodeId b = 0;
  bool mapped = false;
  PathSet paths;  // of the a→b direction, when mapped; the rail of a bad flow that named NICs
  bool rail_bad = false;  // `paths` are a bad flow's own NIC pair's
  uint32_t flows = 0;
  uint32_t bad_flows = 0;  // bad in any signal
  // Of those, per signal: a pair fires on the evidence of one signal, and its bad flows must be
  // bad in that signal (a busy host's slow samples do not confirm a low burst).
  uint32_t loss_flows = 0;  // with a lost probe
  uint32_t slow_flows = 0;  // with a slow sample
  uint32_t probes = 0;
  uint32_t lost = 0;
  uint32_t recent_probes = 0;
  uint32_t recent_lost = 0;
  uint32_t rtt = 0;
  uint32_t slow = 0;
  double ratio_sum = 0;
  uint32_t bw = 0;      // flows with a bandwidth sample (a burst) in the bandwidth window
  uint32_t bw_bad = 0;  // ...whose burst was low
  double bw_ratio_sum = 0;
};

struct Analyzer::Evaluation {
  std::vector<HostStats> hosts;  // by NodeId
  std::unordered_map<uint64_t, PairAgg> pairs;
  std::vector<FlowObs> deferred;  // bad mapped flows, judged after the host guard
  std::array<std::vector<LinkBlame>, kSignalCount> blames;
  std::array<SignalSpec, kSignalCount> specs;
  // Fleet sums per path class (intra, inter, unknown).
  std::array<double, 3> probes{}, lost{}, rtt{}, slow{};
  std::array<std::vector<float>, 3> goodputs;
  // Per-pair loss ratios and slow fractions, for a background robust to a few bad elements.
  std::array<std::vector<double>, 3> pair_loss, pair_slow;
  size_t flows = 0;
  size_t bad_flows = 0;
  size_t pairs_seen = 0;
  size_t baselines_ready = 0;
  size_t traced_flows = 0;  // flows judged on their traced path
  size_t cpu_saturated_bursts = 0;  // low bursts set aside: the prober's CPUs were saturated
  // Pairs with data whose latency is judged, and of those the ones with a baseline of their own.
  size_t latency_pairs = 0;
  size_t latency_pairs_ready = 0;
  std::map<std::tuple<std::string, std::string, int>, PortSample> ports;  // fresh samples only
  std::map<std::string, std::vector<Finding>> node_findings;
  std::map<std::string, std::vector<Finding>> source_findings;  // other stages', by source
  std::vector<HostDelayVerdict> host_delays;  // rdma_ud host delays, judged (host_delay.h)
  std::vector<RdmaLossVerdict> rdma_losses;   // devices that lose rdma_ud probes (rdma_loss.h)

  // Loss blames at `escalate_loss_significance` (weaker than a finding's), computed before the
  // blame step: escalation, and the sibling rule of a link's dense confirmation.
  std::vector<LinkBlame> weak_loss;
  // Leads (AnalysisConfig::escalate_lead_significance, Tomography::Leads): fabric links named by
  // one lost flow that no loss blame explains. Only escalation and the tracker's weak lead act on
  // them (never the sibling rule).
  std::vector<LinkBlame> lead_loss;
  // Latency blames on the freshest data alone (Tomography::LocalizeFreshLatency),
  // for the switches' fresh latency leads only (AnalysisConfig::correlated_fresh_latency_lead).
  std::vector<LinkBlame> fresh_latency;

  // Outputs.
  std::vector<std::pair<std::string, Observation>> observations;
  // The last complete second of a link: down (>= down_loss_ratio), up (< 50 %), and clean (up
  // with at most flap_return_loss: what a link that came back carries), and how many probes
  // crossed the link in that second.
  struct LinkInstant {
    std::string element;
    bool down = false;
    bool clean = false;
    double probes = 0;
  };
  std::vector<LinkInstant> instants;
  std::vector<std::string> superseded;  // elements explained by a larger one in this tick
  // Switches whose links queue on the freshest seconds alone, correlated, before their 10 s
  // windows show it (AnalysisConfig::correlated_fresh_latency_lead): the tracker's weak lead.
  std::vector<std::string> fresh_latency_leads;
  // Per link: the element whose finding speaks for it and the confidence of this tick's verdict.
  std::unordered_map<aggregator::LinkIndex, std::pair<std::string, double>> link_elements;
};

// Everything the blame step needs besides the evaluation.
struct BlameContext {
  const FabricMap* map = nullptr;  // null without a fabric map
  const FlowTable& names;
  const Tomography& tomography;
  const AnalysisConfig& config;
  const ElementTracker* tracker = nullptr;  // the state before this tick
  const RailIndex* rails = nullptr;         // null without a map: findings name no rail
};

// Fills ev.observations, ev.instants and ev.link_elements.
void BuildObservations(const BlameContext& ctx, Analyzer::Evaluation& ev);

// Rows of /api/v1/links, with states from the tracker's active findings.
std::vector<LinkView> BuildLinkViews(const BlameContext& ctx, const Analyzer::Evaluation& ev,
                                     const ElementTracker& tracker);

// "a~b" of two node names in sorted order.
std::string PairId(const std::string& x, const std::string& y);

}  // namespace fw::analysis
