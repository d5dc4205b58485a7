// Aggregator composition and the HTTP API.
#include "daemon/aggregator/aggregator.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace fw::aggregator {

namespace v1 = fabricwatch::v1;
using nlohmann::json;

Aggregator::Aggregator(AggregatorOptions options, const Clock& clock)
    : options_(std::move(options)),
      clock_(clock),
      self_(registry_, FW_VERSION),
      fleet_(clock_, registry_,
             FleetState::Options{options_.heartbeat_timeout_s, options_.record_test_batches}),
      ports_(registry_),
      ticks_(registry_.AddCounter("fabricwatch_aggregator_ticks_total", "Analysis ticks run.")
                 .WithLabels({})) {}

Aggregator::~Aggregator() { Stop(); }

std::string Aggregator::IngestStatePath() const {
  return options_.state_dir.empty() ? "" : options_.state_dir + "/ingest_state.json";
}

Status Aggregator::Start() {
  if (!options_.state_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.state_dir, ec);
    if (ec) {
      return Status::FailedPrecondition("state dir " + options_.state_dir +
                                        ": cannot create: " + ec.message());
    }
    std::ifstream in(IngestStatePath());
    if (in) {
      std::stringstream ss;
      ss << in.rdbuf();
      Status st = fleet_.ImportIngestJson(ss.str());
      if (!st.ok()) {
        // A damaged state file costs dedup history, not availability.
        spdlog::warn("msg=\"ignoring damaged ingest state\" file={} error=\"{}\"",
                     IngestStatePath(), st.message());
      } else {
        spdlog::info("msg=\"ingest state restored\" file={}", IngestStatePath());
      }
    }
  }
  auto http = http::Server::Start(options_.http_listen);
  if (!http.ok()) return http.status();
  http_ = std::move(*http);
  InstallHttpHandlers();

  GrpcServer::Options go;
  go.listen = options_.grpc_listen;
  auto grpc = GrpcServer::Start(go, fleet_, *this, registry_);
  if (!grpc.ok()) return grpc.status();
  grpc_ = std::move(*grpc);
  fleet_.SetMembershipListener([] {});
  ticker_ = std::thread([this] { TickLoop(); });
  ready_ = true;
  spdlog::info("msg=\"aggregator started\" grpc_port={} http_port={} version={}", grpc_port(),
               http_port(), FW_VERSION);
  return Status::Ok();
}

