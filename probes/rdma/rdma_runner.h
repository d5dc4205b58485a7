// Runs the UD latency mesh on its own thread for the agent: waits on the completion channels and
// async events (never spins), applies new targets handed over from any thread, and hands results
// over in batches. On a host without RDMA it starts nothing and says why ("rdma: unavailable").
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "probes/net/token_bucket.h"
#include "probes/rdma/rc_peers.h"
#include "probes/rdma/ud_mesh.h"
#include "probes/rdma/verbs.h"

namespace fw::rdma {

struct RdmaRunnerOptions {
  UdMeshOptions mesh;
  double batch_interval_s = 1.0;  // results are handed over at least this often...
  size_t max_batch = 4096;        // ... or when this many wait; more are dropped and counted
  RcPeersOptions rc;              // RC write bursts (SetRcPlan)
};

struct RdmaState {
  bool available = false;
  std::string detail;  // why not ("ibv_get_device_list: ... (errno 38)"), or the ports in use
  std::vector<UdEndpoint> endpoints;
  std::vector<TsSource> sources;
  uint64_t endpoints_version = 0;
};

class RdmaRunner {
 public:
  using BatchSink = std::function<void(std::vector<RdmaProbeResult>&&)>;
  // `rc_send` carries RC connection messages to the aggregator (called on the runner's thread);
  // without it no RC bursts run.
  RdmaRunner(std::unique_ptr<Verbs> verbs, const Clock& clock, RdmaRunnerOptions options,
             BatchSink sink, net::ProbeBudget* budget = nullptr, RcPeers::SendFn rc_send = nullptr);
  ~RdmaRunner();

  // Sets up the mesh and starts the thread. On a host without RDMA (or without a usable port)
  // returns the reason and leaves state().available false; the agent goes on without RDMA.
  Status Start();
  void Stop();
  // Thread-safe: the mesh thread applies the latest targets on its next pass.
  void SetTargets(std::vector<UdTarget> targets);
  // Thread-safe: RC bandwidth peers (rc_peers.h), and a connection message from the aggregator.
  void SetRcPlan(std::vector<RcPeerPlan> peers, double interval_s, uint64_t bytes);
  void OnRcMessage(RcConnectMsg m);
  // Null when not available or without rc_send.
  const RcPeersStats* rc_stats() const { return rc_ ? &rc_->stats() : nullptr; }
  RdmaState state() const;
  // Null when not available.
  const UdMeshStats* stats() const { return mesh_ ? &mesh_->stats() : nullptr; }
  uint64_t results_dropped() const { return dropped_.load(); }
  // The mesh thread, for CPU accounting (fw_rdmaprobe cpu): its kernel thread id (0 before it
  // runs), its CPU time so far (-1 when not running), and how often it has woken.
  int tid() const { return tid_.load(); }
  int64_t thread_cpu_ns() const;
  uint64_t wakeups() const { return wakeups_.load(); }

 private:
  class Sink;
  void Loop();
  void Wake();
  struct RcPlan {
    std::vector<RcPeerPlan> peers;
    double interval_s = 0;
    uint64_t bytes = 0;
  };

  std::unique_ptr<Verbs> verbs_;
  const Clock& clock_;
  RdmaRunnerOptions options_;
  BatchSink sink_;
  net::ProbeBudget* budget_;
  std::unique_ptr<Sink> collector_;
  std::unique_ptr<UdMesh> mesh_;
  RcPeers::SendFn rc_send_;
  std::unique_ptr<RcPeers> rc_;
  int stop_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<int> tid_{0};
  std::atomic<uint64_t> wakeups_{0};
  mutable Mutex mu_;
  std::optional<std::vector<UdTarget>> next_targets_ FW_GUARDED_BY(mu_);
  std::optional<RcPlan> next_rc_plan_ FW_GUARDED_BY(mu_);
  std::vector<RcConnectMsg> rc_inbox_ FW_GUARDED_BY(mu_);
  RdmaState state_ FW_GUARDED_BY(mu_);
};

}  // namespace fw::rdma
