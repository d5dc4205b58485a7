// Fetch, verdict and output of each verb.
#include "daemon/cli/verbs.h"

#include <cmath>
#include <sstream>

#include "daemon/cli/api_client.h"
#include "daemon/cli/text_table.h"
#include "daemon/cli/topo.h"
#include "daemon/cli/verdict.h"

namespace fw::cli {
namespace {

using nlohmann::json;

std::string Str(const json& j, const char* key) {
  if (!j.is_object()) return "-";
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "-";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number_float()) {
    std::ostringstream s;
    s.precision(4);
    s << it->get<double>();
    return s.str();
  }
  return it->dump();
}

const json& Obj(const json& j, const char* key) {
  static const json kEmpty = json::object();
  if (!j.is_object()) return kEmpty;
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : kEmpty;
}

size_t Count(const json& j, const char* key) {
  if (!j.is_object()) return 0;
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? it->size() : 0;
}

bool Connected(const json& n) {
  return n.is_object() && n.contains("connected") && n["connected"].is_boolean() &&
         n["connected"].get<bool>();
}

// Fetches or prints why not; nullopt means "exit 3".
std::optional<json> Fetch(const Options& o, const std::string& target, std::ostream& err) {
  auto j = FetchJson(o.api, target, o.timeout_ms);
  if (!j.ok()) {
    err << "fabricwatch: " << j.status().message() << "\n";
    return std::nullopt;
  }
  return std::move(*j);
}

std::string UrlEncode(const std::string& s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

void PrintFindings(const json& findings, std::ostream& out) {
  TextTable t({"SEVERITY", "KIND", "LOCATION", "STATE", "SUMMARY"});
  for (const json& f : findings) {
    t.Add({Str(f, "severity"), Str(f, "kind"), Str(Obj(f, "location"), "id"),
           FindingVerdict(f) != kOk ? "active" : "resolved", Str(f, "summary")});
  }
  t.Print(out);
}

}  // namespace

int RunStatus(const Options& o, std::ostream& out, std::ostream& err) {
  auto nodes = Fetch(o, "/api/v1/nodes", err);
  if (!nodes) return kUnknown;
  auto findings = Fetch(o, "/api/v1/findings?active=true", err);
  if (!findings) return kUnknown;
  size_t connected = 0, warn = 0, crit = 0;
  for (const json& n : *nodes) connected += Connected(n) ? 1 : 0;
  for (const json& f : *findings) {
    const int v = FindingVerdict(f);
    if (v == kCritical) ++crit;
    if (v == kWarning) ++warn;
  }
  const int rc = StatusVerdict(*nodes, *findings);
  if (o.format == "json") {
    out << json{{"nodes", nodes->size()},     {"connected", connected},
                {"findings_warning", warn},   {"findings_critical", crit},
                {"verdict", VerdictName(rc)}, {"exit_code", rc}}
               .dump(2)
        << "\n";
  } else {
    out << VerdictWord(rc) << ": " << connected << "/" << nodes->size() << " agents connected, "
        << crit << " critical and " << warn << " warning findings active\n";
  }
  return rc;
}

int RunNodes(const Options& o, std::ostream& out, std::ostream& err) {
  auto nodes = Fetch(o, "/api/v1/nodes", err);
  if (!nodes) return kUnknown;
  const int rc = NodesVerdict(*nodes);
  if (o.format == "json") {
    out << nodes->dump(2) << "\n";
    return rc;
  }
  if (nodes->empty()) {
    out << "no agents have connected to this aggregator\n";
    return rc;
  }
  TextTable t({"NODE", "CONNECTED", "HEALTH", "GPUS", "NICS", "LAST SEEN"});
  for (const json& n : *nodes) {
    const json& inv = Obj(n, "inventory");
    const std::string health = Str(n, "health");
    t.Add({Str(n, "name"), Connected(n) ? "yes" : "no", health.empty() ? "-" : health,
           std::to_string(Count(inv, "gpus")), std::to_string(Count(inv, "nics")),
           Str(n, "last_seen")});
  }
  t.Print(out);
  return rc;
}

int RunFindings(const Options& o, bool include_resolved, std::ostream& out, std::ostream& err) {
  auto findings =
      Fetch(o, include_resolved ? "/api/v1/findings" : "/api/v1/findings?active=true", err);
  if (!findings) return kUnknown;
  const int rc = FindingsVerdict(*findings);
  if (o.format == "json") {
    out << findings->dump(2) << "\n";
  } else if (findings->empty()) {
    out << (include_resolved ? "no findings\n" : "no active findings\n");
  } else {
    PrintFindings(*findings, out);
  }
  return rc;
}

int RunLinks(const Options& o, std::ostream& out, std::ostream& err) {
  auto links = Fetch(o, "/api/v1/links", err);
  if (!links) return kUnknown;
  const int rc = LinksVerdict(*links);
  if (o.format == "json") {
    out << links->dump(2) << "\n";
    return rc;
  }
  if (links->empty()) {
    out << "no links (the aggregator runs without a fabric map, or has no probes yet)\n";
    return rc;
  }
  TextTable t({"LINK", "STATE", "LOSS", "LAT_INFL", "BW_RATIO", "PROBES", "CONFIDENCE"});
  for (const json& l : *links) {
    t.Add({Str(l, "id"), Str(l, "state"), Str(l, "loss_ratio"), Str(l, "latency_inflation"),
           Str(l, "bandwidth_ratio"), Str(l, "probes"), Str(l, "confidence")});
  }
  t.Print(out);
  return rc;
}

int RunPairs(const Options& o, const std::string& src, const std::string& dst, std::ostream& out,
             std::ostream& err) {
  std::string q = "/api/v1/pairs?limit=1000";
  if (!src.empty()) q += "&src=" + UrlEncode(src);
  if (!dst.empty()) q += "&dst=" + UrlEncode(dst);
  auto pairs = Fetch(o, q, err);
  if (!pairs) return kUnknown;
  auto findings = Fetch(o, "/api/v1/findings?active=true", err);
  if (!findings) return kUnknown;
  const int rc = PairsVerdict(*findings, src, dst);
  if (o.format == "json") {
    out << pairs->dump(2) << "\n";
    return rc;
  }
  if (pairs->empty()) out << "no pairs match\n";
  if (!pairs->empty()) {
    TextTable t({"SRC", "DST", "TRANSPORT", "PATH", "PROBES_60S", "LOSS_60S", "P50_US", "P99_US"});
    for (const json& p : *pairs) {
      const json& w = Obj(Obj(p, "windows"), "60s");
      auto us = [&](const char* k) {
        return w.contains(k) && w[k].is_number()
                   ? std::to_string(std::llround(w[k].get<double>() * 1e6))
                   : std::string("-");
      };
      t.Add({Str(p, "src"), Str(p, "dst"), Str(p, "transport"), Str(p, "path_class"),
             Str(w, "probes"), Str(w, "loss_ratio"), us("rtt_p50_s"), us("rtt_p99_s")});
    }
    t.Print(out);
  }
  json matching = json::array();
  for (const json& f : *findings) {
    if (PairFindingMatches(f, src, dst)) matching.push_back(f);
  }
  if (!matching.empty()) {
    out << "\npair findings:\n";
    PrintFindings(matching, out);
  }
  return rc;
}

int RunTopo(const Options& o, const std::string& node, std::ostream& out, std::ostream& err) {
  auto nodes = Fetch(o, "/api/v1/nodes", err);
  if (!nodes) return kUnknown;
  const json* found = nullptr;
  std::string known;
  for (const json& n : *nodes) {
    if (Str(n, "name") == node) found = &n;
    if (known.size() < 200) known += (known.empty() ? "" : ", ") + Str(n, "name");
  }
  if (!found) {
    err << "fabricwatch: node '" << node << "' is not known to the aggregator at " << o.api
        << (known.empty() ? " (no agents have connected)" : " (known: " + known + ")") << "\n";
    return kUnknown;
  }
  auto findings = Fetch(o, "/api/v1/findings?active=true", err);
  if (!findings) return kUnknown;
  const json report = TopoReport(*found, *findings);
  if (o.format == "json") {
    out << report.dump(2) << "\n";
  } else {
    out << TopoText(report);
  }
  return report["exit_code"].get<int>();
}

}  // namespace fw::cli
