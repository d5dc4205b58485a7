// Runs the agent's probes from the aggregator's plan and turns their results into numbered batches.
//
// Threads: the echo responder and each UDP prober own one (probes/net). The TCP connect probes run
// on the first prober's thread (net::LoopGuest; the agent's path tracer does too), bandwidth
// bursts on a thread of this class that exists only while bursts run, and, unless the owner
// drains the results itself (own_batcher false: the agent does it on its report loop), a batcher
// drains results every batch interval into the outbound buffer. ApplyPlan() may be called from
// any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "daemon/agent/batch_pacer.h"
#include "daemon/agent/outbound_buffer.h"
#include "daemon/agent/plan_guard.h"
#include "exporter/registry.h"
#include "fabricwatch.pb.h"
#include "probes/net/bandwidth_probe.h"
#include "probes/net/echo_responder.h"
#include "probes/net/probe_result.h"
#include "probes/net/token_bucket.h"
#include "probes/net/udp_prober.h"

namespace fw::agent {

// One fabric NIC the agent probes from (docs/probes.md, "Every fabric NIC").
struct FabricNic {
  std::string name;     // as the fabric map names it (eth1, mlx5_3); results' src_nic
  std::string address;  // numeric; empty: the NIC is skipped (skip_reason says why)
  // The interface probes are bound to (SO_BINDTODEVICE); empty: the address alone, the routing
  // table picks the egress.
  std::string device;
  std::string skip_reason;  // set by discovery when it found no address
};

// What became of one configured fabric NIC at Start().
struct NicState {
  std::string name, address;
  bool probing = false;
  std::string reason;  // why not: "no_address: ...", "bind: ..."
};

struct ProbeSchedulerOptions {
  // The responder's bind address; when it names one address, probes are also sent from it.
  std::string listen_address = "0.0.0.0";
  int port = 9753;                       // UDP and TCP echo port
  std::optional<std::string> key;        // shared probe key (HMAC); none: open
  // A ProbeBatch at least this often (the plan's report_interval_ms replaces it, BatchPacer)...
  double batch_interval_s = 1.0;
  size_t max_batch_results = 4096;       // ... or sooner when this many results wait
  // true: a thread of this class calls BatchNow() every BatchInterval() (and soon, by
  // BatchPacer::Due, when an urgent result waits). false: no such thread; the owner calls
  // BatchNow() at least every BatchInterval(), and by BatchPacer::Due after `request_batch`
  // (called on a prober's thread when an urgent result, or a requested burst's, waits). Stop()
  // drains what is left either way.
  bool own_batcher = true;
  std::function<void()> request_batch;
  double tcp_connect_interval_s = 10.0;  // one connect probe per peer this often
  size_t result_queue_capacity = 65536;
  bool bandwidth_probes = true;
  // Flow j of every peer uses source port base + j (0: the kernel picks ephemeral ports). A fixed
  // base lets a fabric with source-port policy routing map flows to paths deterministically.
  int source_port_base = 0;
  // The UDP prober's busy-poll window after each send slot (net::BusyPollOptions); 0: sleep at
  // once, so that the reported round trip is measured like sockperf's (docs/probes.md).
  int64_t busy_poll_ns = 0;
  // The UDP send slots' place on the wall clock's grid (net::UdpProberOptions::
  // send_slot_phase_ns); negative: no grid (align_send_slots false).
  int64_t send_slot_phase_ns = 0;
  // UDP send slots per period of each rate (net::UdpProberOptions::send_slots). Each slot wakes
  // the prober, and the responders it probes, once; 4 at the planner's 1 Hz is one every 250 ms
  // (docs/probes.md, "Send slots: how many").
  uint32_t send_slots = 4;
  // When the UDP probers read their replies (net::UdpProberOptions::reply_reads).
  net::ReplyReads reply_reads = net::ReplyReads::kImmediate;
  // The UDP probers' software TX stamps (net::UdpProberOptions::kernel_tx_timestamps).
  bool kernel_tx_timestamps = true;
  // What any plan may ask of this node (--plan-max-targets, --plan-max-pps,
  // --plan-max-bytes-per-s); a plan past them is trimmed and counted (plan_guard.h).
  PlanCeilings ceilings;
  // The responder answers only the plan's allowed_probers (docs/probes.md "Who may probe us");
  // true (--responder-allow-any) answers everyone, for fabrics that rewrite probe source
  // addresses (NAT).
  bool responder_allow_any = false;
  // How long a replaced allow list stays admitted: the aggregator pushes a re-plan's plans over a
  // few ticks, so a peer may still probe by its previous plan for that long.
  std::chrono::nanoseconds allowed_probers_grace = std::chrono::seconds(30);
  // The fabric NICs to probe from, one UDP prober (sockets bound to the NIC's address, and
  // device) each. Empty: one prober from listen_address, whose results name no NIC.
  std::vector<FabricNic> nics;
};

class ProbeScheduler {
 public:
  // `notify` wakes the uplink after a batch lands in `buffer`.
  ProbeScheduler(ProbeSchedulerOptions options, OutboundBuffer& buffer,
                 std::function<void()> notify, metrics::Registry& registry,
                 const Clock& clock = RealClock::Get());
  ~ProbeScheduler();

