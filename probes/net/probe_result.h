// The one result record every probe produces (UDP, TCP, and later RDMA and collectives), and the
// bounded queue that hands results to the uplink.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "common/mutex.h"

namespace fw::net {

enum class Transport : uint8_t { kUdp, kTcpConnect, kTcpBw, kRdmaUd, kRdmaRc, kCollective };

// "udp", "tcp_connect", "tcp_bw", "rdma_ud", "rdma_rc", "collective": metric label values.
std::string_view TransportName(Transport t);

// A plain, trivially copyable record: no allocation to make, copy or queue one.
struct ProbeResult {
  static constexpr size_t kPeerNameMax = 63;

  std::array<char, kPeerNameMax + 1> peer{};  // NUL-terminated peer name from the plan
  Transport transport = Transport::kUdp;
  uint16_t src_port = 0;  // the local port of this flow: selects the ECMP path
  uint16_t dst_port = 0;
  uint32_t flow_id = 0;  // index of the flow within its peer, stable across plans
  uint64_t seq = 0;
  bool lost = false;   // no answer within the timeout (rtt_ns is then 0)
  // The echo of a probe this prober had already reported lost on a timeout shorter than the
  // flow's fixed one (UdpProbePlan::timeout_floor_ns), arriving within the fixed one: rtt_ns is
  // its round trip and the aggregator takes back the loss (ProbeColumns.late). lost is false.
  bool late = false;
  // Round trip on the prober's CLOCK_MONOTONIC (see docs/probes.md). udp: the user-space one (send
  // -> reply read), or with deferred reply reads (UdpProberOptions::reply_reads) send -> the
  // kernel's receive stamp; 0 on an answered probe whose round trip is unknown (a deferred read
  // without a receive stamp).
  int64_t rtt_ns = 0;
  // udp: the round trip between the kernel's software stamps (TX, or the user-space send when
  // there is no TX stamp, to RX), which leaves out the prober's own syscalls and scheduling; 0
  // without kernel stamps. rtt_ns is this value when UdpProberOptions::report_kernel_rtt is set.
  int64_t kernel_rtt_ns = 0;
  uint64_t bytes = 0;        // bytes sent by this probe (the whole burst for tcp_bw)
  double goodput_bps = 0;    // tcp_bw only: payload bits per second
  int64_t timestamp_ns = 0;  // wall clock when the probe was sent, for windowing
  // The local and the peer's fabric NIC, as ids the agent's probe scheduler hands out (0: not
  // named); the scheduler turns them into the result's src_nic/dst_nic names.
  uint16_t src_nic = 0;
  uint16_t dst_nic = 0;
  // Bursts (tcp_bw, rdma_rc): the prober host's CPU busy share over the burst, all CPUs and the
  // busiest one, in thousandths (common/cpu_busy.h BusyPermille); 0: not measured.
  uint16_t cpu_busy_permille = 0;
  uint16_t cpu_peak_permille = 0;
  // Bursts: the share of the burst's time (and its lead) during which runnable tasks on the
  // prober's host waited for a CPU (PSI "some", common/cpu_pressure.h), in thousandths; 0: not
  // measured.
  uint16_t cpu_pressure_permille = 0;

  void SetPeer(std::string_view name);
  std::string_view PeerName() const { return std::string_view(peer.data()); }
};

// Bounded multi-producer queue. When full, new results are dropped and counted, so a stalled
// uplink can never grow a prober's memory. Thread-safe.
class ResultQueue {
 public:
  explicit ResultQueue(size_t capacity);

  // Returns false (and counts a drop) when the queue is full.
  bool TryPush(const ProbeResult& r);
  // Called by TryPush with each result the queue took, on the pusher's thread, after the queue's
  // lock is released; must be quick. Set it before any pusher starts.
  void SetPushHook(std::function<void(const ProbeResult&)> hook) { push_hook_ = std::move(hook); }
  // Moves up to `max` results into `out` (appending); returns how many.
  size_t PopBatch(std::vector<ProbeResult>& out, size_t max);
  size_t size() const;
  uint64_t dropped() const;

 private:
  mutable Mutex mu_;
  std::vector<ProbeResult> ring_ FW_GUARDED_BY(mu_);  // fixed size
  size_t head_ FW_GUARDED_BY(mu_) = 0;
  size_t count_ FW_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ FW_GUARDED_BY(mu_) = 0;
  std::function<void(const ProbeResult&)> push_hook_;
};

}  // namespace fw::net
