#include "daemon/aggregator/ingest/client_limits.h"

#include <CLI/CLI.hpp>

#include "common/daemon_util.h"

namespace fw::aggregator {

void BindClientLimits(ConfigBinding& binding, ClientLimits* l) {
  binding.Bind("max-message-bytes", &l->max_message_bytes);
  binding.Bind("max-nodes", &l->max_nodes);
  binding.Bind("max-devices-per-node", &l->max_devices_per_node);
  binding.Bind("max-findings-per-report", &l->max_findings_per_report);
  binding.Bind("node-retire-after", &l->node_retire_after);
  binding.Bind("durable-acks", &l->durable_acks);
}

void AddClientLimitFlags(CLI::App& app, ClientLimits* l) {
  app.add_option("--max-message-bytes", l->max_message_bytes,
                 "largest gRPC message accepted from an agent (larger ones end the stream with "
                 "RESOURCE_EXHAUSTED)")
      ->capture_default_str()
      ->check(CLI::Range(4096, 1 << 30));
  app.add_option("--max-nodes", l->max_nodes,
                 "most nodes the aggregator tracks; a Hello for one more is refused")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--max-devices-per-node", l->max_devices_per_node,
                 "most devices (inventory GPUs + NICs, distinct counter ports) kept per node")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--max-findings-per-report", l->max_findings_per_report,
                 "most findings kept of one agent check report")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option_function<std::string>(
      "--node-retire-after", DurationSetter(&l->node_retire_after),
      "forget a node, and remove its series, after this long without a session; 0: never "
      "(default 1h)");
  app.add_option("--durable-acks", l->durable_acks,
                 "with --state-dir, acknowledge a batch only once its ingest record is on disk "
                 "(ingest.db); false acks at once")
      ->capture_default_str();
}

}  // namespace fw::aggregator
