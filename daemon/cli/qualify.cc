// The qualify verb: request, verdict and rendering of a qualification report.
#include "daemon/cli/qualify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <unordered_set>

#include "daemon/cli/api_client.h"
#include "daemon/cli/hostlist.h"
#include "daemon/cli/text_table.h"

namespace fw::cli {
namespace {

using nlohmann::json;

// Seconds the CLI waits beyond the suite's timeout for the report to arrive (queueing behind an
// overlapping qualification counts against the suite's timeout on the aggregator).
constexpr double kReplyMargin_s = 5;

int VerdictCode(const json& row) {
  if (!row.is_object() || !row.contains("verdict") || !row["verdict"].is_string()) return 3;
  const std::string v = row["verdict"].get<std::string>();
  if (v == "pass") return 0;
  if (v == "warn") return 1;
  if (v == "fail") return 2;
  return 3;
}

std::string Text(const json& j, const char* key, const std::string& fallback = "-") {
  if (!j.is_object() || !j.contains(key)) return fallback;
  const json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", v.get<double>());
    return buf;
  }
  return fallback;
}

std::vector<std::string> Reasons(const json& row) {
  std::vector<std::string> out;
  if (row.is_object() && row.contains("reasons") && row["reasons"].is_array()) {
    for (const json& r : row["reasons"]) {
      if (r.is_string()) out.push_back(r.get<std::string>());
    }
  }
  return out;
}

const json& Array(const json& j, const char* key) {
  static const json kEmpty = json::array();
  if (!j.is_object()) return kEmpty;
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : kEmpty;
}

// One table row per reason, the subject and verdict on the first only.
void AddRows(TextTable& t, std::vector<std::string> lead, const json& row) {
  auto reasons = Reasons(row);
  if (reasons.empty()) reasons.push_back("");
  for (size_t i = 0; i < reasons.size(); ++i) {
    auto cells = i == 0 ? lead : std::vector<std::string>(lead.size(), "");
    cells.push_back(reasons[i]);
    t.Add(std::move(cells));
  }
}

}  // namespace

StatusOr<std::vector<std::string>> ResolveQualifyNodes(const std::string& nodes_flag,
                                                       const std::string& nodes_file,
                                                       size_t max_nodes) {
  HostlistLimits limits;
  limits.max_hosts = max_nodes;
  std::vector<std::string> out;
  if (!nodes_flag.empty()) {
    auto v = ExpandHostlist(nodes_flag, limits);
    if (!v.ok()) return Status(v.status().code(), "--nodes: " + v.status().message());
    out = std::move(*v);
  }
  if (!nodes_file.empty()) {
    std::ifstream in(nodes_file, std::ios::binary);
    if (!in) return Status::NotFound("--nodes-file " + nodes_file + ": cannot be opened");
    std::string text(limits.max_input + 1, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(in.gcount()));
    auto v = ExpandHostlistFile(text, limits);
    if (!v.ok()) {
      return Status(v.status().code(), "--nodes-file " + nodes_file + ": " + v.status().message());
    }
    std::unordered_set<std::string> seen(out.begin(), out.end());
    for (auto& n : *v) {
      if (seen.insert(n).second) out.push_back(std::move(n));
    }
    if (out.size() > max_nodes) {
      return Status::ResourceExhausted("--nodes and --nodes-file name " +
                                       std::to_string(out.size()) + " nodes, more than " +
                                       std::to_string(max_nodes));
    }
  }
  if (out.empty()) return Status::InvalidArgument("give the nodes: --nodes LIST or --nodes-file");
  return out;
}

json QualifyRequestJson(const QualifyArgs& a) {
  json j = {{"nodes", a.nodes}, {"timeout_s", a.timeout_s}, {"suite", a.suite}};
  if (!a.profile.empty()) j["profile"] = a.profile;
  if (!a.job.empty()) j["job"] = a.job;
  return j;
}

int QualifyReportVerdict(const json& report) {
  if (!report.is_object() || Text(report, "state") != "done") return 3;
  const json& nodes = Array(report, "nodes");
  if (nodes.empty()) return 3;
  int worst = 0;
  for (const json& n : nodes) worst = std::max(worst, VerdictCode(n));
  for (const json& p : Array(report, "pairs")) worst = std::max(worst, VerdictCode(p));
  if (report.contains("exit_code") && report["exit_code"].is_number_integer()) {
    worst = std::max(worst, std::clamp(report["exit_code"].get<int>(), 0, 3));
  }
  return worst;
}