  // Starts the responder (fails if the port is taken) and the prober threads.
  Status Start();
  void Stop();
  // Switches every prober to this plan; an older or equal plan version is ignored. Entries that
  // cannot be probed are skipped and the plan is held to the ceilings (GuardPlan); the rest
  // applies and its version is recorded. A plan the UDP prober refuses as a whole (it cannot,
  // after GuardPlan, unless stopping) keeps the running plan and leaves the version unrecorded,
  // so the same version sent again is tried again. The responder then answers the plan's
  // allowed_probers (everyone when the list is empty), and the previous list for
  // options.allowed_probers_grace more; an address that is not a numeric IP is skipped and counted
  // as a plan entry (reason "address"). The plan's burst requests run once each per (round, node),
  // one after another on the burst thread, whatever plans carry them again; while a plan
  // carries any, the periodic bursts wait. Calls are serialized.
  void ApplyPlan(const fabricwatch::v1::ProbePlan& plan);
  uint16_t responder_port() const { return responder_ ? responder_->port() : 0; }
  // For tracing the echoes: the responder remembers the UDP flows it answers (up to `max` between
  // two takes; EchoResponder::TrackAnsweredUdpFlows), and hands them over. Thread-safe; nothing
  // before Start().
  void TrackAnsweredUdpFlows(size_t max) {
    if (responder_) responder_->TrackAnsweredUdpFlows(max);
  }
  std::vector<net::AnsweredUdpFlow> TakeAnsweredUdpFlows() {
    return responder_ ? responder_->TakeAnsweredUdpFlows() : std::vector<net::AnsweredUdpFlow>{};
  }
  // For path tracing: the UDP probes sent so far (all NICs), and the local source port of the
  // first NIC's flow j (0 and empty before Start()). Thread-safe.
  uint64_t UdpProbesSent() const;
  std::vector<uint16_t> UdpSourcePorts() const { return UdpSourcePorts(0); }
  // Per prober (one per fabric NIC that probes; one in all without NICs), in the order of
  // options.nics: its NIC's name and address ("" without NICs), probes sent and source ports.
  // Fixed after Start(); thread-safe.
  size_t prober_count() const { return udp_.size(); }
  const FabricNic& prober_nic(size_t i) const { return udp_[i].nic; }
  // Prober i itself, for work that runs on its thread (net::LoopGuest: the path tracer).
  net::UdpProber& prober(size_t i) const { return *udp_[i].udp; }
  uint64_t UdpProbesSent(size_t i) const;
  std::vector<uint16_t> UdpSourcePorts(size_t i) const;
  // The prober a planned UDP or TCP peer is probed from: the NIC named src_nic (the map's name,
  // which --probe-nics must use), else the first. After Start().
  size_t ProberFor(const fabricwatch::v1::PlannedPeer& p) const;
  // Each configured fabric NIC: probing, or why not (after Start()).
  const std::vector<NicState>& nic_states() const { return nic_states_; }
  // The node's probe budget every prober pays from, the RDMA UD mesh included (it sets its rate
  // and burst from the plan). Null before Start().
  net::ProbeBudget* budget() const { return budget_.get(); }
  // Moves every waiting result into the outbound buffer, as batches of at most
  // max_batch_results (columns), and calls `notify` after each. Thread-safe.
  void BatchNow();
  // The report interval the current plan asks for (report_interval_ms; batch_interval_s before
  // one). Any thread.
  std::chrono::nanoseconds BatchInterval() const { return pacer_.interval(); }
  // Counts a result of a prober this class does not run (the RDMA UD mesh) in the probe metrics
  // (fabricwatch_probe_{sent,lost}_total, fabricwatch_probe_rtt_seconds by transport). Any thread.
  void RecordResult(const net::ProbeResult& r) { Publish(r); }

