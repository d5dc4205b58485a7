// The UD latency mesh: one UD QP set per active fabric port, probing the plan's RDMA targets and
// answering peers' probes, with the six-timestamp exchange (R-Pingmesh, SIGCOMM 2024):
//   prober  T1 post (software)          T2 probe sent (NIC)
//   responder                           T3 probe received (NIC) -> ack posted at once
//                                       T4 ack sent (NIC) -> report(T4 - T3) posted
//   prober  T5 ack received (NIC)       T6 ack polled (software)
// network RTT = (T5 - T2) - (T4 - T3); prober host delay = (T6 - T1) - (T5 - T2); responder
// host delay = T4 - T3. Each difference stays within one clock. Timestamps come from the best
// source the port offers (NIC wall clock, raw NIC ticks / hca_core_clock, CLOCK_MONOTONIC) and
// every result says which.
//
// Threading: one thread owns a UdMesh and calls Step(); stats() may be read from any thread.
#pragma once

#include <poll.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/status.h"
#include "probes/net/probe_result.h"
#include "probes/net/token_bucket.h"
#include "probes/rdma/rtt_split.h"
#include "probes/rdma/ud_port.h"
#include "probes/rdma/verbs.h"

namespace fw::rdma {

struct UdTarget {
  std::string peer;          // node name, copied into results
  std::string local_device;  // which of our ports probes it ("" = the first of its link layer)
  uint8_t local_port = 0;    // 0 = any port of local_device
  UdEndpoint remote;         // from the peer's Hello, via the plan
  std::string peer_device;   // the peer's NIC as the plan names it, copied into results
  int flows = 1;             // flow labels (RoCE) or source QPs, for ECMP coverage
  double rate_hz = 1;        // probes per second per flow
};

// Send windows (UdMeshOptions::send_window_ns): the most probes one flow posts back to back at a
// window's start.
inline constexpr int kMaxSendsPerWindow = 4;

struct UdMeshOptions {
  std::vector<std::string> devices;  // empty: every device
  UdPortOptions port;
  uint8_t traffic_class = 0;     // RoCE: DSCP << 2 | ECN
  uint8_t service_level = 0;     // IB
  uint32_t flow_label_base = 1;  // flow j uses flow_label_base + j (20 bits, never 0)
  int64_t timeout_ns = 1'000'000'000;
  double max_rate_hz = 1000;  // per flow, whatever the plan says
  double recovery_backoff_base_s = 0.1;
  double recovery_backoff_max_s = 30;
  uint64_t seed = 1;
  // How often CQs without a completion channel (the fake's) are polled. The wait shows in the
  // prober's host delay: the agent's fake mode polls every 100 us so that a healthy fake fleet's
  // host delays stay far below the analyzer's 1 ms floor.
  int64_t unchanneled_poll_ns = 1'000'000;
  // How long a responder may hold a turnaround report before it sends it on its own. A report
  // goes with the next ack to the same prober when there is one within the hold (posted right
  // after that ack, so the prober's wakeup for the ack reads it too) and costs no wakeup of the
  // prober's own. The turnaround is fixed when the ack's send completes, so the hold delays the
  // result, never its value. At most a quarter of timeout_ns: the prober waits for a report until
  // its probe's timeout. With send windows it lasts at least until a quarter window past the
  // next window start (the probers' next probes come just after one), at most half the timeout.
  // 0: each report goes at the first wakeup after its ack's send stamp.
  int64_t report_hold_ns = 250'000'000;
  // Send phases: probes go out only at the starts of windows of this length on a grid aligned
  // to the wall clock (so every agent of an NTP-synced fleet sends at the same instants), and
  // each such wakeup sends every probe due before its window ends, early by less than a window:
  // a flow whose period is shorter than the window sends each of its probes due in the window,
  // back to back (the schedule stays anchored, so its rate holds). The window is at most
  // kMaxSendsPerWindow periods of the fastest flow, which bounds those bursts, and flows slower
  // than the window are spread over the windows of their period. Peers' probes then arrive
  // together and are answered in one wakeup, and their acks come back together, so the sends
  // cost four wakeups a second at 250 ms, whatever the targets and rates, instead of one per
  // target phase. Timestamps are taken as before (the prober's T1 when each probe is posted), so
  // the split is unchanged. 0: each target has its own phase and a wakeup sends what is due
  // within a quarter of its period.
  int64_t send_window_ns = 250'000'000;
};

struct RdmaProbeResult {
  net::ProbeResult base;  // transport rdma_ud; rtt_ns = the network RTT; lost; seq; flow_id
  int64_t network_rtt_ns = 0;
  int64_t prober_host_ns = 0;
  int64_t responder_host_ns = 0;
  int64_t prober_span_ns = 0;                       // T5 - T2
  TsSource source = TsSource::kSoftware;            // the prober's stamps
  TsSource responder_source = TsSource::kSoftware;  // the responder's turnaround
  uint32_t flow_label = 0;
  uint32_t src_qpn = 0;
  std::array<char, 32> local_device{};  // NUL-terminated: the NIC that probed (src_nic)
  std::array<char, 32> peer_device{};   // NUL-terminated: the peer's NIC (dst_nic), "" unknown
  void SetLocalDevice(std::string_view name);
  void SetPeerDevice(std::string_view name);
  std::string_view LocalDevice() const { return std::string_view(local_device.data()); }
  std::string_view PeerDevice() const { return std::string_view(peer_device.data()); }
};

class ResultSink {
 public:
  virtual ~ResultSink() = default;
  // Called on the mesh's thread; must not block.
  virtual void OnResult(const RdmaProbeResult& r) = 0;
};

// Counters, readable from any thread.
struct UdMeshStats {
  std::atomic<uint64_t> sent{0}, acked{0}, results{0}, lost{0}, abandoned{0};
  std::atomic<uint64_t> invalid_split{0};  // a negative difference: rejected, never exported
  std::atomic<uint64_t> reports_missing{0}, late{0}, stray{0};
  // Waits on this thread's other work (UdMesh::NoteBusy): prober host delays left out of results
  // (the network RTT stays), turnarounds reported as busy (the prober leaves the responder's host
  // delay out), and software-stamped results dropped (their network RTT held the wait). As
  // prober: results whose responder reported its turnaround busy.
  std::atomic<uint64_t> busy_prober_delays{0}, busy_turnarounds{0}, busy_software_results{0};
  std::atomic<uint64_t> peer_busy_turnarounds{0};
  std::atomic<uint64_t> responder_answers{0}, responder_busy{0};
  // Reports sent right after an ack to the same prober / after the hold ran out (or early, when
  // the responder's table of answers in flight fills up).
  std::atomic<uint64_t> reports_with_ack{0}, reports_after_hold{0};
  // Steps that posted at least one probe (the send wakeups).
  std::atomic<uint64_t> send_rounds{0};
  std::atomic<uint64_t> budget_skipped{0}, no_send_slot{0}, skipped_port_down{0};
  std::atomic<uint64_t> ah_failures{0}, post_failures{0}, repost_failures{0};
  std::atomic<uint64_t> qp_recoveries{0}, recovery_failures{0};
  std::atomic<uint64_t> port_down_events{0}, port_up_events{0}, addr_change_events{0};
  std::atomic<uint64_t> device_fatal_events{0}, device_reopens{0};
  std::array<std::atomic<uint64_t>, kWcStatusCount> completion_errors{};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(UdDrop::kCount)> dropped{};
};

class UdMesh {
 public:
  // Opens the devices and sets up every usable port. Unavailable when the host has no RDMA stack
  // (ibv_get_device_list fails); NotFound when there is no usable port. A port that cannot be
  // used is logged with its reason and left out; the others go on.
  static StatusOr<std::unique_ptr<UdMesh>> Create(Verbs& verbs, const Clock& clock,
                                                  UdMeshOptions opts, ResultSink* sink,
                                                  net::ProbeBudget* budget = nullptr);
  ~UdMesh();

