// Ground truth, finding matching, /proc sampling and metric parsing.
#include "tests/sim/scorer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace fw::sim {

using nlohmann::json;

std::optional<double> ParseRfc3339(std::string_view text) {
  std::string s(text);
  int y, mo, d, h, mi, sec;
  int n = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6 ||
      n != 19) {
    return std::nullopt;
  }
  double frac = 0;
  size_t p = 19;
  if (p < s.size() && s[p] == '.') {
    size_t q = p + 1;
    while (q < s.size() && s[q] >= '0' && s[q] <= '9') ++q;
    if (q == p + 1) return std::nullopt;
    frac = std::strtod(s.substr(p, q - p).c_str(), nullptr);
    p = q;
  }
  int offset_s = 0;
  if (p < s.size() && (s[p] == 'Z' || s[p] == 'z')) {
    ++p;
  } else if (p + 6 == s.size() && (s[p] == '+' || s[p] == '-') && s[p + 3] == ':') {
    int oh = std::atoi(s.substr(p + 1, 2).c_str()), om = std::atoi(s.substr(p + 4, 2).c_str());
    offset_s = (s[p] == '+' ? 1 : -1) * (oh * 3600 + om * 60);
    p += 6;
  } else {
    return std::nullopt;
  }
  if (p != s.size()) return std::nullopt;
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  time_t t = timegm(&tm);
  return static_cast<double>(t) - offset_s + frac;
}

