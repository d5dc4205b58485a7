#include "daemon/aggregator/api/http_api.h"

#include <nlohmann/json.hpp>
#include <string>

#include "daemon/aggregator/api/analysis_json.h"
#include "daemon/aggregator/api/nodes_query.h"
#include "daemon/aggregator/api/pairs_json.h"
#include "daemon/aggregator/api/status_page.h"
#include "daemon/aggregator/ingest/node_locality.h"

namespace fw::aggregator {

namespace v1 = fabricwatch::v1;
using nlohmann::json;

namespace {

// `affinity` and `pcie` only with `with_topology`, and only after the node's first check report.
json InventoryJson(const v1::Inventory& inv, const NodeLocality& locality, bool with_topology) {
  json gpus = json::array(), nics = json::array();
  for (const auto& g : inv.gpus()) {
    gpus.push_back({{"bus_id", g.bus_id()},
                    {"name", g.name()},
                    {"numa_node", g.numa_node()},
                    {"best_nic", g.best_nic()},
                    {"affinity_class", g.affinity_class()}});
  }
  for (const auto& n : inv.nics()) {
    nics.push_back({{"bus_id", n.bus_id()},
                    {"device", n.device()},
                    {"netdev", n.netdev()},
                    {"numa_node", n.numa_node()},
                    {"fabric", n.fabric()},
                    {"link_layer", n.link_layer()},
                    {"rate_gbps", n.rate_gbps()}});
  }
  json out = {{"hostname", inv.hostname()},
              {"packages", inv.packages()},
              {"numa_nodes", inv.numa_nodes()},
              {"cores", inv.cores()},
              {"gpus", gpus},
              {"nics", nics},
              {"source", inv.source()}};
  if (with_topology && locality.reported) {
    out["affinity"] = AffinityJson(locality);
    out["pcie"] = PcieJson(locality);
  }
  return out;
}

json NodesJson(const FleetState& fleet, const NodesQuery& q) {
  json out = json::array();
  for (const NodeView& n : fleet.Nodes(q.name)) {
    json endpoints = json::array();
    for (const auto& e : n.endpoints) {
      endpoints.push_back({{"transport", TransportName(e.transport())},
                           {"address", e.address()},
                           {"port", e.port()},
                           {"nic", e.nic()}});
    }
    const NodeIngest& in = n.ingest;
    json inventory = InventoryJson(n.inventory, n.locality, q.WithTopology());
    // NCCL's state as the agent announced it (docs/collectives.md); empty where not checked.
    inventory["nccl"] = n.collective.nccl_status();
    out.push_back({{"name", n.name},
                   {"connected", n.connected && n.up},
                   {"last_seen", n.last_seen_wall_ns ? FormatRfc3339(n.last_seen_wall_ns) : ""},
                   {"last_report_age_s", n.last_report_age_s},
                   {"health", n.health},
                   {"version", n.version},
                   {"inventory", std::move(inventory)},
                   {"endpoints", endpoints},
                   {"ingest",
                    {{"session_id", in.session_id},
                     {"last_seq", in.last_seq},
                     {"batches", in.batches},
                     {"results", in.results},
                     {"duplicates", in.duplicates},
                     {"gaps", in.gaps},
                     {"test_batches", in.test_batches},
                     {"test_ids_distinct", in.test_ids.size()}}}});
  }
  return out;
}

void SendError(http::Response& r, const Status& st) {
  r.Send(400, "application/json", json{{"error", st.message()}}.dump());
}

}  // namespace

void InstallApiHandlers(http::Server& server, const ApiSources& s) {
  server.HandleMetrics(s.registry, [&self = s.self](double sec) { self.ObserveScrape(sec); });
  server.Handle("/healthz",
                [](const http::Request&, http::Response& r) { r.Send(200, "text/plain", "ok\n"); });
  server.Handle("/readyz", [&ready = s.ready, &quarantined = s.quarantined](const http::Request&,
                                                                            http::Response& r) {
    if (ready) {
      // Still ready: the daemon works without the history a corrupt file held, and taking a
      // fleet monitor out of service for that would hide the fleet. The body says what was lost.
      std::string body = "ready\n";
      for (const QuarantinedFile& q : quarantined) {
        body += "warning: state file " + q.from + " was corrupt (" + q.error + "); " +
                (q.to.empty() ? "it could not be moved aside"
                              : "moved to " + q.to + ", started fresh") +
                "\n";
      }
      r.Send(200, "text/plain", body);
    } else {
      r.Send(503, "text/plain", "not ready\n");
    }
  });
  server.Handle("/api/v1/nodes", [&fleet = s.fleet](const http::Request& req, http::Response& r) {
    auto q = ParseNodesQuery(req.query);
    if (!q.ok()) return SendError(r, q.status());
    r.Send(200, "application/json", NodesJson(fleet, *q).dump());
  });
  server.Handle("/api/v1/pairs",
                [&pairs = s.pairs, &clock = s.clock](const http::Request& req, http::Response& r) {
                  auto q = ParsePairsQuery(req.query);
                  if (!q.ok()) return SendError(r, q.status());
                  PairsPage page = RenderPairs(pairs, *q, clock.MonotonicNanos());
                  r.Send(200, "application/json", page.rows.dump());
                });
  server.Handle("/api/v1/findings",
                [&analyzer = s.analyzer](const http::Request& req, http::Response& r) {
                  auto q = analysis::ParseFindingsQuery(req.query);
                  if (!q.ok()) return SendError(r, q.status());
                  r.Send(200, "application/json", analysis::RenderFindings(analyzer, *q).dump());
                });
  server.Handle("/api/v1/links", [&analyzer = s.analyzer](const http::Request&, http::Response& r) {
    r.Send(200, "application/json", analysis::RenderLinks(analyzer.Links()).dump());
  });
  InstallStatusPage(server, s.version);
}

}  // namespace fw::aggregator
