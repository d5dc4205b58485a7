// Scenario files: topology, duration, background noise and injected faults with their ground truth.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "tests/sim/flows.h"
#include "tests/sim/topology.h"

namespace fw::sim {

enum class FaultKind {
  kLinkLoss,          // random loss on one link, both directions
  kLinkBandwidth,     // capacity multiplied by `factor`
  kLinkDown,          // every traversal lost (with `reroute`, the leaf routes around it)
  kLinkFlap,          // down for `down_s` at the start of every `period_s`
  kLinkCongestion,    // queueing delay (exponential, mean `latency_us`) and a little loss
  kSwitchCongestion,  // kLinkCongestion on every fabric link of a switch
  kNicDegraded,       // loss and latency on one host NIC's cable, toward every peer
  kHostNoise,         // the host's own stack: latency spikes and timeouts on all its probes
  kHostCpuBusy,       // the host's CPUs saturated: its bursts get `factor` of the goodput and
                      // report `cpu_busy`; the fabric is fine
};
std::string_view FaultKindName(FaultKind k);

// Realistic healthy-fleet variation; every run has it, faults come on top.
struct NoiseSpec {
  double jitter_us = 2;              // mean exponential host jitter per probe
  double spike_prob = 0.001;         // per probe: scheduling hiccup
  double spike_us = 200;             // its mean size
  double episode_prob = 1.0 / 1200;  // per link and second: a micro-congestion episode starts
  double episode_s = 3;              // its mean length
  double episode_us = 15;            // its mean queueing delay per traversal
  double background_loss = 1e-5;     // per traversal
  double bandwidth_efficiency = 0.92;
  double bandwidth_noise = 0.02;  // relative standard deviation of goodput
};

struct Fault {
  FaultKind kind = FaultKind::kLinkLoss;
  int line = 0;
  // Target, resolved against the topology: a link, a switch, or a host (+ rail for a NIC).
  std::string target;
  std::string nic;
  int link = -1;
  int switch_index = -1;
  int host = -1;
  int rail = 0;
  double start_s = 0;
  double end_s = 0;  // exclusive; defaults to the scenario's duration
  double loss = 0;
  double factor = 1;
  double latency_us = 0;
  double period_s = 10;
  double down_s = 3;
  double spike_prob = 0;
  double spike_us = 0;
  double cpu_busy = 0.97;  // kHostCpuBusy: the CPU busy share its bursts report
  // kLinkDown: the leaf end routes around the down link (its packets up take the next spine whose
  // uplink is up), while the spine end keeps its static route to the leaf and drops what the
  // other leaves send it toward that leaf: the namespace fabric's routing, where nothing
  // withdraws the leaf's prefix from the spine (tests/fabric/fabric.py).
  bool reroute = false;
  // Ground truth: the finding kinds that count as a correct detection (defaults per kind).
  std::vector<std::string> expect_kinds;

  bool ActiveAt(double t) const { return t >= start_s && t < end_s; }
};

// Path tracing (issue 16): every agent reports the true forward path of each of its flows as the
// hops a TTL-limited trace of the flow's 5-tuple would see, once after connecting and again for
// each trace request its plan carries. Switches answer TTL expiry from their map address, except
// the silent ones, whose hops stay empty.
struct TracingSpec {
  bool enabled = false;
  std::vector<int> silent;  // switch indices
  // Whether agents also trace the echoes they send back (PathTrace.echo). false: forward paths
  // only, as a real agent whose 2 % trace budget has not reached the echoes yet.
  bool echoes = true;
};

struct Scenario {
  std::string name;
  std::string description;
  TopologySpec topology;
  FlowPlanSpec flows;
  double duration_s = 60;
  uint64_t seed = 1;
  int bandwidth_probes_per_s = 2;  // per agent: bandwidth results rotate over its flows
  double heartbeat_s = 5;          // as the real agent; 0: none while streaming
  NoiseSpec noise;
  TracingSpec tracing;
  std::vector<Fault> faults;
};

// Parses scenario YAML and resolves every fault target against the topology it describes. Errors
// name the source, the line and the key: "loss.yaml:9: faults[0].link: no link 'leaf9~spine1'".
StatusOr<Scenario> ParseScenario(const std::string& yaml, const std::string& source);
StatusOr<Scenario> LoadScenario(const std::string& path);

}  // namespace fw::sim
