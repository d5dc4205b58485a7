// Report assembly and verdicts.
#include "tests/sim/run_report.h"

#include <cstdio>
#include <sstream>

namespace fw::sim {

using nlohmann::json;

namespace {

// The issue 5 targets.
constexpr double kMinPrecision = 0.99;
constexpr double kMinRecall = 0.95;
constexpr double kMinLocalization = 0.95;
constexpr double kMaxMedianTtdS = 10;

json Num(double v) { return v < 0 ? json(nullptr) : json(v); }

}  // namespace

json BuildIngestReport(const ReportInputs& in) {
  json r;
  r["mode"] = in.mode;
  r["name"] = in.name;
  const PoolStats& f = in.final_stats;
  r["streams"] = {{"agents", in.agents},
                  {"ready", f.ready},
                  {"failed", f.failed},
                  {"connect_s", in.connect_s},
                  {"batches_sent", f.batches_sent},
                  {"heartbeats_sent", f.heartbeats_sent},
                  {"results_sent", f.results_sent},
                  {"results_acked", f.results_acked},
                  {"acks_received", f.acks_received},
                  {"plans_received", f.plans_received},
                  {"planned", f.planned},
                  {"skipped_batches", f.skipped}};
  json failures = json::array(), warnings = json::array();
  if (f.ready < static_cast<uint64_t>(in.agents)) {
    failures.push_back(std::to_string(f.ready) + " of " + std::to_string(in.agents) +
                       " streams were acknowledged");
  }
  if (f.failed > 0) failures.push_back(std::to_string(f.failed) + " streams ended early");
  if (f.skipped > 0) {
    warnings.push_back(std::to_string(f.skipped) +
                       " batches skipped: a write was still in flight a second later "
                       "(aggregator or simulator saturated)");
  }
  if (f.planned < f.ready) {
    warnings.push_back(std::to_string(f.ready - f.planned) + " of " + std::to_string(f.ready) +
                       " streams never received a plan (they probe at 1/s a flow)");
  }
  json ingest;
  if (in.window_start && in.window_end) {
    const IngestSnapshot &a = *in.window_start, &b = *in.window_end;
    double dt = b.unix_s - a.unix_s;
    double results = b.results - a.results;
    ingest["window_s"] = dt;
    ingest["results_per_s"] = dt > 0 ? results / dt : 0;
    ingest["batches_per_s"] = dt > 0 ? (b.batches - a.batches) / dt : 0;
    ingest["heartbeats_per_s"] = dt > 0 ? (b.heartbeats - a.heartbeats) / dt : 0;
    ingest["agents_connected"] = b.connected;
    if (b.connected < in.agents) {
      failures.push_back("fabricwatch_agents_connected was " + std::to_string(b.connected) +
                         " while " + std::to_string(in.agents) + " streams were open");
    }
    if (a.proc && b.proc && dt > 0) {
      double cpu = b.proc->cpu_s - a.proc->cpu_s;
      ingest["aggregator_cpu_pct"] = 100 * cpu / dt;
      ingest["aggregator_cpu_s_per_million_results"] = results > 0 ? cpu / (results / 1e6) : 0;
      ingest["aggregator_rss_mb"] = static_cast<double>(b.proc->rss_bytes) / (1 << 20);
      ingest["aggregator_peak_rss_mb"] = static_cast<double>(b.proc->hwm_bytes) / (1 << 20);
    }
    if (in.self_start && in.self_end && dt > 0) {
      ingest["sim_cpu_pct"] = 100 * (in.self_end->cpu_s - in.self_start->cpu_s) / dt;
      ingest["sim_rss_mb"] = static_cast<double>(in.self_end->rss_bytes) / (1 << 20);
    }
  } else {
    failures.push_back("could not read the aggregator's /metrics for the ingest window");
  }
  r["ingest"] = ingest;
  if (in.after) {
    double counted = in.after->results - in.before.results;
    double batches = in.after->batches - in.before.batches;
    r["accounting"] = {{"results_written", f.results_sent},
                       {"results_counted_by_aggregator", counted},
                       {"batches_written", f.batches_sent},
                       {"batches_counted_by_aggregator", batches}};
    // Exact when every stream lived; a stream that died may take written, unacknowledged
    // batches with it, so then the aggregator's count must lie between acknowledged and written.
    bool exact = f.failed == 0;
    bool ok = exact ? counted == static_cast<double>(f.results_sent) &&
                          batches == static_cast<double>(f.batches_sent)
                    : counted >= static_cast<double>(f.results_acked) &&
                          counted <= static_cast<double>(f.results_sent);
    r["accounting"]["exact"] = exact;
    if (!ok) {
      failures.push_back("the aggregator counted " + std::to_string(counted) + " results in " +
                         std::to_string(batches) + " batches; the simulator wrote " +
                         std::to_string(f.results_sent) + " in " + std::to_string(f.batches_sent));
    }
  }
  r["verdict"] = {{"failures", failures}, {"pending", json::array()}, {"warnings", warnings}};
  return r;
}

void AddFindingsReport(const json& poll, const Score& score,
                       const std::vector<ObservedFinding>& findings, bool healthy, json& report) {
  json faults = json::array();
  for (const auto& f : score.faults) {
    faults.push_back({{"fault", f.label},
                      {"detected", f.detected},
                      {"localized", f.localized},
                      {"ttd_s", Num(f.ttd_s)},
                      {"finding", f.finding}});
  }
  json fr = poll;
  fr["count"] = score.findings;
  fr["true_positives"] = score.true_positives;
  fr["false_positives"] = score.false_positives;
  fr["precision"] = Num(score.precision);
  fr["recall"] = Num(score.recall);
  fr["localization"] = Num(score.localization);
  fr["ttd_median_s"] = Num(score.ttd_median_s);
  fr["faults"] = faults;
  fr["false_positive_findings"] = score.false_positive_ids;
  json seen = json::array();
  for (const auto& f : findings) {
    seen.push_back(
        {{"id", f.id},
         {"kind", f.kind},
         {"location", {{"type", f.type}, {"id", f.loc_id}, {"node", f.node}, {"device", f.device}}},
         {"active_at_end", f.active},
         {"first_seen_unix_s", f.first_seen_unix_s},
         {"observed_unix_s", f.observed_unix_s}});
  }
  fr["seen"] = seen;
  report["findings"] = fr;

  json& v = report["verdict"];
  std::vector<std::string> checks;
  if (healthy) {
    checks.push_back("no findings on a healthy fabric");
  } else {
    checks = {"precision >= 0.99", "recall >= 0.95", "localization >= 0.95",
              "median time to detect <= 10 s"};
  }
  if (poll.value("endpoint", "") != "ok") {
    for (const auto& c : checks) {
      v["pending"].push_back(c + " (/api/v1/findings: " + poll.value("endpoint", "?") + ")");
    }
    return;
  }
  char buf[160];
  if (healthy) {
    if (score.findings > 0) {
      std::snprintf(buf, sizeof buf, "%zu findings on a healthy fabric", score.findings);
      v["failures"].push_back(buf);
    }
    return;
  }
  if (score.findings > 0 && score.precision < kMinPrecision) {
    std::snprintf(buf, sizeof buf, "precision %.3f < %.2f", score.precision, kMinPrecision);
    v["failures"].push_back(buf);
  }
  if (score.recall < kMinRecall) {
    std::snprintf(buf, sizeof buf, "recall %.3f < %.2f", score.recall, kMinRecall);
    v["failures"].push_back(buf);
  }
  if (score.localization >= 0 && score.localization < kMinLocalization) {
    std::snprintf(buf, sizeof buf, "localization %.3f < %.2f", score.localization,
                  kMinLocalization);
    v["failures"].push_back(buf);
  }
  if (score.ttd_median_s > kMaxMedianTtdS) {
    std::snprintf(buf, sizeof buf, "median time to detect %.1f s > %.0f s", score.ttd_median_s,
                  kMaxMedianTtdS);
    v["failures"].push_back(buf);
  }
}

std::string FormatReport(const json& r) {
  std::ostringstream o;
  auto num = [](const json& j, const char* k) -> std::string {
    if (!j.contains(k) || j[k].is_null()) return "n/a";
    char b[32];
    std::snprintf(b, sizeof b, "%.3g", j[k].get<double>());
    return b;
  };
  const json& s = r["streams"];
  o << r.value("mode", "") << " " << r.value("name", "") << ": " << s["ready"] << "/" << s["agents"]
    << " streams ready in " << num(s, "connect_s") << " s, " << s["failed"] << " failed, "
    << s["skipped_batches"] << " skipped batches\n";
  const json& in = r["ingest"];
  o << "  ingest: " << num(in, "results_per_s") << " results/s, " << num(in, "batches_per_s")
    << " batches/s, " << num(in, "heartbeats_per_s") << " heartbeats/s; aggregator "
    << num(in, "aggregator_cpu_pct") << "% CPU, " << num(in, "aggregator_cpu_s_per_million_results")
    << " CPU-s per million results, RSS " << num(in, "aggregator_rss_mb") << " MB (peak "
    << num(in, "aggregator_peak_rss_mb") << "); simulator " << num(in, "sim_cpu_pct") << "% CPU\n";
  if (r.contains("heartbeat")) {
    const json& h = r["heartbeat"];
    o << "  heartbeat bench: " << num(h, "sim_messages_per_s") << " msgs/s written, "
      << num(h, "aggregator_messages_per_s") << " msgs/s counted by the aggregator, "
      << num(h, "sim_acks_per_s") << " acks/s\n";
  }
  if (r.contains("findings")) {
    const json& f = r["findings"];
    o << "  findings (" << f.value("endpoint", "?") << "): " << f["count"] << " seen, precision "
      << num(f, "precision") << ", recall " << num(f, "recall") << ", localization "
      << num(f, "localization") << ", median TTD " << num(f, "ttd_median_s") << " s\n";
  }
  const json& v = r["verdict"];
  for (const auto& x : v["failures"]) o << "  FAIL: " << x.get<std::string>() << "\n";
  for (const auto& x : v["pending"]) o << "  PENDING: " << x.get<std::string>() << "\n";
  for (const auto& x : v["warnings"]) o << "  WARN: " << x.get<std::string>() << "\n";
  return o.str();
}

}  // namespace fw::sim
