// TraceIntake: wire check, record, count.
#include "daemon/aggregator/trace_intake.h"

#include "common/log.h"

namespace fw::aggregator {

TraceIntake::TraceIntake(analysis::TracedPaths* traced, const Clock& clock,
                         metrics::Registry& registry)
    : traced_(traced), clock_(clock) {
  auto& outcomes = registry.AddCounter(
      "fabricwatch_path_traces_total",
      "Path traces the agents reported and the analyzer recorded, by what the trace told: "
      "resolved (one equal-cost path of the map matches), ambiguous, no_match (a path the map "
      "does not know), unmapped (the pair has no map path).",
      {"outcome"});
  const char* names[] = {"resolved", "ambiguous", "no_match", "unmapped"};
  for (size_t i = 0; i < outcomes_.size(); ++i) outcomes_[i] = &outcomes.WithLabels({names[i]});
  auto& refused = registry.AddCounter(
      "fabricwatch_path_traces_refused_total",
      "Path traces refused at ingest, by reason: transport (not UDP), peer, port, address (not a "
      "numeric IP), hops (too many, or TTLs out of order), too_many (past 4,096 per report), "
      "no_map (the aggregator has no fabric map).",
      {"reason"});
  for (size_t i = 0; i < kTraceRefusalCount; ++i) {
    refused_[i] =
        &refused.WithLabels({std::string(TraceRefusalName(static_cast<TraceRefusal>(i)))});
  }
  refused_[kNoMap] = &refused.WithLabels({"no_map"});
}

void TraceIntake::Refuse(size_t reason, uint64_t n, const std::string& node) {
  if (n == 0) return;
  metrics::Counter& c = *refused_[reason];
  const uint64_t before = static_cast<uint64_t>(c.Value());
  c.Inc(static_cast<double>(n));
  // Logged at the first refusal of a reason and every 1,000th after: an agent cannot flood the log.
  if (before / 1000 != (before + n) / 1000 || before == 0) {
    spdlog::warn("msg=\"path traces refused\" node={} reason={} traces={} refused_total={}",
                 LogQuote(node),
                 reason == kNoMap ? "no_map" : TraceRefusalName(static_cast<TraceRefusal>(reason)),
                 n, before + n);
  }
}

void TraceIntake::OnReport(const std::string& node,
                           const fabricwatch::v1::PathTraceReport& report) {
  if (!traced_) {
    Refuse(kNoMap, static_cast<uint64_t>(report.traces_size()), node);
    return;
  }
  const WireTraces w = TracesFromWire(report);
  for (size_t i = 0; i < kTraceRefusalCount; ++i) Refuse(i, w.refused[i], node);
  const int64_t now_ns = clock_.MonotonicNanos();
  for (const WireTrace& t : w.traces) {
    // An echo's trace is kept under the prober's flow: the peer and its source port. The
    // addresses name the NICs, hence the rail, the flow was on.
    const analysis::TraceOutcome o = t.echo
                                         ? traced_->RecordEcho(node, t.dst_node, t.dst_port, t.hops,
                                                               now_ns, t.src_address, t.dst_address)
                                         : traced_->Record(node, t.dst_node, t.src_port, t.hops,
                                                           now_ns, t.src_address, t.dst_address);
    outcomes_[static_cast<size_t>(o.kind)]->Inc();
  }
}

}  // namespace fw::aggregator
