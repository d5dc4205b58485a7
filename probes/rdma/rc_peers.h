// RC write bandwidth toward the plan's peers for the agent: one RC QP pair per same-rail NIC pair
// (prober NIC, peer NIC) as the planner plans them, connected through the aggregator, bursts
// every interval, results as transport rdma_rc with both NICs (src_nic, dst_nic). Each QP has its
// own reconnect backoff, so a broken rail does not hold up the others.
//
// The exchange (messages carried by the aggregator, RdmaRcConnect on the wire):
//   prober  : creates its QP, sends {to peer, its endpoint, reply=false}
//   peer    : (re)creates its answering QP, connects it to the prober's, sends {reply=true}
//   prober  : connects to the answer; bursts start.
// A burst that fails (a completion error puts the QP in ERR, or no completion within the burst's
// timeout) gives no result (RC retransmits: it says nothing about loss) but tears the prober's
// QP down, counts a reconnect and starts the exchange again after a
// backoff; an answer that never comes is retried the same way. A request from a peer replaces
// that peer's earlier answering QP, so both ends always start over together.
//
// Threading: one thread (the RDMA runner's) calls everything except stats(), which any thread
// may read.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/cpu_busy.h"
#include "common/cpu_pressure.h"
#include "common/status.h"
#include "probes/net/token_bucket.h"
#include "probes/rdma/rc_write_bw.h"
#include "probes/rdma/ud_mesh.h"

namespace fw::rdma {

struct RcPeerPlan {
  std::string peer;          // node name
  std::string local_device;  // our NIC ("" = the first port of the peer's link layer)
  std::string remote_device;
  // Non-zero: one burst now for this round (a qualification's; once per value, whatever the
  // interval), reported with seq = round. A burst that fails gives no result, as any other.
  uint64_t round = 0;
};

// One connection message: outbound `peer` is the node it is for, inbound the node it came from.
// `endpoint.device` is the sender's NIC; `peer_device` the receiver's NIC the QP is for ("" from
// an older agent: the receiver's first port of the link layer).
struct RcConnectMsg {
  std::string peer;
  RcEndpoint endpoint;
  bool reply = false;
  std::string peer_device;
};

struct RcPeersOptions {
  RcWriteOptions write;
  double interval_s = 30;        // between bursts toward one peer
  double connect_timeout_s = 5;  // an answer later than this is given up
  double backoff_base_s = 1;     // before the exchange starts again after a failure
  double backoff_max_s = 60;
  size_t max_answering = 256;  // answering QPs held for peers at most
  uint64_t seed = 1;
};

struct RcPeersStats {
  std::atomic<uint64_t> bursts{0}, burst_failures{0}, qp_errors{0}, reconnects{0};
  std::atomic<uint64_t> connects_sent{0}, answers_sent{0}, connect_timeouts{0};
  std::atomic<uint64_t> refused{0};  // a message that could not be used (logged)
  std::atomic<uint64_t> budget_refused{0};
  std::atomic<uint64_t> setup_failures{0};  // QP or MR creation failed (e.g. memlock)
};

// Where the QPs live: the mesh's open device for a name (or, with "", the first port of a link
// layer). False when there is none now.
struct RcDeviceRef {
  Context* ctx = nullptr;
  Pd* pd = nullptr;
  uint8_t port = 1;
  int gid_index = 0;
};
using RcDeviceLookup =
    std::function<bool(const std::string& device, LinkLayer want, RcDeviceRef& out)>;

// The flow id of a rail's rdma_rc results: a hash of (our NIC, its NIC) in 16 bits, so that the
// aggregator keeps each rail's bursts of a node pair as a flow of their own.
uint32_t RailFlowId(std::string_view local_device, std::string_view remote_device);

class RcPeers {
 public:
  using SendFn = std::function<void(const RcConnectMsg&)>;
  RcPeers(const Clock& clock, RcPeersOptions opts, RcDeviceLookup lookup, SendFn send,
          ResultSink* sink, net::ProbeBudget* budget = nullptr);
  ~RcPeers();

  // Peers to burst toward; 0 bytes or interval keeps the options'. Sessions of peers no longer
  // planned are closed.
  void SetPlan(std::vector<RcPeerPlan> peers, double interval_s, uint64_t bytes);
  void OnMessage(const RcConnectMsg& m);
  // Does what is due (at most one burst, which blocks for its length: milliseconds). Returns
  // nanoseconds until something is due again.
  int64_t Step();
  // The devices closed or reopened: every QP goes; the exchange starts again.
  void DropAll();
  // `device` is closing (DEVICE_FATAL): the QPs on it go now, before its context and PD; their
  // sessions start the exchange again (on another port, or once the device is back).
  void DropDevice(const std::string& device);

  const RcPeersStats& stats() const { return stats_; }
  size_t connected() const;

 private:
  struct Session;
  void Restart(Session& s, int64_t now, bool count);
  void StartExchange(Session& s, int64_t now);
  void RunBurst(Session& s, int64_t now);
  // The registered buffer every QP of `ref`'s PD shares (RcBuffer), made when none is alive.
  StatusOr<std::shared_ptr<RcBuffer>> BufferFor(const RcDeviceRef& ref);

  const Clock& clock_;
  RcPeersOptions opts_;
  RcDeviceLookup lookup_;
  SendFn send_;
  ResultSink* sink_;
  net::ProbeBudget* budget_;
  // (peer, our NIC, its NIC) as planned; "" NICs as the plan gives them.
  using RailKey = std::tuple<std::string, std::string, std::string>;
  std::vector<RcPeerPlan> plan_;
  std::map<RailKey, std::unique_ptr<Session>> probing_;
  // Answering QPs by (peer, its NIC, our NIC) as the request named them.
  std::map<RailKey, std::unique_ptr<RcWriteBw>> answering_;
  // The shared buffer of each PD, held by its QPs only: it goes with the last of them (before
  // the PD, which DropDevice's callers close after dropping the QPs).
  std::map<const Pd*, std::weak_ptr<RcBuffer>> buffers_;
  uint64_t seq_ = 1;
  uint64_t seed_;
  RcPeersStats stats_;
  CpuBusyMeter cpu_;  // the host's CPU over each burst (its buffers are reused)
  CpuPressureMeter pressure_;  // its CPU pressure over each burst
};

}  // namespace fw::rdma
