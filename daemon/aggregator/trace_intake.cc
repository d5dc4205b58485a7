// TraceIntake: wire check, record, count.
#include "daemon/aggregator/trace_intake.h"

#include <arpa/inet.h>

#include <optional>

#include "common/log.h"

namespace fw::aggregator {

namespace {

std::optional<uint32_t> ParseV4(const std::string& s) {
  in_addr a{};
  if (inet_pton(AF_INET, s.c_str(), &a) != 1) return std::nullopt;
  return ntohl(a.s_addr);
}

}  // namespace

TraceIntake::TraceIntake(analysis::TracedPaths* traced, const Clock& clock,
                         metrics::Registry& registry, const FabricMap* map)
    : traced_(traced), clock_(clock) {
  if (map) {
    for (const HostNic& h : map->host_nics()) {
      if (std::optional<uint32_t> a = ParseV4(h.address)) node_at_v4_.emplace(*a, h.node);
    }
  }
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
      "Path traces refused at ingest, by reason: transport (not UDP), peer (none, or an echo's "
      "prober at no host address of the map), port, address (not a "
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
  uint64_t unnamed = 0;
  for (const WireTrace& t : w.traces) {
    const std::string* prober = &t.dst_node;
    if (t.dst_node.empty()) {  // an echo whose responder did not know the prober's name
      const std::optional<uint32_t> a = ParseV4(t.dst_address);
      const auto it = a ? node_at_v4_.find(*a) : node_at_v4_.end();
      if (it == node_at_v4_.end()) {
        ++unnamed;
        continue;
      }
      prober = &it->second;
    }
    // An echo's trace is kept under the prober's flow: the peer and its source port. The
    // addresses name the NICs, hence the rail, the flow was on.
    const analysis::TraceOutcome o =
        t.echo ? traced_->RecordEcho(node, *prober, t.dst_port, t.hops, now_ns, t.src_address,
                                     t.dst_address)
               : traced_->Record(node, *prober, t.src_port, t.hops, now_ns, t.src_address,
                                 t.dst_address);
    outcomes_[static_cast<size_t>(o.kind)]->Inc();
  }
  Refuse(static_cast<size_t>(TraceRefusal::kPeer), unnamed, node);
}

}  // namespace fw::aggregator
