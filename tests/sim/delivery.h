// When a simulated agent's results reach the aggregator: no sooner than a real agent's would
// (docs/simulator.md, "Delivery"). A real agent (daemon/agent/batch_pacer.h, docs/uplink.md "Report
// pacing") has an answered probe's result once its echo is back, a lost probe's only when the
// probe has gone unanswered for its flow's timeout (probes/net/udp_prober.h: the plan entry's
// timeout_ms, an escalated pair's short one, else the agent's 1 s), and sends
// what it holds every report interval, or sooner, at most every 250 ms, when it holds bad news (a
// lost probe) or a result toward a peer its plan escalated.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tests/sim/flows.h"

namespace fw::sim {

// A real agent's prober declares a probe lost this long after sending it unless its plan says
// otherwise (UdpProbePlan's default timeout_ns; ProbePlan.probe_timeout_ms and
// PlannedPeer.timeout_ms change it).
inline constexpr double kProbeTimeoutS = 1.0;
// The shortest gap between two batches when an urgent result waits (BatchPacer::kMinUrgentGap).
inline constexpr double kMinUrgentGapS = 0.25;

// The send instants, in simulated seconds, of a flow probing at `rate` per second that fall in
// [from, to): the flow sends at (j + phase) / rate for every integer j, `phase` in [0, 1) spreading
// the flows of an agent over the period. Appended to `out`; returns how many. A rate that changes
// between windows keeps the grid of the new rate: a flow raised 10x at t sends its next probe
// within 1/(10 r) of t, as a prober that applies a plan at once does.
int SendInstants(double rate, double phase, double from, double to, std::vector<double>* out);

// One result an agent holds until it may send it.
struct HeldResult {
  const Flow* flow = nullptr;
  double sent_s = 0;   // simulated seconds since the run's start
  double ready_s = 0;  // when the agent has it: the echo back, or the timeout for a lost probe
  bool bandwidth = false;
  bool lost = false;
  // The echo of a probe reported lost on a round-trip timeout, within the fixed one: rtt_ns is its
  // round trip, and the aggregator takes the loss back (ProbeResult.late). Ready at sent + RTT.
  bool late = false;
  bool urgent = false;  // lost, or toward a peer the plan escalates: sent without waiting
  uint64_t seq = 0;
  uint64_t rtt_ns = 0;  // the burst's duration for a bandwidth result
  double goodput_bps = 0;
  uint32_t cpu_busy_permille = 0;
  uint32_t cpu_peak_permille = 0;
};

// A latency probe sent at `sent_s` on `flow`, whose echo the model drew (`lost`, else after
// `rtt_ns`), on a flow whose probes time out after `timeout_s`: answered, ready once its echo is
// back; or lost (no echo, or one slower than the timeout, which the agent counts late), ready at
// sent + timeout. Urgent when lost or `raised` (a flow its plan escalates).
HeldResult LatencyResult(const Flow* flow, double sent_s, bool lost, uint64_t rtt_ns,
                         double timeout_s, bool raised);

// The results one agent holds and when its batches go: every report interval at the agent's
// phase (the caller says when that is due), and sooner when an urgent result is ready and the
// last batch went at least kMinUrgentGapS ago.
class Outbox {
 public:
  // `r.ready_s` must be set: an answered probe at sent + RTT, a lost one at sent + its timeout.
  void Hold(const HeldResult& r) {
    held_.push_back(r);
    Note(r);
  }

  // Whether a batch goes at `now_s`: `regular` (the report interval is due) with a result ready,
  // or an urgent result ready and the urgent gap since the last batch passed.
  bool Due(double now_s, bool regular) const;

  // Moves the results ready at `now_s` to `out` (cleared first), oldest sent first; the rest stay.
  void TakeReady(double now_s, std::vector<HeldResult>* out);
  // The batch taken went at `now_s` (the write was accepted).
  void Sent(double now_s) { last_batch_s_ = now_s; }
  // The write was refused (its stream busy): the results go back, to leave with the next batch.
  void Return(const std::vector<HeldResult>& taken);

  size_t held() const { return held_.size(); }

 private:
  static constexpr double kNever = 1e300;
  void Note(const HeldResult& r) {
    next_ready_s_ = std::min(next_ready_s_, r.ready_s);
    if (r.urgent) next_urgent_s_ = std::min(next_urgent_s_, r.ready_s);
  }

  std::vector<HeldResult> held_;
  double last_batch_s_ = -1e9;
  // The earliest ready_s of what is held, and of the urgent part (kNever: none); Due reads these,
  // not every result, at every slot of every agent.
  double next_ready_s_ = kNever;
  double next_urgent_s_ = kNever;
};

}  // namespace fw::sim
