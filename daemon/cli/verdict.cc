// Verdict rules of the CLI verbs (see verdict.h for each rule).
#include "daemon/cli/verdict.h"

#include <algorithm>

namespace fw::cli {
namespace {

using nlohmann::json;

std::string StringAt(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool BoolAt(const json& j, const char* key) {
  if (!j.is_object()) return false;
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

const json& LocationOf(const json& finding) {
  static const json kEmpty = json::object();
  if (!finding.is_object()) return kEmpty;
  auto it = finding.find("location");
  return it != finding.end() && it->is_object() ? *it : kEmpty;
}

}  // namespace

const char* VerdictWord(int verdict) {
  static const char* kWords[] = {"OK", "WARNING", "CRITICAL", "UNKNOWN"};
  return kWords[std::clamp(verdict, 0, 3)];
}

const char* VerdictName(int verdict) {
  static const char* kNames[] = {"ok", "warning", "critical", "unknown"};
  return kNames[std::clamp(verdict, 0, 3)];
}

int FindingVerdict(const json& finding) {
  if (!BoolAt(finding, "active")) return kOk;
  return StringAt(finding, "severity") == "critical" ? kCritical : kWarning;
}

int NodesVerdict(const json& nodes) {
  int rc = kOk;
  for (const json& n : nodes) {
    if (!BoolAt(n, "connected")) rc = std::max<int>(rc, kWarning);
    const std::string health = StringAt(n, "health");
    if (health == "critical") {
      rc = std::max<int>(rc, kCritical);
    } else if (health == "warning" || health == "unknown") {
      rc = std::max<int>(rc, kWarning);
    }
  }
  return rc;
}

int FindingsVerdict(const json& findings) {
  int rc = kOk;
  for (const json& f : findings) rc = std::max(rc, FindingVerdict(f));
  return rc;
}

int LinksVerdict(const json& links) {
  int rc = kOk;
  for (const json& l : links) {
    const std::string state = StringAt(l, "state");
    if (state == "down") {
      rc = std::max<int>(rc, kCritical);
    } else if (state == "degraded" || state == "flapping" || state == "congested") {
      rc = std::max<int>(rc, kWarning);
    }
  }
  return rc;
}

bool PairFindingMatches(const json& finding, const std::string& src, const std::string& dst) {
  const json& loc = LocationOf(finding);
  if (StringAt(loc, "type") != "pair") return false;
  const std::string id = StringAt(loc, "id");
  const size_t tilde = id.find('~');
  if (tilde == std::string::npos) return false;
  const std::string a = id.substr(0, tilde), b = id.substr(tilde + 1);
  auto is = [&](const std::string& want, const std::string& name) {
    return want.empty() || want == name;
  };
  return (is(src, a) && is(dst, b)) || (is(src, b) && is(dst, a));
}

int PairsVerdict(const json& findings, const std::string& src, const std::string& dst) {
  int rc = kOk;
  for (const json& f : findings) {
    if (PairFindingMatches(f, src, dst)) rc = std::max(rc, FindingVerdict(f));
  }
  return rc;
}

int TopoVerdict(const json& node, const json& findings) {
  const std::string name = StringAt(node, "name");
  int rc = BoolAt(node, "connected") ? kOk : kWarning;
  for (const json& f : findings) {
    if (StringAt(LocationOf(f), "node") == name) rc = std::max(rc, FindingVerdict(f));
  }
  return rc;
}

int StatusVerdict(const json& nodes, const json& active_findings) {
  int rc = FindingsVerdict(active_findings);
  for (const json& n : nodes) {
    if (!BoolAt(n, "connected")) rc = std::max<int>(rc, kWarning);
  }
  return rc;
}

}  // namespace fw::cli