void Aggregator::Stop() {
  {
    std::lock_guard lock(tick_mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  tick_cv_.notify_all();
  ready_ = false;
  if (ticker_.joinable()) ticker_.join();
  if (grpc_) grpc_->Shutdown(3.0);
  grpc_.reset();
  if (!IngestStatePath().empty()) {
    std::string tmp = IngestStatePath() + ".tmp";
    std::ofstream out(tmp, std::ios::trunc);
    out << fleet_.ExportIngestJson();
    out.close();
    std::error_code ec;
    if (!out || (std::filesystem::rename(tmp, IngestStatePath(), ec), ec)) {
      spdlog::error("msg=\"cannot save ingest state\" file={}", IngestStatePath());
    }
  }
  if (http_) http_->Stop();
  spdlog::info("msg=\"aggregator stopped\"");
}

void Aggregator::TickLoop() {
  std::unique_lock lock(tick_mu_);
  while (!stopping_) {
    tick_cv_.wait_for(lock, std::chrono::duration<double>(options_.tick_s));
    if (stopping_) break;
    lock.unlock();
    fleet_.Sweep();
    ticks_.Inc();
    lock.lock();
  }
}

void Aggregator::OnProbeBatch(const std::string&, const v1::ProbeBatch&) {}
void Aggregator::OnCounterBatch(const std::string& node, const v1::CounterBatch& batch) {
  ports_.Update(node, batch);
}
void Aggregator::OnCheckReport(const std::string&, const v1::CheckReport&) {}
std::optional<v1::ProbePlan> Aggregator::PlanFor(const std::string&) { return std::nullopt; }

namespace {

json InventoryJson(const v1::Inventory& inv) {
  json gpus = json::array(), nics = json::array();
  for (const auto& g : inv.gpus()) {
    gpus.push_back({{"bus_id", g.bus_id()}, {"name", g.name()}, {"numa_node", g.numa_node()},
                    {"best_nic", g.best_nic()}, {"affinity_class", g.affinity_class()}});
  }
  for (const auto& n : inv.nics()) {
    nics.push_back({{"bus_id", n.bus_id()}, {"device", n.device()}, {"netdev", n.netdev()},
                    {"numa_node", n.numa_node()}, {"fabric", n.fabric()},
                    {"link_layer", n.link_layer()}, {"rate_gbps", n.rate_gbps()}});
  }
  return {{"hostname", inv.hostname()}, {"packages", inv.packages()},
          {"numa_nodes", inv.numa_nodes()}, {"cores", inv.cores()},
          {"gpus", gpus}, {"nics", nics}, {"source", inv.source()}};
}

}  // namespace

void Aggregator::InstallHttpHandlers() {
  http_->HandleMetrics(registry_, [this](double s) { self_.ObserveScrape(s); });
  http_->Handle("/healthz", [](const http::Request&, http::Response& r) {
    r.Send(200, "text/plain", "ok\n");
  });
  http_->Handle("/readyz", [this](const http::Request&, http::Response& r) {
    if (ready_) {
      r.Send(200, "text/plain", "ready\n");
    } else {
      r.Send(503, "text/plain", "not ready\n");
    }
  });
  http_->Handle("/api/v1/nodes", [this](const http::Request&, http::Response& r) {
    json out = json::array();
    for (const NodeView& n : fleet_.Nodes()) {
      json endpoints = json::array();
      for (const auto& e : n.endpoints) {
        endpoints.push_back({{"transport", TransportName(e.transport())},
                             {"address", e.address()}, {"port", e.port()}, {"nic", e.nic()}});
      }
      const NodeIngest& in = n.ingest;
      out.push_back({{"name", n.name},
                     {"connected", n.connected && n.up},
                     {"last_seen", n.last_seen_wall_ns ? FormatRfc3339(n.last_seen_wall_ns) : ""},
                     {"last_report_age_s", n.last_report_age_s},
                     {"health", n.health},
                     {"version", n.version},
                     {"inventory", InventoryJson(n.inventory)},
                     {"endpoints", endpoints},
                     {"ingest",
                      {{"session_id", in.session_id}, {"last_seq", in.last_seq},
                       {"batches", in.batches}, {"results", in.results},
                       {"duplicates", in.duplicates}, {"gaps", in.gaps},
                       {"test_batches", in.test_batches},
                       {"test_ids_distinct", in.test_ids.size()}}}});
    }
    r.Send(200, "application/json", out.dump());
  });
  http_->Handle("/", [this](const http::Request&, http::Response& r) {
    std::ostringstream html;
    html << "<!doctype html><html><head><meta charset=utf-8><title>fabricwatch</title>"
            "<meta http-equiv=refresh content=5></head><body><h1>fabricwatch aggregator</h1>"
         << "<p>version " << FW_VERSION << " &middot; " << fleet_.connected()
         << " agents connected &middot; <a href=/metrics>/metrics</a> &middot; "
            "<a href=/api/v1/nodes>/api/v1/nodes</a></p><table border=1 cellpadding=4>"
            "<tr><th>node</th><th>connected</th><th>health</th><th>last report (s ago)</th>"
            "<th>GPUs</th><th>NICs</th><th>batches</th></tr>";
    for (const NodeView& n : fleet_.Nodes()) {
      std::string name;
      for (char c : n.name) {
        if (c == '<') name += "&lt;"; else if (c == '&') name += "&amp;"; else name += c;
      }
      html << "<tr><td>" << name << "</td><td>" << (n.connected && n.up ? "yes" : "no")
           << "</td><td>" << n.health << "</td><td>" << static_cast<int>(n.last_report_age_s)
           << "</td><td>" << n.inventory.gpus_size() << "</td><td>" << n.inventory.nics_size()
           << "</td><td>" << n.ingest.batches << "</td></tr>";
    }
    html << "</table></body></html>\n";
    r.Send(200, "text/html; charset=utf-8", html.str());
  });
}

}  // namespace fw::aggregator