int QualifyNodeVerdict(const json& report, const std::string& node) {
  if (!report.is_object() || Text(report, "state") != "done") return 3;
  int code = 3;
  for (const json& n : Array(report, "nodes")) {
    if (Text(n, "node") == node) code = VerdictCode(n);
  }
  if (code == 3) return 3;
  for (const json& p : Array(report, "pairs")) {
    if (Text(p, "src") == node || Text(p, "dst") == node) {
      code = std::max(code, std::min(1, VerdictCode(p)));
    }
  }
  return code;
}

void PrintQualifyReport(const json& report, std::ostream& out) {
  const int code = QualifyReportVerdict(report);
  static const char* kWord[] = {"PASS", "WARN", "FAIL", "UNKNOWN"};
  int counts[4] = {0, 0, 0, 0};
  const json& nodes = Array(report, "nodes");
  for (const json& n : nodes) ++counts[VerdictCode(n)];
  out << "QUALIFY " << kWord[code] << ": " << nodes.size() << " nodes, suite "
      << Text(report, "suite") << ", profile " << Text(report, "profile") << ", "
      << Text(report, "duration_s") << " s (" << counts[2] << " fail, " << counts[1] << " warn, "
      << counts[0] << " pass, " << counts[3] << " unknown)";
  if (Text(report, "state") != "done") {
    out << "; " << Text(report, "state") << ": " << Text(report, "note", "no reason given");
  }
  out << "\n";
  if (!nodes.empty()) {
    TextTable t({"NODE", "VERDICT", "REASONS"});
    for (const json& n : nodes) AddRows(t, {Text(n, "node"), Text(n, "verdict")}, n);
    t.Print(out);
  }
  const json& pairs = Array(report, "pairs");
  if (!pairs.empty()) {
    out << "pairs (not explained by a failed node):\n";
    TextTable t({"PAIR", "VERDICT", "REASONS"});
    for (const json& p : pairs) {
      AddRows(t, {Text(p, "src") + " -> " + Text(p, "dst"), Text(p, "verdict")}, p);
    }
    t.Print(out, "  ");
  }
  const json& steps = Array(report, "steps");
  if (!steps.empty()) {
    out << "steps:\n";
    TextTable t({"STEP", "STATE", "SECONDS", "NOTE"});
    for (const json& s : steps) {
      t.Add({Text(s, "name"), Text(s, "state"), Text(s, "duration_s"), Text(s, "note", "")});
    }
    t.Print(out, "  ");
  }
}

int RunQualify(const Options& o, const QualifyArgs& a, std::ostream& out, std::ostream& err) {
  const int wait_ms = static_cast<int>(std::min(600.0, a.timeout_s + kReplyMargin_s) * 1000);
  auto r = ApiFetch(o, "POST", "/api/v1/qualify", QualifyRequestJson(a).dump(), wait_ms);
  if (!r.ok()) {
    err << "fabricwatch: could not qualify: no report from the aggregator at " << o.api << ": "
        << r.status().message() << "\n";
    return 3;
  }
  json report = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (r->status != 200) {
    std::string why = report.is_object() ? Text(report, "error", r->body) : r->body;
    if (r->status == 404) {
      why += " (is " + o.api + " the aggregator's HTTP port, of a version that qualifies?)";
    } else {
      why += HttpStatusHint(o, r->status);
    }
    err << "fabricwatch: could not qualify: POST /api/v1/qualify answered HTTP " << r->status
        << ": " << why.substr(0, 500) << "\n";
    return 3;
  }
  if (!report.is_object()) {
    err << "fabricwatch: could not qualify: " << ApiUrl(o, "/api/v1/qualify")
        << " did not answer a JSON report\n";
    return 3;
  }
  int code = QualifyReportVerdict(report);
  if (!a.verdict_for.empty()) {
    code = QualifyNodeVerdict(report, a.verdict_for);
    // One line a prolog can log: this node's verdict and its reasons (and its pairs' reasons).
    std::string reasons;
    for (const json& n : Array(report, "nodes")) {
      if (Text(n, "node") != a.verdict_for) continue;
      for (const auto& r : Reasons(n)) reasons += "; " + r;
    }
    for (const json& p : Array(report, "pairs")) {
      if (Text(p, "src") != a.verdict_for && Text(p, "dst") != a.verdict_for) continue;
      for (const auto& r : Reasons(p))
        reasons += "; " + Text(p, "src") + "->" + Text(p, "dst") + ": " + r;
    }
    static const char* kWords[] = {"pass", "warn", "fail", "unknown"};
    err << "fabricwatch: " << a.verdict_for << ": " << kWords[code] << " (exit " << code << ")"
        << reasons << "\n";
  }
  if (o.format == "json") {
    report["exit_code"] = code;
    out << report.dump(2) << "\n";
  } else {
    PrintQualifyReport(report, out);
  }
  return code;
}

}  // namespace fw::cli
