// The gRPC Aggregator service on the async API: one session per agent stream, and the unary calls.
//
// This is the only aggregator file that includes grpcpp headers (they cost seconds per unit).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/tls/tls_config.h"
#include "daemon/aggregator/ingest/fleet_state.h"
#include "fabricwatch.pb.h"

namespace fw::aggregator {

class IngestJournal;

// What a sink keeps per agent session between its probe batches (IngestSink::OnSessionProbeBatch).
// The session owns it and destroys it with itself.
class SessionProbeState {
 public:
  virtual ~SessionProbeState() = default;
};

// Receives everything agents send besides session bookkeeping (probe results, counters, checks).
// Called on gRPC threads: implementations must not block.
class IngestSink {
 public:
  virtual ~IngestSink() = default;
  virtual void OnProbeBatch(const std::string& node, const fabricwatch::v1::ProbeBatch& batch) = 0;
  // What a session calls for each probe batch: OnProbeBatch with `state`, which the session keeps
  // for the sink across its batches (null before the first), so that a sink may keep there what
  // it would otherwise look up by `node` on every batch. Called under the session's lock, so
  // never concurrently for one `state`. The default ignores it.
  virtual void OnSessionProbeBatch(const std::string& node,
                                   const fabricwatch::v1::ProbeBatch& batch,
                                   std::unique_ptr<SessionProbeState>& state) {
    (void)state;
    OnProbeBatch(node, batch);
  }
  virtual void OnCounterBatch(const std::string& node,
                              const fabricwatch::v1::CounterBatch& batch) = 0;
  virtual void OnCheckReport(const std::string& node,
                             const fabricwatch::v1::CheckReport& report) = 0;
  // Collective probes (docs/collectives.md): a rendezvous request and a member's result. Called
  // after the session's lock is released, so an implementation may send to any node's stream,
  // the caller's included (GrpcServer::Send). The defaults drop them.
  virtual void OnKvRequest(const std::string& node, const fabricwatch::v1::KvRequest& request) {
    (void)node;
    (void)request;
  }
  virtual void OnCollectiveResult(const std::string& node,
                                  const fabricwatch::v1::CollectiveResult& result) {
    (void)node;
    (void)result;
  }
  // RC write bandwidth's connection data (docs/rdma.md): `node` sends it for request.peer. Called
  // after the session's lock is released (GrpcServer::Send may be used). The default drops it.
  virtual void OnRdmaRcConnect(const std::string& node,
                               const fabricwatch::v1::RdmaRcConnect& request) {
    (void)node;
    (void)request;
  }
  // Path traces of the node's flows (docs/analysis.md, "Resolving paths"). The default drops them.
  virtual void OnPathTraces(const std::string& node,
                            const fabricwatch::v1::PathTraceReport& report) {
    (void)node;
    (void)report;
  }
  // `node`'s agent said Hello and was admitted (a new session, or a stream that reconnected).
  // Called under the session's lock, before PlanFor: must not block. The default ignores it.
  virtual void OnSessionStart(const std::string& node) { (void)node; }
  // The plan to send to `node` when it connects or when plans change; nullopt for none.
  virtual std::optional<fabricwatch::v1::ProbePlan> PlanFor(const std::string& node) = 0;
  // The Qualify RPC: starts a qualification and calls `done` once, on any thread, with its
  // report or the reason it was refused. Must not block. The default refuses (UNIMPLEMENTED).
  virtual void Qualify(const fabricwatch::v1::QualifyRequest& request,
                       std::function<void(Status, const fabricwatch::v1::QualifyReport&)> done) {
    (void)request;
    done(Status::Unimplemented("qualification is not implemented in this aggregator"), {});
  }
};

class GrpcServer {
 public:
  struct Options {
    std::string listen = "0.0.0.0:9750";
    // mTLS (client certificates required, verified, and naming the node each Hello claims);
    // nullopt serves plaintext (--insecure) and takes every claim as is.
    std::optional<tls::TlsMaterial> tls;
    int max_message_bytes = 16 << 20;
    // Findings kept of one CheckReport; the rest are dropped and counted (docs/durability.md).
    int max_findings_per_report = 1024;
    // The durable ingest journal (OpenIngestJournal); null acks at once (docs/durability.md).
    std::shared_ptr<IngestJournal> journal;
    // Completion queues, each drained by a thread of its own (CompletionQueuesFor).
    int completion_queues = 4;
  };
  // Completion queues for a fleet of `nodes` (0: unknown). Two costs pull apart
  // (docs/performance.md, "Cut: one completion queue for a fleet of up to 5,000"): Debian's
  // libgrpc scans every operation outstanding on a queue at each of its completions (about 0.5 ns
  // each, so the scan grows with the streams per queue), and with several queues the thread that
  // polls hands most completions to another queue's thread (a futex wake and a context switch
  // each). One queue has no hand-overs and was the cheaper at 4,000 streams; at 16,000 its scan
  // made it fall behind, and four kept up. So one queue up to kOneQueueNodes, else (or unknown)
  // kMaxCompletionQueues.
  static constexpr size_t kOneQueueNodes = 5000;
  static constexpr int kMaxCompletionQueues = 4;
  static int CompletionQueuesFor(size_t nodes);
  // Starts serving. `fleet` and `sink` must outlive the server.
  static StatusOr<std::unique_ptr<GrpcServer>> Start(const Options& options, FleetState& fleet,
                                                     IngestSink& sink, metrics::Registry& registry);
  virtual ~GrpcServer() = default;
  virtual int port() const = 0;
  // Sends the current plan to every connected agent whose node `wanted` accepts (a re-plan passes
  // the nodes whose plan changed). Thread-safe, non-blocking; `wanted` runs on the caller's thread.
  virtual void PushPlans(const std::function<bool(const std::string& node)>& wanted) = 0;
  // Queues each message on its node's open stream, in order; a node without one misses it.
  // Thread-safe, non-blocking.
  virtual void Send(
      std::vector<std::pair<std::string, fabricwatch::v1::AggregatorMessage>> messages) = 0;
  // Graceful stop: every session acknowledges what it has stored, then ends with UNAVAILABLE so the
  // agents reconnect elsewhere; waits up to `grace_s` for that before cancelling what is left.
  virtual void Shutdown(double grace_s) = 0;
};

}  // namespace fw::aggregator
