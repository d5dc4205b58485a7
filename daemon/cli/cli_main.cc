// fabricwatch: the operator CLI over the aggregator's JSON API.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "exporter/http_client.h"

namespace {

using nlohmann::json;

// Nagios/NHC exit codes.
constexpr int kOk = 0, kWarning = 1, kCritical = 2, kUnknown = 3;

struct Ctx {
  std::string aggregator = "127.0.0.1:9751";
  std::string format = "text";
  int timeout_ms = 5000;
};

// Fetches a JSON document; on failure prints why and returns nullopt.
std::optional<json> FetchJson(const Ctx& c, const std::string& target) {
  auto r = fw::http::Get(c.aggregator, target, c.timeout_ms);
  if (!r.ok()) {
    std::cerr << "fabricwatch: cannot reach the aggregator at " << c.aggregator << ": "
              << r.status().message() << "\n";
    return std::nullopt;
  }
  if (r->status != 200) {
    std::cerr << "fabricwatch: " << target << " answered HTTP " << r->status << "\n";
    return std::nullopt;
  }
  json j = json::parse(r->body, nullptr, false);
  if (j.is_discarded()) {
    std::cerr << "fabricwatch: " << target << " returned invalid JSON\n";
    return std::nullopt;
  }
  return j;
}

std::string Str(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return "-";
  return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
}

int Nodes(const Ctx& c) {
  auto j = FetchJson(c, "/api/v1/nodes");
  if (!j) return kUnknown;
  if (c.format == "json") {
    std::cout << j->dump(2) << "\n";
  } else {
    std::printf("%-24s %-9s %-8s %-6s %-6s %s\n", "NODE", "CONNECTED", "HEALTH", "GPUS", "NICS",
                "LAST SEEN");
    for (const auto& n : *j) {
      std::printf("%-24s %-9s %-8s %-6zu %-6zu %s\n", Str(n, "name").c_str(),
                  n.value("connected", false) ? "yes" : "no", Str(n, "health").c_str(),
                  n["inventory"]["gpus"].size(), n["inventory"]["nics"].size(),
                  Str(n, "last_seen").c_str());
    }
  }
  int rc = kOk;
  for (const auto& n : *j) {
    if (!n.value("connected", false)) rc = std::max(rc, kWarning);
  }
  return rc;
}

int Findings(const Ctx& c, bool active_only) {
  auto j = FetchJson(c, std::string("/api/v1/findings") + (active_only ? "?active=true" : ""));
  if (!j) return kUnknown;
  int rc = kOk;
  for (const auto& f : *j) {
    if (!f.value("active", false)) continue;
    rc = std::max(rc, Str(f, "severity") == "critical" ? kCritical : kWarning);
  }
  if (c.format == "json") {
    std::cout << j->dump(2) << "\n";
    return rc;
  }
  if (j->empty()) std::cout << "no findings\n";
  for (const auto& f : *j) {
    std::printf("%-8s %-18s %-24s %s\n", Str(f, "severity").c_str(), Str(f, "kind").c_str(),
                Str(f["location"], "id").c_str(), Str(f, "summary").c_str());
  }
  return rc;
}

int Links(const Ctx& c) {
  auto j = FetchJson(c, "/api/v1/links");
  if (!j) return kUnknown;
  if (c.format == "json") {
    std::cout << j->dump(2) << "\n";
    return kOk;
  }
  std::printf("%-28s %-10s %-10s %-12s %-10s %s\n", "LINK", "STATE", "LOSS", "LAT_INFL", "BW_RATIO",
              "PROBES");
  int rc = kOk;
  for (const auto& l : *j) {
    std::string state = Str(l, "state");
    if (state == "down") rc = std::max(rc, kCritical);
    else if (state != "ok" && state != "unknown") rc = std::max(rc, kWarning);
    std::printf("%-28s %-10s %-10s %-12s %-10s %s\n", Str(l, "id").c_str(), state.c_str(),
                Str(l, "loss_ratio").c_str(), Str(l, "latency_inflation").c_str(),
                Str(l, "bandwidth_ratio").c_str(), Str(l, "probes").c_str());
  }
  return rc;
}

int Pairs(const Ctx& c, const std::string& src, const std::string& dst) {
  std::string q = "/api/v1/pairs?limit=1000";
  if (!src.empty()) q += "&src=" + src;
  if (!dst.empty()) q += "&dst=" + dst;
  auto j = FetchJson(c, q);
  if (!j) return kUnknown;
  if (c.format == "json") {
    std::cout << j->dump(2) << "\n";
    return kOk;
  }
  std::printf("%-20s %-20s %-12s %-8s %-10s %-12s %-12s\n", "SRC", "DST", "TRANSPORT", "PROBES",
              "LOSS", "P50_US", "P99_US");
  for (const auto& p : *j) {
    const json& w = p["windows"]["60s"];
    auto us = [&](const char* k) {
      return w.contains(k) && w[k].is_number() ? std::to_string(int(w[k].get<double>() * 1e6))
                                               : std::string("-");
    };
    std::printf("%-20s %-20s %-12s %-8s %-10s %-12s %-12s\n", Str(p, "src").c_str(),
                Str(p, "dst").c_str(), Str(p, "transport").c_str(), Str(w, "probes").c_str(),
                Str(w, "loss_ratio").c_str(), us("rtt_p50_s").c_str(), us("rtt_p99_s").c_str());
  }
  return kOk;
}

int StatusCmd(const Ctx& c) {
  auto nodes = FetchJson(c, "/api/v1/nodes");
  if (!nodes) return kUnknown;
  size_t connected = 0;
  for (const auto& n : *nodes) connected += n.value("connected", false) ? 1 : 0;
  auto findings = FetchJson(c, "/api/v1/findings?active=true");
  size_t warn = 0, crit = 0;
  if (findings) {
    for (const auto& f : *findings) (Str(f, "severity") == "critical" ? crit : warn)++;
  }
  int rc = crit ? kCritical : (warn || connected < nodes->size()) ? kWarning : kOk;
  if (!findings) rc = std::max(rc, kUnknown);
  if (c.format == "json") {
    std::cout << json{{"nodes", nodes->size()}, {"connected", connected},
                      {"findings_warning", warn}, {"findings_critical", crit}, {"exit_code", rc}}
                     .dump(2)
              << "\n";
  } else {
    static const char* kWord[] = {"OK", "WARNING", "CRITICAL", "UNKNOWN"};
    std::printf("%s: %zu/%zu agents connected, %zu critical and %zu warning findings active\n",
                kWord[rc], connected, nodes->size(), crit, warn);
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Ctx c;
  CLI::App app{"fabricwatch: ask the aggregator about the fabric. Exit codes: 0 ok, 1 warning, "
               "2 critical, 3 unknown/error."};
  app.add_option("--aggregator", c.aggregator, "aggregator HTTP address HOST:PORT")
      ->capture_default_str();
  app.add_option("--format", c.format, "text|json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--timeout-ms", c.timeout_ms, "HTTP timeout")->capture_default_str();
  app.require_subcommand(1);
  auto* status = app.add_subcommand("status", "fleet summary and overall verdict");
  auto* nodes = app.add_subcommand("nodes", "agents, their health and inventory");
  bool all = false;
  auto* findings = app.add_subcommand("findings", "active findings (--all for history)");
  findings->add_flag("--all", all, "include resolved findings");
  auto* links = app.add_subcommand("links", "fabric links and their state");
  std::string src, dst;
  auto* pairs = app.add_subcommand("pairs", "per-pair probe statistics");
  pairs->add_option("--src", src, "only pairs from this node");
  pairs->add_option("--dst", dst, "only pairs to this node");
  for (auto* sub : {status, nodes, findings, links, pairs}) sub->fallthrough();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kUnknown;
  }
  if (*status) return StatusCmd(c);
  if (*nodes) return Nodes(c);
  if (*findings) return Findings(c, !all);
  if (*links) return Links(c);
  if (*pairs) return Pairs(c, src, dst);
  return kUnknown;
}