 private:
  struct SlowTarget {
    std::string node, address;
    std::string source;  // the local address to connect from ("" by route)
    uint16_t src_nic = 0, dst_nic = 0;
    uint16_t port = 0;
    bool bandwidth = false;
    int64_t next_connect_ns = 0;
    int64_t next_bandwidth_ns = 0;
  };
  // A burst the plan asked for (v1::BurstRequest, checked).
  struct BurstOrder {
    std::string node, address;
    uint16_t port = 0;
    uint64_t bytes = 0;
    uint64_t round = 0;
    std::chrono::nanoseconds timeout{0};
  };
  enum class BurstOutcome : uint8_t { kRun, kLost, kRefused, kInvalid, kRepeat, kCount };
  class ConnectGuest;
  void BatchLoop();
  // Starts the burst thread. REQUIRES: the prober's thread (ConnectGuest), which set
  // bursts_running_.
  void StartBursts();
  // The burst thread: runs requested and due periodic bursts one after another until none is
  // left, then clears bursts_running_ and ends.
  void BurstLoop();
  // Queues the plan's new burst requests (new: not seen for this round and node before).
  void QueueBursts(const fabricwatch::v1::ProbePlan& plan, uint64_t default_bytes) FW_REQUIRES(mu_);
  // Runs one requested burst and queues its result (probe_seq = the round; lost on failure).
  void RunRequestedBurst(net::BandwidthProbe& probe, const BurstOrder& order);
  void Publish(const net::ProbeResult& r);
  // Counts a burst that reached its ack without a CPU pressure share, and logs the first one.
  // Called on the burst thread.
  void NoteCpuPressure(const net::BandwidthProbe& probe, const net::ProbeResult& r);
  void RefreshStats();
  // The local address probes leave from: listen_address when it names one, else "" (by route).
  const std::string& ProbeSource() const;
  // Hands the plan's allowed_probers to the responder (see ApplyPlan).
  void ApplyAllowedProbers(const fabricwatch::v1::ProbePlan& plan) FW_REQUIRES(apply_mu_);
  // Counts what GuardPlan left out or trimmed, and logs each cause at most once a minute.
  void ReportGuard(uint64_t version, const GuardedPlan& g) FW_REQUIRES(apply_mu_);

  ProbeSchedulerOptions options_;
  OutboundBuffer& buffer_;
  std::function<void()> notify_;
  const Clock& clock_;
  net::ResultQueue queue_;
  BatchPacer pacer_{std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(options_.batch_interval_s))};
  // An urgent result (BatchPacer::Urgent) waits and the next batch was asked for; BatchNow clears.
  std::atomic<bool> urgent_{false};
  std::unique_ptr<net::ProbeBudget> budget_;
  std::unique_ptr<net::EchoResponder> responder_;
  struct NicProber {
    FabricNic nic;
    uint16_t id = 0;  // the NIC's name id (0 without NICs: results name none)
    std::unique_ptr<net::UdpProber> udp;
  };
  std::vector<NicProber> udp_;  // set by Start(), fixed after
  std::vector<NicState> nic_states_;
  // Starts one prober per usable fabric NIC (or the single one); counts the NICs it skips.
  Status StartProbers();
  // The id of a NIC name in results (0 for ""); append-only, at most kMaxNicNames names.
  uint16_t NicId(const std::string& name);
  static constexpr size_t kMaxNicNames = 4096;
  Mutex nic_names_mu_;
  std::vector<std::string> nic_names_ FW_GUARDED_BY(nic_names_mu_){""};
  std::unordered_map<std::string, uint16_t> nic_ids_ FW_GUARDED_BY(nic_names_mu_);

