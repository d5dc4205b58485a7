// Link and host models: per simulated second, the state of every link and host; per probe, a
// sample.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/sim/flows.h"
#include "tests/sim/scenario.h"
#include "tests/sim/topology.h"

namespace fw::sim {

// splitmix64: a tiny, fast generator; one per generating thread, never shared.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double Exponential(double mean) { return -mean * std::log1p(-Uniform()); }
  // Approximately normal (Irwin-Hall of 4), cheap and bounded.
  double Normalish() { return (Uniform() + Uniform() + Uniform() + Uniform() - 2.0) * 1.7320508; }

 private:
  uint64_t s_;
};

struct LinkState {
  float loss = 0;       // per traversal
  float queue_us = 0;   // mean exponential queueing delay per traversal
  float bw_factor = 1;  // capacity multiplier
  bool down = false;
  bool congested = false;  // an injected congestion (not a background episode)
};

struct HostState {
  float spike_prob = 0;
  float spike_us = 0;
  float loss = 0;  // probes timing out in the host's own stack
  float cpu_busy = 0;   // the CPU busy share its bursts report; 0: the healthy default
  float bw_factor = 1;  // multiplies the goodput of the bursts it sends (a saturated sender)
};

struct LatencySample {
  bool lost = false;
  uint64_t rtt_ns = 0;
};

// A background micro-congestion episode, kept so that false positives can be explained.
struct Episode {
  int link = 0;
  double start_s = 0;
  double duration_s = 0;
  double queue_us = 0;
};

struct BandwidthSample {
  bool lost = false;
  double goodput_bps = 0;
  uint64_t duration_ns = 0;
  // The prober's CPU busy share over the burst, in thousandths (ProbeResult.cpu_busy_permille).
  uint32_t cpu_busy_permille = 0;
  uint32_t cpu_peak_permille = 0;
};

// REQUIRES: Advance() and Sample*() are not called concurrently (Advance rewrites the state that
// Sample reads). Samples from several threads at once are fine, each with its own Rng.
class FabricModel {
 public:
  FabricModel(const FatTree& tree, const Scenario& scenario);

  // Moves to simulated second `t`: applies the faults active at t and evolves the background
  // micro-congestion episodes (which need one call per second, in order).
  void Advance(double t);

  // The flow as the fabric routes it this second. A `reroute` link_down fault moves a way (the
  // probe's or the echo's) that leaves its leaf up the down link to the next spine whose uplink
  // from that leaf is up, both of that way's fabric links; a way that reaches the down link from
  // its spine end keeps it and is lost there. Without such a fault: `f` itself. `scratch` holds
  // a moved flow.
  const Flow& Routed(const Flow& f, Flow* scratch) const;

  LatencySample SampleLatency(const Flow& f, Rng& rng) const;
  // The chance that one latency probe of every flow in `flows` all come back this second: an
  // agent's batch holds bad news (a lost probe) with 1 minus this.
  double AllAnsweredProbability(const std::vector<Flow>& flows) const;
  // A short TCP transfer of `bytes` over the flow's forward path.
  BandwidthSample SampleBandwidth(const Flow& f, uint64_t bytes, Rng& rng) const;

  const LinkState& link(int i) const { return links_[static_cast<size_t>(i)]; }
  const HostState& host(int i) const { return hosts_[static_cast<size_t>(i)]; }
  // Episodes so far, oldest first (at most kMaxEpisodes are kept).
  const std::vector<Episode>& episodes() const { return episodes_; }
  static constexpr size_t kMaxEpisodes = 100000;

 private:
  const FatTree& tree_;
  const Scenario& scenario_;
  Rng episodes_rng_;
  std::vector<float> episode_left_s_;  // background episode remaining per link
  std::vector<float> episode_us_;      // its queueing delay
  std::vector<LinkState> links_;
  std::vector<char> rerouted_;  // per link: down, and its leaf routes around it (Routed)
  bool any_rerouted_ = false;
  std::vector<HostState> hosts_;
  std::vector<Episode> episodes_;
};

}  // namespace fw::sim
