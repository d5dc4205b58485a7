// Thousands of simulated agent sessions: one real Connect stream each, multiplexed over a channel
// pool with gRPC's callback client API. This header keeps grpcpp out of its includers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/tls/tls_config.h"
#include "fabricwatch.pb.h"

namespace fw::sim {

struct PoolStats {
  uint64_t streams = 0;          // streams started
  uint64_t ready = 0;            // streams whose Hello was acknowledged
  uint64_t failed = 0;           // streams that ended before Shutdown()
  uint64_t batches_sent = 0;     // writes completed
  uint64_t heartbeats_sent = 0;  // writes completed
  uint64_t results_sent = 0;     // results in completed batch writes
  uint64_t results_acked = 0;    // results in batches the aggregator acknowledged
  uint64_t acks_received = 0;
  uint64_t plans_received = 0;
  uint64_t planned = 0;  // streams that received at least one ProbePlan
  uint64_t trace_reports_sent = 0;  // PathTraceReport writes completed
  // Batches not sent because the previous write was still in flight or the window of
  // unacknowledged batches was full: the aggregator (or the simulator) could not keep up.
  uint64_t skipped = 0;
};

class AgentPool {
 public:
  struct Options {
    std::string target;  // host:port of the aggregator's gRPC listener
    // HTTP/2 limits concurrent streams per connection; each channel gets distinct args so that it
    // has its own subchannel and TCP connection.
    int agents_per_channel = 100;
    // Application-level flow control: a stream writes no new batch while this many are
    // unacknowledged. A completed write only means gRPC buffered it, so without this window an
    // aggregator that falls behind would let megabytes pile up in both processes' buffers.
    int max_unacked_batches = 4;
    // Each stream sends one CounterBatch right after its Hello, with this many ACTIVE ports
    // (devices mlx5_0.., port 1), so the aggregator holds per-port series as for real agents.
    int ports_per_agent = 0;
    // mTLS client material (the aggregator checks every Hello.node against its names); nullopt:
    // plaintext.
    std::optional<tls::TlsMaterial> tls;
    // Called on a gRPC thread with each ProbePlan agent `agent` receives (escalation overlays raise
    // rates and carry trace requests). Must be quick and thread-safe; null: plans are only counted.
    std::function<void(int agent, const fabricwatch::v1::ProbePlan& plan)> on_plan;
  };
  // Fills a batch in place. The batch keeps the previous call's contents (results included), so a
  // filler that only rewrites the fields that change allocates nothing in steady state.
  using FillFn = std::function<void(fabricwatch::v1::ProbeBatch& batch)>;

  static std::unique_ptr<AgentPool> Create(Options options,
                                           std::vector<fabricwatch::v1::Hello> hellos);
  virtual ~AgentPool() = default;

  // Opens every stream and writes its Hello.
  virtual void StartAll() = 0;
  // Waits until every stream is acknowledged or has failed, at most `timeout_s`; returns `ready`.
  virtual uint64_t WaitReady(double timeout_s) = 0;
  // Fills and writes agent `i`'s next batch (its seq is set here). Returns false, without calling
  // `fill`, while the previous batch write is in flight or the stream is not ready or gone.
  // Thread-safe; call it from at most one thread per agent at a time.
  virtual bool SendBatch(int i, const FillFn& fill) = 0;
  virtual bool SendHeartbeat(int i, int64_t sent_unix_ns) = 0;
  // Writes a PathTraceReport for agent `i`. Returns false, sending nothing, while its previous
  // report is still in flight or the stream is not ready or gone (the caller tries again later).
  virtual bool SendTraces(int i, const fabricwatch::v1::PathTraceReport& report) = 0;
  // Closed loop (ingest benchmark): every ready stream writes heartbeats and empty batches
  // back-to-back, each write starting when the previous one completes, until StopClosedLoop().
  virtual void StartClosedLoop() = 0;
  virtual void StopClosedLoop() = 0;
  virtual PoolStats Stats() const = 0;
  // Half-closes every stream and waits for the aggregator to finish them, at most `timeout_s`
  // before cancelling the rest. Every reactor is done when this returns.
  virtual void Shutdown(double timeout_s) = 0;
};

}  // namespace fw::sim
