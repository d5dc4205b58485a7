// The agent's path tracer: traces planned UDP flows hop by hop on the UDP prober's thread, as a
// guest of its epoll loop (UdpProber::AddGuest; see path_trace.h for the wire choices). It needs
// no thread of its own: it sleeps to its hop deadlines, and its two sockets are read and written
// without blocking.
//
// Sockets, and why raw ones: the trace must leave from the flow's own source port, which the UDP
// prober holds (bound without SO_REUSEPORT, so no second UDP socket can bind it, and the prober's
// socket is its hot path: per-packet TTLs and ICMP errors on it would put EHOSTUNREACH into its
// receive loop). So probes go out through a raw IPPROTO_UDP socket (the kernel adds the IP header
// and the TTL set per hop; a drop-all socket filter keeps the host's incoming UDP off it), and
// the switches' time-exceeded answers are read from a raw IPPROTO_ICMP socket filtered to types
// 11 and 3 (ICMP_FILTER). Both need CAP_NET_RAW; without it Start fails and the agent runs
// without tracing (logged).
//
// Per trace: ttl 1, 2, ... one at a time; the next hop goes out on an answer or after
// hop_timeout; two silent hops in a row end the trace (the peer's responder does not answer a
// trace probe, and a silent switch is one silent hop).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "probes/net/path_trace.h"
#include "probes/net/udp_prober.h"

namespace fw::net {

struct PathTracerOptions {
  double budget_fraction = 0.02;  // trace packets per probe packet
  uint8_t max_ttl = 8;
  int64_t hop_timeout_ns = 300'000'000;
  size_t max_concurrent = 8;    // traces in flight
  std::string bind_address_v4;  // empty: the kernel picks the source address by route
  // Non-empty: both sockets are bound to this interface (SO_BINDTODEVICE), so traces leave
  // through the NIC whose flows they trace, and only that NIC's answers are read.
  std::string bind_device;
};

struct PathTracerStats {
  uint64_t traces_started = 0;
  uint64_t traces_done = 0;
  uint64_t packets_sent = 0;
  uint64_t send_errors = 0;
  uint64_t answers = 0;            // answers matched to a trace in flight
  uint64_t answers_unmatched = 0;  // well-formed, but for no trace in flight (late, other tools)
  uint64_t budget_deferred = 0;
  uint64_t budget_wakes = 0;  // AddProbePackets woke the loop: budget for a waiting trace came
  uint64_t dropped_traces = 0;                      // finished traces not collected (queue full)
  std::array<uint64_t, kTraceDropCount> dropped{};  // ICMP datagrams refused, by TraceDrop
};

class PathTracer {
 public:
  // Opens the sockets and runs the tracer on `host`'s thread. `host` must outlive the tracer or
  // have been stopped before it is destroyed.
  static StatusOr<std::unique_ptr<PathTracer>> Start(PathTracerOptions options, UdpProber& host);
  ~PathTracer();  // Stop()s.
  PathTracer(const PathTracer&) = delete;
  PathTracer& operator=(const PathTracer&) = delete;

  // Thread-safe. The planned UDP flows (IPv4 peers only; others are ignored).
  void SetFlows(std::vector<TraceFlow> flows);
  // A flow's results changed; `suspect`: they turned bad.
  void Changed(const TraceFlow& flow, bool suspect);
  // Probe packets the prober sent (earns trace budget). Wakes the host's loop only once the budget
  // added since its last wakeup lets a queued trace start; otherwise the budget is taken at the
  // loop's next wakeup.
  void AddProbePackets(uint64_t n);
  // Finished traces since the last call (at most 4,096 are kept).
  std::vector<TracedPath> TakeTraces();
  PathTracerStats Stats() const;
  // Leaves the host's loop (no call reaches the tracer afterwards). Idempotent.
  void Stop();

 private:
  class Loop;
  PathTracer() = default;
  std::unique_ptr<Loop> loop_;
  UdpProber* host_ = nullptr;  // null once stopped
};

}  // namespace fw::net