StatusOr<std::vector<ObservedFinding>> ParseFindings(const std::string& body, double now_unix_s,
                                                     int* malformed) {
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::InvalidArgument("findings body is not JSON");
  if (!doc.is_array()) return Status::InvalidArgument("findings body is not a JSON array");
  std::vector<ObservedFinding> out;
  auto str = [](const json& o, const char* k) {
    auto it = o.find(k);
    return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  for (const json& f : doc) {
    if (!f.is_object() || str(f, "id").empty() || str(f, "kind").empty()) {
      ++*malformed;
      continue;
    }
    ObservedFinding o;
    o.id = str(f, "id");
    o.kind = str(f, "kind");
    auto loc = f.find("location");
    if (loc != f.end() && loc->is_object()) {
      o.type = str(*loc, "type");
      o.loc_id = str(*loc, "id");
      o.node = str(*loc, "node");
      o.device = str(*loc, "device");
    }
    auto active = f.find("active");
    o.active = active != f.end() && active->is_boolean() && active->get<bool>();
    o.observed_unix_s = now_unix_s;
    auto fs = ParseRfc3339(str(f, "first_seen"));
    o.first_seen_unix_s = fs ? *fs : now_unix_s;
    out.push_back(std::move(o));
  }
  return out;
}

void FindingsTracker::Update(const std::vector<ObservedFinding>& findings) {
  for (const auto& f : findings) {
    auto [it, inserted] = by_id_.emplace(f.id, f);
    ObservedFinding& seen = it->second;
    if (inserted) {
      seen.kinds = {{f.kind, f.observed_unix_s}};
      continue;
    }
    seen.active = f.active;
    if (f.kind != seen.kind) {
      seen.kind = f.kind;
      seen.kinds.emplace_back(f.kind, f.observed_unix_s);
    }
  }
}

std::vector<ObservedFinding> FindingsTracker::All() const {
  std::vector<ObservedFinding> out;
  for (const auto& [id, f] : by_id_) out.push_back(f);
  return out;
}

std::vector<Truth> GroundTruth(const Scenario& s, const FatTree& tree, double run_start_unix_s,
                               double time_scale) {
  std::vector<Truth> out;
  for (const Fault& f : s.faults) {
    Truth t;
    t.label = std::string(FaultKindName(f.kind)) + " " + f.target;
    t.kinds = f.expect_kinds;
    t.start_unix_s = run_start_unix_s + f.start_s / time_scale;
    t.end_unix_s = run_start_unix_s + f.end_s / time_scale;
    switch (f.kind) {
      case FaultKind::kLinkLoss:
      case FaultKind::kLinkBandwidth:
      case FaultKind::kLinkDown:
      case FaultKind::kLinkFlap:
      case FaultKind::kLinkCongestion: {
        t.type = "link";
        t.id = tree.LinkId(f.link);
        auto [a, b] = tree.LinkSwitches(f.link);
        t.related = {t.id, tree.SwitchName(a)};
        if (b >= 0) t.related.insert(tree.SwitchName(b));
        break;
      }
      case FaultKind::kSwitchCongestion:
        t.type = "switch";
        t.id = tree.SwitchName(f.switch_index);
        t.related.insert(t.id);
        for (int l : tree.LinksOfSwitch(f.switch_index)) t.related.insert(tree.LinkId(l));
        break;
      case FaultKind::kNicDegraded:
        t.type = "nic";
        t.node = tree.NodeName(f.host);
        t.device = f.nic;
        t.id = t.node + ":" + f.nic;
        t.related = {t.id, t.node, tree.LinkId(f.link)};
        t.label += ":" + f.nic;
        break;
      case FaultKind::kHostNoise:
      case FaultKind::kHostCpuBusy:
        t.type = "node";
        t.node = tree.NodeName(f.host);
        t.id = t.node;
        t.related = {t.node};
        for (int r = 0; r < tree.rails(); ++r) {
          t.related.insert(tree.LinkId(tree.AccessLink(f.host, r)));
          t.related.insert(t.node + ":" + tree.NicName(r));
        }
        break;
    }
    out.push_back(std::move(t));
  }
  return out;
}

namespace {

bool Accepted(const Truth& t, const std::string& kind) {
  return std::find(t.kinds.begin(), t.kinds.end(), kind) != t.kinds.end();
}

// When the finding first showed an accepted kind; nullopt when it never did.
std::optional<double> AcceptedAt(const Truth& t, const ObservedFinding& f) {
  if (f.kinds.empty()) {
    return Accepted(t, f.kind) ? std::optional<double>(f.observed_unix_s) : std::nullopt;
  }
  for (const auto& [kind, at] : f.kinds) {
    if (Accepted(t, kind)) return at;
  }
  return std::nullopt;
}

bool IsExactPlace(const Truth& t, const ObservedFinding& f) {
  if (f.type != t.type) return false;
  if (t.type == "nic") return f.loc_id == t.id || (f.node == t.node && f.device == t.device);
  if (t.type == "node") return f.loc_id == t.node || f.node == t.node;
  return f.loc_id == t.id;
}

bool IsExact(const Truth& t, const ObservedFinding& f) {
  return IsExactPlace(t, f) && AcceptedAt(t, f).has_value();
}

bool IsRelated(const Truth& t, const ObservedFinding& f) {
  if (IsExactPlace(t, f) || t.related.count(f.loc_id)) return true;
  // "one of a,b,c": an analyzer that cannot tell candidates apart (unresolved ECMP) lists them.
  if (f.loc_id.find(',') != std::string::npos) {
    std::stringstream ids(f.loc_id);
    for (std::string id; std::getline(ids, id, ',');) {
      if (t.related.count(id)) return true;
    }
  }
  return !t.node.empty() && f.node == t.node;
}

}  // namespace

Score ComputeScore(const std::vector<Truth>& truths, const std::vector<ObservedFinding>& findings,
                   double grace_s) {
  Score s;
  s.findings = findings.size();
  for (const Truth& t : truths) {
    FaultScore fs;
    fs.label = t.label;
    double best_related = -1, best_exact = -1;
    for (const auto& f : findings) {
      double at = f.observed_unix_s;
      if (at < t.start_unix_s - 1 || at > t.end_unix_s + grace_s || !IsRelated(t, f)) continue;
      double ttd = std::max(0.0, at - t.start_unix_s);
      fs.detected = true;
      if (IsExact(t, f) && *AcceptedAt(t, f) <= t.end_unix_s + grace_s) {
        const double exact_ttd = std::max(0.0, *AcceptedAt(t, f) - t.start_unix_s);
        if (best_exact < 0 || exact_ttd < best_exact) {
          best_exact = exact_ttd;
          fs.localized = true;
          fs.finding = f.id;
        }
      }
      if (best_related < 0 || ttd < best_related) {
        best_related = ttd;
        if (!fs.localized) fs.finding = f.id;
      }
    }
    fs.ttd_s = fs.localized ? best_exact : best_related;
    s.faults.push_back(fs);
  }
  for (const auto& f : findings) {
    bool tp = false;
    for (const Truth& t : truths) {
      double at = f.observed_unix_s;
      if (at >= t.start_unix_s - 1 && at <= t.end_unix_s + grace_s && IsRelated(t, f)) tp = true;
    }
    if (tp) {
      ++s.true_positives;
    } else {
      ++s.false_positives;
      s.false_positive_ids.push_back(f.kind + "@" + (f.loc_id.empty() ? f.node : f.loc_id));
    }
  }
  if (s.findings > 0) s.precision = static_cast<double>(s.true_positives) / s.findings;
  size_t detected = 0, localized = 0;
  std::vector<double> ttds;
  for (const auto& f : s.faults) {
    detected += f.detected;
    localized += f.localized;
    if (f.detected) ttds.push_back(f.ttd_s);
  }
  if (!truths.empty()) s.recall = static_cast<double>(detected) / truths.size();
  if (detected > 0) s.localization = static_cast<double>(localized) / detected;
  if (!ttds.empty()) {
    std::sort(ttds.begin(), ttds.end());
    size_t m = ttds.size() / 2;
    s.ttd_median_s = ttds.size() % 2 ? ttds[m] : (ttds[m - 1] + ttds[m]) / 2;
  }
  return s;
}

StatusOr<ProcSample> ReadProc(pid_t pid) {
  std::string base = "/proc/" + std::to_string(pid);
  std::ifstream stat(base + "/stat");
  if (!stat) return Status::NotFound("cannot read " + base + "/stat (process gone?)");
  std::string line;
  std::getline(stat, line);
  // The command name is parenthesized and may hold spaces: fields start after the last ')'.
  size_t close = line.rfind(')');
  if (close == std::string::npos) return Status::InvalidArgument(base + "/stat is malformed");
  std::istringstream fields(line.substr(close + 2));
  std::vector<std::string> v;
  for (std::string x; fields >> x;) v.push_back(x);
  // Fields 14 and 15 (utime, stime) are at 11 and 12 counting from field 3.
  if (v.size() < 13) return Status::InvalidArgument(base + "/stat has too few fields");
  long tick = sysconf(_SC_CLK_TCK);
  if (tick <= 0) return Status::Internal("sysconf(_SC_CLK_TCK) failed");
  ProcSample p;
  p.cpu_s = (std::strtod(v[11].c_str(), nullptr) + std::strtod(v[12].c_str(), nullptr)) / tick;
  std::ifstream status(base + "/status");
  if (!status) return Status::NotFound("cannot read " + base + "/status");
  while (std::getline(status, line)) {
    auto kb = [&](const char* key) -> std::optional<uint64_t> {
      if (line.rfind(key, 0) != 0) return std::nullopt;
      return std::strtoull(line.c_str() + std::strlen(key), nullptr, 10) * 1024;
    };
    if (auto x = kb("VmRSS:")) p.rss_bytes = *x;
    if (auto x = kb("VmHWM:")) p.hwm_bytes = *x;
  }
  return p;
}

std::optional<double> SumMetric(std::string_view text, std::string_view name) {
  std::optional<double> sum;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.size() <= name.size() || line.substr(0, name.size()) != name) continue;
    char next = line[name.size()];
    if (next != ' ' && next != '{') continue;
    // The value follows the last space outside the label set; the label set may contain spaces.
    size_t start = name.size();
    if (next == '{') {
      size_t close = line.rfind('}');
      if (close == std::string_view::npos) continue;
      start = close + 1;
    }
    std::string rest(line.substr(start));
    char* end = nullptr;
    double v = std::strtod(rest.c_str(), &end);
    if (end == rest.c_str()) continue;
    sum = sum.value_or(0) + v;
  }
  return sum;
}

}  // namespace fw::sim
