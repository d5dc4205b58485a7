// RC write bandwidth in the style of perftest's ib_write_bw: one RC QP connected to a peer's,
// short bursts of RDMA writes into the peer's registered buffer with a fixed number in flight,
// reported as Gb/s. The connection data (QPN, PSN, rkey, address, LID/GID) is exchanged out of
// band (through the aggregator). A QP that fails is reset and reconnected by Reconnect(), which
// the caller paces with a backoff.
//
// Threading: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "probes/net/token_bucket.h"
#include "probes/rdma/verbs.h"

namespace fw::rdma {

struct RcEndpoint {
  std::string device;
  uint8_t port = 1;
  LinkLayer link_layer = LinkLayer::kUnknown;
  uint16_t lid = 0;
  Gid gid;
  int gid_index = 0;
  uint32_t qpn = 0;
  uint32_t psn = 0;  // 24 bits
  uint32_t rkey = 0;
  uint64_t addr = 0;
  uint32_t length = 0;  // bytes of the buffer a peer may write
};

struct RcWriteOptions {
  uint32_t message_bytes = 65536;      // ib_write_bw's default size
  int queue_depth = 16;                // writes in flight (ib_write_bw --tx-depth)
  uint64_t burst_bytes = 64ull << 20;  // one burst
  uint32_t buffer_bytes = 1u << 20;    // registered on each side
  int64_t timeout_ns = 2'000'000'000;  // a burst that takes longer fails
  uint8_t traffic_class = 0;
  uint8_t service_level = 0;
  uint32_t path_mtu_bytes = 4096;  // capped at the port's active MTU
};

struct RcBurstResult {
  uint64_t bytes = 0;
  int64_t elapsed_ns = 0;  // first post to last completion, CLOCK_MONOTONIC
  double gbps = 0;         // bytes * 8 / elapsed
  int writes = 0;
};

struct RcWriteStats {
  uint64_t bursts = 0, bytes = 0, completion_errors = 0, reconnects = 0, budget_refused = 0;
};

// A registered buffer (LOCAL_WRITE | REMOTE_WRITE) that RC QPs of one protection domain may
// share: the source of their writes and the target of their peers'. Its bytes are never read (a
// burst measures the transfer, not the data), so bursts that overlap may write over each other.
// Shared, a node's pinned memory for RC bursts is one buffer per NIC instead of one per QP, and it
// has a QP for each peer that bursts toward it and each peer it bursts toward (docs/rdma.md).
// Must go before its Pd.
class RcBuffer {
 public:
  // ResourceExhausted when the locked-memory limit refuses it.
  static StatusOr<std::shared_ptr<RcBuffer>> Create(Context& ctx, Pd& pd, uint32_t bytes);
  uint8_t* data() { return mem_.data(); }
  size_t size() const { return mem_.size(); }
  const Mr& mr() const { return *mr_; }
  const Pd* pd() const { return pd_; }

 private:
  std::vector<uint8_t> mem_;
  std::unique_ptr<Mr> mr_;
  const Pd* pd_ = nullptr;
};

class RcWriteBw {
 public:
  // Creates the CQ and the RC QP on `port`, and takes it to INIT, with `buffer` as its registered
  // buffer (of `pd`, at least opts.message_bytes long), or a buffer of opts.buffer_bytes of its
  // own when null. `gid_index` is the source GID (RoCE; from ChooseSourceGid). ResourceExhausted
  // when the locked-memory limit refuses the buffer.
  static StatusOr<std::unique_ptr<RcWriteBw>> Create(Context& ctx, Pd& pd, uint8_t port,
                                                     int gid_index, RcWriteOptions opts,
                                                     uint64_t seed = 1,
                                                     std::shared_ptr<RcBuffer> buffer = nullptr);
  ~RcWriteBw();

  // What the peer needs to connect to us and write into our buffer.
  RcEndpoint local() const { return local_; }
  // INIT -> RTR -> RTS towards `remote`. Both sides connect to each other.
  Status Connect(const RcEndpoint& remote);
  // After a failure: RESET, then INIT -> RTR -> RTS again with a new PSN (the peer must learn
  // it: local() changes), towards `remote` when given (the peer may have reconnected too), else
  // towards the last one.
  Status Reconnect(const RcEndpoint* remote = nullptr);
  bool broken() const { return broken_; }

  // One burst. The budget's bytes pay the whole burst up front (ResourceExhausted, nothing sent,
  // when it cannot). A completion error marks the connection broken and returns Unavailable.
  StatusOr<RcBurstResult> RunBurst(const Clock& clock, net::ProbeBudget* budget = nullptr);

  const RcWriteStats& stats() const { return stats_; }

 private:
  RcWriteBw(Context& ctx, Pd& pd, uint8_t port, RcWriteOptions opts)
      : ctx_(ctx), pd_(pd), port_(port), opts_(opts) {}
  Status ToInit();
  // Waits for the CQ's channel (armed by the caller, which polled once more after arming) or,
  // without a channel, sleeps 50 us; Unavailable past the deadline.
  Status WaitForCompletion(int64_t deadline_ns, const Clock& clock);

  Context& ctx_;
  Pd& pd_;
  uint8_t port_;
  RcWriteOptions opts_;
  RcEndpoint local_;
  RcEndpoint remote_;
  bool connected_ = false;
  bool broken_ = false;
  uint32_t next_psn_ = 0;
  std::shared_ptr<RcBuffer> buffer_;
  std::unique_ptr<Cq> cq_;
  std::unique_ptr<Qp> qp_;
  RcWriteStats stats_;
};

}  // namespace fw::rdma
