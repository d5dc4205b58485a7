// Fetch, verdict and output of each verb.
#include "daemon/cli/verbs.h"

#include <cctype>
#include <cmath>
#include <functional>
#include <optional>
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
  auto j = FetchJson(o, target);
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

std::vector<std::string> FindingRow(const json& f) {
  return {Str(f, "severity"), Str(f, "kind"), Str(Obj(f, "location"), "id"),
          FindingVerdict(f) != kOk ? "active" : "resolved", Str(f, "summary")};
}
const std::vector<std::string> kFindingHeader = {"SEVERITY", "KIND", "LOCATION", "STATE",
                                                 "SUMMARY"};

// The shape of `nodes`, `findings` and `links`: one array document and its verdict, printed as
// the API's array (json) or as a table, or a line saying it is empty (text).
struct ListView {
  std::vector<std::string> header;
  std::function<std::vector<std::string>(const json&)> row;
  std::string empty;
};

int RunList(const Options& o, const std::string& target, int (*verdict)(const json&),
            const ListView& view, std::ostream& out, std::ostream& err) {
  auto rows = Fetch(o, target, err);
  if (!rows) return kUnknown;
  const int rc = verdict(*rows);
  if (o.format == "json") {
    out << rows->dump(2) << "\n";
  } else if (rows->empty()) {
    out << view.empty << "\n";
  } else {
    TextTable t(view.header);
    for (const json& r : *rows) t.Add(view.row(r));
    t.Print(out);
  }
  return rc;
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
  const ListView view{{"NODE", "CONNECTED", "HEALTH", "GPUS", "NICS", "LAST SEEN"},
                      [](const json& n) -> std::vector<std::string> {
                        const json& inv = Obj(n, "inventory");
                        const std::string health = Str(n, "health");
                        return {Str(n, "name"),
                                Connected(n) ? "yes" : "no",
                                health.empty() ? "-" : health,
                                std::to_string(Count(inv, "gpus")),
                                std::to_string(Count(inv, "nics")),
                                Str(n, "last_seen")};
                      },
                      "no agents have connected to this aggregator"};
  return RunList(o, "/api/v1/nodes", NodesVerdict, view, out, err);
}

int RunFindings(const Options& o, bool include_resolved, std::ostream& out, std::ostream& err) {
  const ListView view{kFindingHeader, FindingRow,
                      include_resolved ? "no findings" : "no active findings"};
  return RunList(o, include_resolved ? "/api/v1/findings" : "/api/v1/findings?active=true",
                 FindingsVerdict, view, out, err);
}

int RunLinks(const Options& o, std::ostream& out, std::ostream& err) {
  const ListView view{{"LINK", "STATE", "LOSS", "LAT_INFL", "BW_RATIO", "PROBES", "CONFIDENCE"},
                      [](const json& l) -> std::vector<std::string> {
                        return {Str(l, "id"),
                                Str(l, "state"),
                                Str(l, "loss_ratio"),
                                Str(l, "latency_inflation"),
                                Str(l, "bandwidth_ratio"),
                                Str(l, "probes"),
                                Str(l, "confidence")};
                      },
                      "no links (the aggregator runs without a fabric map, or has no probes yet)"};
  return RunList(o, "/api/v1/links", LinksVerdict, view, out, err);
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
    TextTable t(kFindingHeader);
    for (const json& f : matching) t.Add(FindingRow(f));
    t.Print(out);
  }
  return rc;
}

int RunTopo(const Options& o, const std::string& node, std::ostream& out, std::ostream& err) {
  // ?name= asks for one node with its topology fields; an aggregator that predates the filter
  // answers the whole list, which is searched the same way.
  auto nodes = Fetch(o, "/api/v1/nodes?name=" + UrlEncode(node), err);
  if (!nodes) return kUnknown;
  const json* found = nullptr;
  for (const json& n : *nodes) {
    if (Str(n, "name") == node) found = &n;
  }
  if (!found) {
    auto all = Fetch(o, "/api/v1/nodes", err);
    if (!all) return kUnknown;
    std::string known;
    size_t listed = 0;
    for (const json& n : *all) {
      if (listed++ < 10) known += (known.empty() ? "" : ", ") + Str(n, "name");
    }
    if (listed > 10) known += " and " + std::to_string(listed - 10) + " more";
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
