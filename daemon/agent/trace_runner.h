// The agent's path tracing (docs/analysis.md, "Resolving paths"): keeps the tracer's flows in step
// with the probe plan, has it trace the plan's trace requests ahead of everything else (each
// request once), re-traces each flow after the plan's refresh period, earns its budget from the
// probe packets sent, and sends the finished traces to the aggregator as PathTraceReports.
// It also traces the echoes this node's responder sends back (PathTrace.echo): the echo of a
// prober's flow hashes its own 5-tuple (responder port -> prober's source port) and may cross
// another spine than the probe, so the analyzer needs both paths to name one link.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "fabricwatch.pb.h"
#include "probes/net/echo_responder.h"
#include "probes/net/path_trace.h"
#include "probes/net/path_tracer.h"

namespace fw::agent {

// What TraceRunner needs of a tracer (net::PathTracer's calls). Abstract so that tests can use a
// fake: the real one needs CAP_NET_RAW and switches that answer TTL expiry. Thread-safe.
class Tracer {
 public:
  virtual ~Tracer() = default;
  // The planned UDP flows; new ones are traced once. The tracer's budget and order apply
  // (path_trace.h, TraceScheduler): suspects, then new flows, then changed ones.
  virtual void SetFlows(std::vector<net::TraceFlow> flows) = 0;
  virtual void Changed(const net::TraceFlow& flow, bool suspect) = 0;
  virtual void AddProbePackets(uint64_t n) = 0;
  virtual std::vector<net::TracedPath> TakeTraces() = 0;
};

// The real tracer behind the seam.
std::unique_ptr<Tracer> WrapPathTracer(std::unique_ptr<net::PathTracer> tracer);

// One finished trace as the wire carries it. `src_address` is the address probes leave from (""
// when the route picks it); `unix_now_ns`/`mono_now_ns` turn the trace's monotonic end time into
// wall time. `echo`: the trace follows this node's echo for the prober t.flow.peer (whose name may
// be "" when this node does not know it; the aggregator then names it by address).
fabricwatch::v1::PathTrace TracedPathToProto(const net::TracedPath& t,
                                             const std::string& src_address, int64_t mono_now_ns,
                                             int64_t unix_now_ns, bool echo = false);

struct TraceRunnerStats {
  uint64_t plans = 0;
  uint64_t requests = 0;          // new trace requests taken from plans
  uint64_t requested_flows = 0;   // flows asked of the tracer for them
  uint64_t requests_dropped = 0;  // past kMaxRequestsPerPlan, or naming no planned flow
  uint64_t refreshes = 0;         // flows asked again after the refresh period
  uint64_t traces_sent = 0;
  uint64_t reports_sent = 0;
  uint64_t echo_flows = 0;          // answered flows whose echoes are traced now
  uint64_t echo_flows_dropped = 0;  // answered flows past kMaxEchoFlows, not traced
  uint64_t echo_requested = 0;      // echo flows asked of the tracer for requests
  uint64_t echo_traces_sent = 0;
};

// Thread-safe: OnPlan() comes from the uplink's thread, Pump() from the agent's report loop.
class TraceRunner {
 public:
  static constexpr size_t kMaxRequestsPerPlan = 1024;
  static constexpr size_t kMaxTracesPerReport = 1024;  // the aggregator takes up to 4,096
  static constexpr size_t kMaxEchoFlows = 4096;
  // An answered flow not seen again for this long is forgotten (probers send each flow at least
  // every few seconds; a flow gone from their plan stops).
  static constexpr int64_t kEchoIdleNs = 30'000'000'000;

  using Send = std::function<void(fabricwatch::v1::AgentMessage)>;
  // `responder_port`: this node's echo responder port, the source port of its echoes; 0 traces no
  // echoes.
  TraceRunner(std::unique_ptr<Tracer> tracer, std::string src_address, Send send,
              uint16_t responder_port = 0);

  // A new plan: its UDP peers, trace requests and refresh period (applied at the next Pump()).
  void OnPlan(const fabricwatch::v1::ProbePlan& plan);
  // Once a second or so: `probe_packets` sent since the last call, `src_ports[j]` the local source
  // port of flow j (UdpProber::SourcePorts; flows are known once the prober has bound them).
  // Updates the tracer's flows, asks for requested and stale flows, sends finished traces.
  void Pump(uint64_t probe_packets, const std::vector<uint16_t>& src_ports, int64_t mono_now_ns,
            int64_t unix_now_ns);
  // The IPv4 flows this node's responder answered since the last call (before each Pump()). New
  // ones get their echo traced once, like new planned flows; they are re-traced after the refresh
  // period and on a plan's trace request naming the prober (escalation asks both ends of a pair).
  // Ignored without a responder port.
  void OnAnswered(const std::vector<net::AnsweredUdpFlow>& flows, int64_t mono_now_ns);
  TraceRunnerStats stats() const;

 private:
  using RequestKey = std::tuple<std::string, uint16_t, uint64_t>;  // peer, src port, id
  struct Peer {
    std::string node;
    uint32_t address = 0;  // IPv4, host order
    uint16_t port = 0;
    uint32_t flows = 0;
  };
  void RebuildFlows(const std::vector<uint16_t>& src_ports, int64_t now_ns) FW_REQUIRES(mu_);
  // An echo's trace: it leaves from the responder port, which no planned flow can bind.
  bool IsEcho(const net::TracedPath& t) const {
    return responder_port_ != 0 && t.flow.src_port == responder_port_;
  }
  // The planned peer's name at `address`, "" when no planned peer has it.
  std::string NameAt(uint32_t address) const FW_REQUIRES(mu_);
  void AskForRequests() FW_REQUIRES(mu_);
  void AskForStale(int64_t now_ns) FW_REQUIRES(mu_);

  std::unique_ptr<Tracer> tracer_;
  const std::string src_address_;
  Send send_;
  const uint16_t responder_port_;
  mutable Mutex mu_;
  std::vector<Peer> peers_ FW_GUARDED_BY(mu_);
  double refresh_s_ FW_GUARDED_BY(mu_) = 0;
  bool plan_changed_ FW_GUARDED_BY(mu_) = false;
  std::vector<uint16_t> ports_ FW_GUARDED_BY(mu_);  // the source ports the flows were built with
  // The planned flows, then the echo flows (src_port == responder_port_).
  std::vector<net::TraceFlow> flows_ FW_GUARDED_BY(mu_);
  // Answered flows (address << 16 | prober port) and when each was last answered.
  std::unordered_map<uint64_t, int64_t> echoes_ FW_GUARDED_BY(mu_);
  bool echoes_changed_ FW_GUARDED_BY(mu_) = false;
  // Per flow (index into flows_): when it was last traced or asked for.
  std::vector<int64_t> last_ns_ FW_GUARDED_BY(mu_);
  std::set<RequestKey> seen_requests_ FW_GUARDED_BY(mu_);  // the last plan's
  std::vector<RequestKey> pending_requests_ FW_GUARDED_BY(mu_);
  TraceRunnerStats stats_ FW_GUARDED_BY(mu_);
};

}  // namespace fw::agent
