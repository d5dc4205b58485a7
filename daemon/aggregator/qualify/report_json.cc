// JSON request parsing and report rendering for qualification.
#include "daemon/aggregator/qualify/report_json.h"

#include <cmath>

namespace fw::qualify {

using nlohmann::json;

StatusOr<QualifyJobRequest> ParseQualifyRequest(std::string_view body) {
  if (body.size() > (1u << 20)) return Status::InvalidArgument("request body over 1 MiB");
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::InvalidArgument("the body must be a JSON object");
  QualifyJobRequest r;
  auto nodes = j.find("nodes");
  if (nodes == j.end() || !nodes->is_array()) {
    return Status::InvalidArgument("\"nodes\" must be an array of node names");
  }
  for (const json& n : *nodes) {
    if (!n.is_string()) return Status::InvalidArgument("\"nodes\" holds a non-string");
    r.nodes.push_back(n.get<std::string>());
  }
  for (auto [key, field] :
       {std::pair{"profile", &r.profile}, std::pair{"suite", &r.suite}, std::pair{"job", &r.job}}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_string())
      return Status::InvalidArgument(std::string("\"") + key + "\" must be a string");
    *field = it->get<std::string>();
  }
  auto t = j.find("timeout_s");
  if (t != j.end() && !t->is_null()) {
    if (!t->is_number()) return Status::InvalidArgument("\"timeout_s\" must be a number");
    r.timeout_s = t->get<double>();
  }
  return r;
}

json ReportToJson(const QualifyReport& r) {
  const auto when = [](int64_t ns) { return ns > 0 ? FormatRfc3339(ns) : std::string(); };
  const auto round3 = [](double v) { return std::round(v * 1000) / 1000; };
  json nodes = json::array(), pairs = json::array(), steps = json::array();
  for (const NodeResult& n : r.nodes) {
    nodes.push_back(
        {{"node", n.node}, {"verdict", VerdictName(n.verdict)}, {"reasons", n.reasons}});
  }
  for (const PairResult& p : r.pairs) {
    pairs.push_back({{"src", p.src},
                     {"dst", p.dst},
                     {"verdict", VerdictName(p.verdict)},
                     {"reasons", p.reasons}});
  }
  for (const StepResult& s : r.steps) {
    steps.push_back({{"name", s.name},
                     {"state", s.state},
                     {"duration_s", round3(s.duration_s)},
                     {"note", s.note}});
  }
  json classes = json::object();
  for (const auto& [c, m] : r.path_classes) {
    classes[c] = {{"rtt_p99_s", m.rtt_p99_s}, {"pairs", m.pairs}};
  }
  return {{"id", r.id},
          {"job", r.job},
          {"suite", r.suite},
          {"profile", r.profile},
          {"state", r.state},
          {"note", r.note},
          {"requested", when(r.requested_wall_ns)},
          {"started", when(r.started_wall_ns)},
          {"finished", when(r.finished_wall_ns)},
          {"queued_s", round3(r.queued_s)},
          {"duration_s", round3(r.duration_s)},
          {"nodes", nodes},
          {"pairs", pairs},
          {"steps", steps},
          {"path_classes", classes},
          {"exit_code", r.exit_code}};
}

}  // namespace fw::qualify
