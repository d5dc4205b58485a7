// Runs a scenario or the heartbeat ingest benchmark against an aggregator and reports as JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "tests/sim/aggregator_process.h"
#include "tests/sim/batch_builder.h"
#include "tests/sim/scenario.h"

namespace fw::sim {

struct RunOptions {
  AggregatorTarget aggregator;
  double time_scale = 1;  // simulated seconds per real second
  int agents_per_channel = 100;
  int max_unacked_batches = 4;  // per stream; see AgentPool::Options
  int ports_per_agent = 0;      // NIC ports each agent reports once; see AgentPool::Options
  double grace_s = 30;          // findings up to this long after a fault's end still count for it
  double findings_poll_s = 1;   // how often the scorer polls /api/v1/findings
  double warmup_s = 5;          // real seconds of streaming before the ingest window opens
  // Real seconds between the fleet's connection and the simulated clock's start: the phase of
  // every simulated second, so of every fault's start, against the aggregator's 1 Hz ticks, which
  // count from its own start. 0 starts at once, which puts each fault a few tens of ms after a
  // tick: a finding read at a tick waits nearly a whole period (docs/simulator.md, "Phase").
  double start_phase_s = 0;
  BatchEncoding batch_encoding = BatchEncoding::kColumns;  // how results go on the wire
  // Report pacing (docs/uplink.md): each agent sends its results every this many simulated
  // seconds, and at once (that second) when they hold a lost probe or it has escalated flows; 0:
  // every ProbePlan.report_interval_ms the aggregator sends it (1 s before its first plan).
  int batch_seconds = 0;
  // When results reach the aggregator (docs/simulator.md, "Delivery"). kAgent: as a real agent
  // delivers them (tests/sim/delivery.h): an answered probe's result after its echo, a lost one
  // after its flow's probe timeout (the plan's: 1 s, an escalated entry's shorter), in batches
  // every report interval at the agent's phase, or sooner (at most every 250 ms) for a lost probe
  // or an escalated flow's result. kSecond: the model before session 16, each simulated second's
  // results at the agent's slot within that second (up to a second before a real agent could have
  // them); for ingest benchmarks and comparisons with earlier figures.
  enum class Delivery { kAgent, kSecond };
  Delivery delivery = Delivery::kAgent;
};

// Streams the scenario in (scaled) real time and scores it. The report's layout is documented in
// docs/simulator.md; "verdict" holds failures (broken now), pending checks (need the analyzer) and
// warnings.
StatusOr<nlohmann::json> RunScenario(const Scenario& scenario, const RunOptions& options);

// Issue 2's ingest benchmark: `agents` streams write heartbeats and empty batches back-to-back for
// `seconds`; reports connections held, messages/s and the aggregator's CPU and RSS.
StatusOr<nlohmann::json> RunHeartbeatBench(int agents, double seconds, const RunOptions& options);

}  // namespace fw::sim