  // The local endpoints peers should probe. Changes after a device is reopened
  // (endpoints_version() grows).
  std::vector<UdEndpoint> Endpoints() const;
  uint64_t endpoints_version() const { return endpoints_version_; }
  // The timestamp source of each endpoint, in Endpoints() order.
  std::vector<TsSource> TimestampSources() const;

  // Replaces the targets. Entries that cannot be used (no local port of that link layer, bad
  // rate or flows) are skipped and counted in the returned count; the rest apply.
  int SetTargets(std::vector<UdTarget> targets);

  // Does everything that is due: async events, QP recovery, completions, probes, timeouts.
  // Never blocks. Returns nanoseconds until something is due again (for the caller's wait).
  int64_t Step();
  // File descriptors that become readable when the mesh has work: async events and completion
  // channels. Wait on them (poll) for at most what Step() returned. Changes when a device closes
  // or reopens: ask again after every Step().
  std::vector<int> WaitFds() const;
  // The same, appended to `fds` as POLLIN entries (no allocation once `fds` has grown).
  void AppendWaitFds(std::vector<pollfd>& fds) const;

  const UdMeshStats& stats() const { return stats_; }

  // The owning thread was busy with other work of this process over [start_ns, end_ns) on the
  // monotonic clock (the agent's RC bursts and their QP setup share the thread): a probe or ack
  // that arrived meanwhile waited on this process, not on the host, so the host delay it would
  // carry is left out (docs/rdma.md "Waits on the agent's own work"). Spans under kMinBusyNs are
  // not kept (below what the analyzer judges); the last kBusySpans are.
  void NoteBusy(int64_t start_ns, int64_t end_ns);
  static constexpr int64_t kMinBusyNs = 100'000;
  static constexpr size_t kBusySpans = 64;
  // Called on the mesh's thread when a device is closed (DEVICE_FATAL), before any of its
  // objects go: what others made on its context and PD (PortFor: the RC QPs, MRs and CQs) must
  // be destroyed first, as verbs require (a PD in use cannot be freed; a closed context's objects
  // dangle).
  void SetBeforeDeviceClose(std::function<void(const std::string& device)> fn) {
    before_close_ = std::move(fn);
  }

