// A synthetic leaf-spine fleet for analyzer tests and benchmarks: plans probe flows like the
// planner (intra-leaf mesh, k flows per inter-leaf representative pair), generates each second's
// results from link and host fault models with realistic jitter, and drives the analyzer on a
// FakeClock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "daemon/aggregator/analysis/analyzer.h"
#include "daemon/aggregator/ingest/pair_table.h"

namespace fw::analysis::testing {

struct FleetShape {
  int spines = 4;
  int leaves = 4;
  int hosts_per_leaf = 4;
  int inter_flows = 8;        // flows per inter-leaf representative pair
  bool deterministic = true;  // routing of the map (the fleet always routes flow i on path i % n
                              // when deterministic, else by a hash the analyzer cannot see)
  bool with_map = true;
  double bw_every_s = 0;  // bandwidth burst per inter-leaf pair every this many seconds
  double background_loss = 1e-5;
  uint64_t seed = 1;
  // The map lists each switch's address (leafN 198.19.0.N+1, spineN 198.19.64.N+1), so that
  // TraceFlows() can tell the analyzer each flow's path.
  bool switch_addresses = false;
};

struct LinkFault {
  double loss = 0;        // per round trip crossing the link
  double rtt_factor = 1;  // multiplies the RTT of probes crossing it
  double bw_factor = 1;   // multiplies goodput of bursts crossing it
  // The share of probes crossing it that rtt_factor applies to: below 1, a queue that comes and
  // goes.
  double slowed_fraction = 1;
};

class SyntheticFleet {
 public:
  explicit SyntheticFleet(FleetShape shape, AnalysisConfig config = {},
                          FindingsStore* store = nullptr);

  static std::string MapYaml(const FleetShape& shape);
  static std::string HostName(int leaf, int host);  // "l<leaf>h<host>"

  void SetLinkFault(const std::string& link_id, LinkFault fault);
  // Extra RTT factor on probes the host sends (as prober) and/or answers (as target).
  void SetHostNoise(const std::string& node, double factor, bool as_prober, bool as_target);
  void ClearFaults();
  // Every UDP flow's path as an agent's trace reports it (the switches' addresses hop by hop),
  // recorded in the analyzer's TracedPaths. Switches named in `silent` do not answer TTL expiry.
  // Needs switch_addresses and a map.
  void TraceFlows(const std::set<std::string>& silent = {});
  // The same traces, as agents would report them, without recording them.
  struct FlowTrace {
    std::string src;
    std::string dst;
    uint16_t src_port = 0;
    std::vector<std::string> hops;  // hop k answered ttl k+1; "" silent
  };
  std::vector<FlowTrace> FlowTraces(const std::set<std::string>& silent = {}) const;
  // The fabric rehashes: under ECMP each flow takes the path a hash salted with `salt` picks.
  void Reroute(uint64_t salt);

  // Simulates `seconds` seconds: each second's results are ingested, then the analyzer ticks.
  void Run(int seconds);
  // As Run(), with the aggregator's work between ticks: 250 ms after each second's results are
  // ingested, Analyzer::BetweenTicks() (its leads are counted, not escalated: the fleet's rates
  // are fixed), then the tick.
  void RunWithBetweenTicks(int seconds);
  // Leads BetweenTicks() found in RunWithBetweenTicks(), oldest first.
  const std::vector<aggregator::EscalationRequest>& between_leads() const { return between_leads_; }
  // One second of results, grouped by source node (as agents batch them).
  std::vector<ReportedProbe> GenerateSecond();

  Analyzer& analyzer() { return *analyzer_; }
  aggregator::PairTable& pairs() { return *pairs_; }
  FakeClock& clock() { return clock_; }
  const std::shared_ptr<const FabricMap>& map() const { return map_; }
  size_t flow_count() const { return flows_.size(); }
  uint64_t results() const { return results_; }
  std::vector<TrackedFinding> Active() const { return analyzer_->Findings(true); }
  // Rewrites each second's results before Run() ingests them (another transport, the host delays
  // an RDMA agent reports); empty: none.
  void SetRewrite(std::function<void(std::vector<ReportedProbe>&)> rewrite) {
    rewrite_ = std::move(rewrite);
  }

 private:
  struct PlannedFlow {
    std::string src;
    std::string dst;
    Transport transport = Transport::kUdp;
    uint16_t src_port = 0;
    uint32_t flow_id = 0;
    std::vector<aggregator::LinkIndex> path;  // the links it really crosses
    double base_rtt_s = 0;
    double bw_phase_s = -1;  // bandwidth flow: offset of its bursts
  };
  void Plan();
  // One second's results, ingested as agents' batches (one per source node).
  void IngestSecond();
  // Run() or RunWithBetweenTicks().
  void Step(int seconds, bool between_ticks);
  std::vector<aggregator::LinkIndex> RouteOf(const PlannedFlow& f) const;

  FleetShape shape_;
  FakeClock clock_;
  std::shared_ptr<const FabricMap> map_;
  std::shared_ptr<const FabricMap> truth_;  // the real topology, even when the analyzer has none
  std::unique_ptr<aggregator::PairTable> pairs_;
  std::unique_ptr<Analyzer> analyzer_;
  std::vector<PlannedFlow> flows_;
  std::vector<LinkFault> link_faults_;
  std::map<std::string, std::pair<double, std::pair<bool, bool>>> host_noise_;
  std::mt19937_64 rng_;
  uint64_t seq_ = 0;
  uint64_t results_ = 0;
  std::function<void(std::vector<ReportedProbe>&)> rewrite_;
  int64_t second_ = 0;
  std::vector<aggregator::EscalationRequest> between_leads_;
  uint64_t route_salt_ = 0;
};

// A fleet routed by an ECMP hash the analyzer cannot see, its switches listing their addresses
// (traced): by default the path-resolution tests' 4 spines x 8 leaves x 6 hosts, 32 flows per
// inter-leaf pair.
FleetShape TracedEcmpShape(int spines = 4, int leaves = 8, int hosts_per_leaf = 6,
                           int inter_flows = 32);
// "kind@location ..." of findings, for assertion messages.
std::string DescribeFindings(const std::vector<TrackedFinding>& findings);
// A finding's evidence value, -1 when it has none by that name.
double FindingEvidence(const TrackedFinding& f, const std::string& key);

}  // namespace fw::analysis::testing
