// Bounds on what one client can make the aggregator hold (docs/durability.md, "Bounds").
// Each has a flag and config key; what a bound refuses is counted in
// fabricwatch_ingest_refused_total{reason} and logged.
#pragma once

#include "common/config.h"

namespace CLI {
class App;
}

namespace fw::aggregator {

struct ClientLimits {
  int max_message_bytes = 16 << 20;    // --max-message-bytes: one gRPC message
  int max_nodes = 20000;               // --max-nodes: a Hello for one more node is refused
  int max_devices_per_node = 256;      // --max-devices-per-node: inventory devices, port series
  int max_findings_per_report = 1024;  // --max-findings-per-report: the rest are dropped
  Seconds node_retire_after{3600};     // --node-retire-after: a departed node is forgotten; 0 never
  // --durable-acks: with a state dir, acks wait for the ingest journal's commit
  // (docs/durability.md). Off, acks are sent at once and a kill -9 shows false gaps.
  bool durable_acks = true;
};

// Config keys (before the file is loaded) and flags (before parsing), as the daemon's other
// options.
void BindClientLimits(ConfigBinding& binding, ClientLimits* limits);
void AddClientLimitFlags(CLI::App& app, ClientLimits* limits);

}  // namespace fw::aggregator