  // An open, up port for other QPs of this process (RC bandwidth): of `device` when named, else
  // the first of link layer `want` (kUnknown: any). The objects stay valid until the device
  // closes (the SetBeforeDeviceClose callback runs first). False when there is none.
  bool PortFor(const std::string& device, LinkLayer want, Context** ctx, Pd** pd, uint8_t* port,
               int* gid_index) const;

  struct Device;
  struct Flow;
  struct Outstanding;
  struct Pending;

 private:
  UdMesh(Verbs& verbs, const Clock& clock, UdMeshOptions opts, ResultSink* sink,
         net::ProbeBudget* budget);
  Status OpenDevice(Device& d);
  void CloseDevice(Device& d, const char* why);
  void HandleAsyncEvents(Device& d, int64_t now);
  void RecoverPorts(Device& d, int64_t now);
  void PollPort(size_t dev, size_t port, int64_t now);
  // One of the port's CQs until empty; false when the port or device went away meanwhile.
  bool PollCq(size_t dev, size_t port, bool send, int64_t now);
  // An ack posted from a port with software stamps has no send stamp yet (its T4 is the poll
  // that sees its send completion, so that poll must not wait for the next wakeup).
  bool SoftwareAcksUnstamped() const;
  // Polls the send CQs for up to kAckStampSpinNs while SoftwareAcksUnstamped().
  void AwaitAckStamps();
  // When the hold of a report whose probe was answered at `answered` ends (report_hold_ns).
  int64_t HoldEnd(int64_t answered) const;
  // Sends the reports that are ready: all when `all`, else those whose hold ran out.
  void FlushReports(int64_t now, bool all);
  // Sends the ready reports for the prober that pending_[ack] answers (after its ack).
  void SendReportsWithAck(uint32_t ack);
  // Posts pending_[pi]'s report (a failure is counted) and frees the entry.
  void SendReport(uint32_t pi);
  void ReleasePending(uint32_t pi);
  void HandleCompletion(size_t dev, size_t port, const WorkCompletion& wc, int64_t now);
  void OnProbe(size_t dev, size_t port, UdPort& p, int qp, const UdMessage& m, uint64_t t3,
               uint32_t grh_flow);
  void OnAck(size_t dev, size_t port, const UdMessage& m, uint64_t t5, int64_t now);
  void OnReport(const UdMessage& m, int64_t now);
  void OnAckSent(size_t dev, size_t port, UdPort& p, const WorkCompletion& wc, int64_t now);
  void PortFailed(size_t dev, size_t port, int64_t now, const char* why);
  void SendDue(int64_t now);
  // Posts flow `fi`'s next probe (its schedule already advanced), or counts why it cannot.
  void SendProbe(uint32_t fi, int64_t now);
  // The start of the send window that holds `t` (monotonic), on the grid of window_ns_.
  int64_t WindowStart(int64_t t) const;
  void ExpireTimeouts(int64_t now);
  void MaybeFinish(Outstanding& o, int64_t now);
  // The fields every result of this probe has, answered or lost.
  RdmaProbeResult ResultFor(const Outstanding& o) const;
  void AbandonPort(size_t dev, size_t port);
  void RebuildFlowAhs();
  uint64_t Stamp(const UdPort& p, const WorkCompletion& wc, int64_t now) const;
  // Whether [from, to) (monotonic) overlaps a span given to NoteBusy; true too when it reaches
  // back before the oldest span still kept.
  bool WaitedOnBusy(int64_t from, int64_t to) const;
  int64_t SpanNs(const UdPort& p, uint64_t start, uint64_t end) const;

  Verbs& verbs_;
  const Clock& clock_;
  UdMeshOptions opts_;
  ResultSink* sink_;
  net::ProbeBudget* budget_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<UdTarget> targets_;
  std::vector<Flow> flows_;
  std::vector<Outstanding> outstanding_;  // indexed by seq & (size - 1)
  std::vector<uint64_t> timeout_ring_;    // seqs in send order
  size_t timeout_head_ = 0, timeout_count_ = 0;
  std::vector<Pending> pending_;  // responder: acks in flight
  std::vector<uint32_t> free_pending_;
  std::vector<uint32_t> live_pending_;  // in use, in the order answered
  size_t ready_count_ = 0;              // of those, with their report ready
  size_t sw_unstamped_ = 0;             // of those, software-stamped without their send stamp
  uint64_t next_seq_ = 1;
  // Send windows (UdMeshOptions::send_window_ns): their length, 0 when off, and a monotonic
  // time that is a window start on the wall clock's grid (taken when the targets are set).
  int64_t window_ns_ = 0;
  int64_t window_origin_ = 0;
  uint16_t generation_ = 0;
  std::array<std::pair<int64_t, int64_t>, kBusySpans> busy_{};  // ring of [start, end)
  std::function<void(const std::string&)> before_close_;
  size_t busy_next_ = 0, busy_count_ = 0;
  int64_t busy_evicted_end_ = INT64_MIN;  // the latest end of a span no longer kept
  uint64_t endpoints_version_ = 1;
  UdMeshStats stats_;
};

}  // namespace fw::rdma