  // Held through ApplyPlan: version check, probers, version record. Taken before mu_.
  Mutex apply_mu_ FW_ACQUIRED_BEFORE(mu_);
  std::array<int64_t, net::kPlanSkipCount> skip_logged_ns_ FW_GUARDED_BY(apply_mu_){};
  std::array<int64_t, kPlanTrimCount> trim_logged_ns_ FW_GUARDED_BY(apply_mu_){};
  Mutex mu_;
  CondVar cv_;
  bool stopping_ FW_GUARDED_BY(mu_) = false;
  uint64_t plan_version_ FW_GUARDED_BY(mu_) = 0;
  std::vector<SlowTarget> slow_targets_ FW_GUARDED_BY(mu_);
  uint64_t bandwidth_bytes_ FW_GUARDED_BY(mu_) = 4u << 20;
  double bandwidth_interval_s_ FW_GUARDED_BY(mu_) = 300;
  std::deque<BurstOrder> pending_bursts_ FW_GUARDED_BY(mu_);
  // The (round, node) of the last kBurstsRemembered requests taken, oldest first.
  static constexpr size_t kBurstsRemembered = 4096;
  std::set<std::pair<uint64_t, std::string>> bursts_seen_ FW_GUARDED_BY(mu_);
  std::deque<std::pair<uint64_t, std::string>> bursts_seen_order_ FW_GUARDED_BY(mu_);
  bool plan_has_bursts_ FW_GUARDED_BY(mu_) = false;
  bool flush_ FW_GUARDED_BY(mu_) = false;  // batch now: a requested burst's result waits
  // BatchNow()'s scratch: the popped results and each peer name's index in the batch's table.
  Mutex batch_mu_;
  std::vector<net::ProbeResult> batch_results_ FW_GUARDED_BY(batch_mu_);
  std::unordered_map<std::string, uint32_t> batch_names_ FW_GUARDED_BY(batch_mu_);
  int64_t burst_invalid_logged_ns_ FW_GUARDED_BY(mu_) = 0;
  std::thread batcher_;
  // TCP connect probes, a guest of the first prober's loop; bursts on bursts_, which runs only
  // while there are bursts to run.
  std::unique_ptr<ConnectGuest> connect_;
  std::unique_ptr<net::BandwidthProbe> bandwidth_;  // the burst thread's (one run at a time)
  std::thread bursts_;  // started and joined by the prober's thread, joined by Stop()
  bool bursts_running_ FW_GUARDED_BY(mu_) = false;

  // Metrics; handles resolved once.
  std::array<metrics::Histogram*, 6> rtt_{};
  std::array<metrics::Counter*, 6> sent_{};
  std::array<metrics::Counter*, 6> lost_{};
  metrics::Gauge& goodput_;
  metrics::Gauge& burst_cpu_busy_;
  metrics::Counter& cpu_read_errors_;
  metrics::Gauge& burst_cpu_pressure_;
  metrics::Counter& cpu_pressure_unmeasured_;
  bool cpu_pressure_logged_ = false;  // the burst thread's: one log line when it is unmeasured
  metrics::Counter& queue_dropped_;
  metrics::Counter& budget_rejected_;
  metrics::Counter& late_replies_;
  metrics::Counter& receive_drops_;
  metrics::Counter& losses_taken_back_;
  metrics::Counter& probe_errors_;
  metrics::Counter& plans_;
  std::array<metrics::Counter*, static_cast<size_t>(BurstOutcome::kCount)> burst_requests_{};
  metrics::Gauge& planned_peers_;
  metrics::Family<metrics::Counter>& nic_setup_failures_;
  metrics::Gauge& nics_probing_;
  std::array<metrics::Counter*, net::kPlanSkipCount> plan_skipped_{};
  std::array<metrics::Counter*, kPlanTrimCount> plan_trimmed_{};
  metrics::Family<metrics::Counter>& malformed_replies_;
  metrics::Family<metrics::Counter>& responder_dropped_;
  metrics::Counter& responder_requests_;
  metrics::Counter& responder_bytes_in_;
  metrics::Counter& responder_bytes_out_;
};

}  // namespace fw::agent
