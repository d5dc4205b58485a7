// Composes the agent: discovery, uplink, HTTP exporter, and (test mode) numbered batches.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "daemon/agent/collective_agent.h"
#include "daemon/agent/node/node_metrics.h"
#include "daemon/agent/node_report.h"
#include "daemon/agent/outbound_buffer.h"
#include "daemon/agent/probe_scheduler.h"
#include "daemon/agent/trace_runner.h"
#include "daemon/agent/uplink.h"
#include "exporter/http_server.h"
#include "exporter/registry.h"
#include "exporter/self_metrics.h"
#include "fabricwatch.pb.h"
#include "probes/rdma/rdma_runner.h"

namespace fw::agent {

struct AgentOptions {
  std::string aggregator = "127.0.0.1:9750";
  std::string node_name;  // default: hostname
  std::string probe_address;
  // The fabric NICs to probe from (--probe-nics, fabric_nics.h): "eth0,eth1" or "mlx5_0=10.0.0.5".
  // Empty: one prober from probe_address. With NICs the responder listens on every address, and
  // an empty probe_address becomes the first NIC's.
  std::string probe_nics;
  int probe_port = 9753;           // 0 picks a free port (tests, several agents on one host)
  std::string probe_key_file;      // shared probe key; empty: probes are not authenticated
  int probe_source_port_base = 0;  // flow j uses base + j; 0: ephemeral ports
  double probe_busy_poll_us = 0;   // the prober's busy-poll window; 0: off (docs/probes.md)
  // Where in each UDP send slot this node's probes go, in ms after the wall clock's grid point
  // (net::UdpProberOptions::send_slot_phase_ns); 0: with every other agent; -1: no grid.
  double probe_send_phase_ms = -1;
  // UDP send slots per period of each plan rate (net::UdpProberOptions::send_slots): the prober
  // and the peers' responders wake about this many times a second per rate (docs/probes.md).
  int probe_send_slots = 4;
  // When the UDP prober reads its replies (net::ReplyReads): "immediate" (each reply wakes it) or
  // "deferred" (in the turns it takes anyway; rtt from the kernel receive stamp).
  std::string probe_reply_reads = "immediate";
  // "on": the UDP prober takes software TX stamps (net::UdpProberOptions::kernel_tx_timestamps),
  // a stamped clone of each probe on the socket's error queue and a drain per socket and slot,
  // for a kernel-stamped round trip that nothing in the agent reports; "off": none.
  std::string probe_tx_timestamps = "on";
  // Local ceilings on what a plan may ask (PlanCeilings; docs/probes.md, "Plan ceilings").
  int plan_max_targets = 4096;
  double plan_max_pps = 10'000;
  double plan_max_bytes_per_s = 125e6;
  bool probes = true;  // false: no responder and no probing (inventory/counters only)
  // true: the responder ignores the plan's allowed_probers and answers everyone (docs/probes.md).
  bool responder_allow_any = false;
  std::string rdma = "auto";  // "off": no RDMA probes; "auto": every usable port (docs/rdma.md)
  // Makes the verbs the RDMA probes use; empty: libibverbs. Tests select fake verbs here.
  std::function<std::unique_ptr<rdma::Verbs>()> rdma_verbs;
  rdma::RdmaRunnerOptions rdma_runner;
  std::string http_listen = "0.0.0.0:9752";
  std::string sysfs_root = "/sys";
  std::string hwloc_xml;
  std::string profile;
  double heartbeat_interval_s = 5;
  double sample_interval_s = 1;
  // The slow tier of the counter pass (counters::SamplerOptions::slow_every): counters that no
  // check or rate uses are read about this often, the rest every sample interval.
  double counter_slow_interval_s = 10;
  // Bytes of line time per port_xmit_wait tick (counters::SamplerOptions): 8 on Quantum-class
  // switches and, we assume, ConnectX HCAs; set it for hardware documented otherwise.
  double xmit_wait_tick_bytes = 8.0;
  // Code and read-only data pages mapped but idle are unmapped (common/code_pages.h) this long
  // after start and then every interval: start-up code leaves RSS, the steady state's faults
  // back. 0: never.
  double code_release_interval_s = 300;
  // `check` only: two counter passes this far apart give rates; 0 takes one snapshot.
  double check_counter_interval_s = 1;
  // gRPC mTLS material (nullopt: --insecure) and the HTTP web config (docs/security.md).
  std::optional<tls::TlsMaterial> tls;
  std::optional<http::WebConfig> web;
  int buffer_batches = 3600;
  int buffer_mb = 64;
  // Test mode: send this many numbered ProbeBatches at `test_batch_rate` per second.
  int test_batches = 0;
  double test_batch_rate = 20;
  // Test mode: this node's collective probes sleep this long before each iteration (a late rank).
  int collective_test_delay_ms = 0;
  // Path-trace packets per probe packet sent (PathTracerOptions::budget_fraction). Tests on small
  // fabrics, whose few probes would earn a trace every half minute, raise it.
  double trace_budget_fraction = 0.02;
};

class Agent {
 public:
  explicit Agent(AgentOptions options);
  ~Agent();
  // Where the report loop (counter pass, batches, check reports) runs: on a thread of the agent's
  // own ("fw-report"), or on the caller's, which then calls RunReportWork() whenever it is due or
  // report_wake_fd() is readable (the daemon's main thread, between its signal and watchdog
  // waits: one thread fewer, docs/performance.md).
  enum class ReportOn { kOwnThread, kCaller };
  Status Start(ReportOn report_on = ReportOn::kOwnThread);
  void Stop();
  // kCaller only: does the report work that is due and returns when it is next due. One caller
  // thread at a time.
  std::chrono::steady_clock::time_point RunReportWork();
  // kCaller only: an eventfd that becomes readable when report work is wanted before the time
  // RunReportWork() returned (a reconnect, an urgent batch); the caller reads it (resets it)
  // before calling RunReportWork(). -1 with kOwnThread.
  int report_wake_fd() const { return report_wake_fd_; }
  int http_port() const { return http_ ? http_->port() : 0; }
  // The watchdog probe: this agent's own /healthz answers (over HTTPS with a TLS web config).
  bool HttpHealthy(int timeout_ms) const {
    return http_ && http_->SelfCheck(options_.http_listen, timeout_ms);
  }
  const std::string& node_name() const { return options_.node_name; }

 private:
  fabricwatch::v1::Hello MakeHello() const;
  void TestBatchLoop();
  // Makes the counter pass every sample interval and sends its samples, and the check report when
  // it changes, every kCheckReportPeriod, and after every (re)connect: RunReportWork() whenever
  // it is due, on fw-report (kOwnThread).
  void ReportLoop();
  // When report work is next due: now when a report is forced, else the next counter pass or
  // batch.
  std::chrono::steady_clock::time_point NextReportDue() FW_REQUIRES(report_mu_);
  // Wakes the report loop, wherever it runs; after a flag it reads was set under report_mu_.
  void WakeReport() FW_REQUIRES(report_mu_);
  void SendCheckReport();
  // Starts path tracing beside the UDP prober when raw sockets are allowed (CAP_NET_RAW);
  // otherwise says so once and runs without.
  void StartTracing();
  // Feeds the tracer the probes sent and the flows' ports; sends its finished traces.
  void PumpTraces();

  static constexpr std::chrono::seconds kCheckReportPeriod{60};
  // The first release of idle code pages, after start-up (connection, first plan, first checks).
  static constexpr std::chrono::seconds kFirstCodeRelease{30};
  // Unmaps idle code pages when due (code_release_interval_s); on the report loop.
  void MaybeReleaseCode(std::chrono::steady_clock::time_point now);

  AgentOptions options_;
  uint64_t session_id_;
  metrics::Registry registry_;
  metrics::SelfMetrics self_;
  std::unique_ptr<NodeMetrics> node_;
  OutboundBuffer buffer_;
  std::unique_ptr<Uplink> uplink_;
  std::unique_ptr<ProbeScheduler> probes_;
  // One path tracer per prober (fabric NIC), tracing that NIC's flows from its address (and
  // device); empty without tracing. Set before the uplink starts.
  struct NicTraces {
    size_t prober = 0;
    uint32_t address = 0;  // the NIC's IPv4 address, host order (0: by route)
    std::unique_ptr<TraceRunner> runner;
    uint64_t probes_sent = 0;  // report thread only
  };
  std::vector<NicTraces> traces_;
  // The plan as the tracer of prober `i` sees it: the peers probed from that NIC.
  fabricwatch::v1::ProbePlan PlanForProber(const fabricwatch::v1::ProbePlan& plan, size_t i) const;

  std::unique_ptr<rdma::RdmaRunner> rdma_;  // null with --rdma off
  // RC connection messages that failed to parse; registered (and set) only with RDMA on, before
  // the uplink starts.
  metrics::Counter* rdma_rc_refused_ = nullptr;
  // Collective probe jobs (docs/collectives.md); declared after uplink_, so it goes first.
  std::unique_ptr<CollectiveRunner> collective_;
  std::unique_ptr<http::Server> http_;
  std::atomic<bool> stopping_{false};
  std::thread test_thread_;
  std::thread report_thread_;
  Mutex report_mu_;
  CondVar report_cv_;
  bool report_now_ FW_GUARDED_BY(report_mu_) = false;
  bool batch_now_ FW_GUARDED_BY(report_mu_) = false;  // a requested burst's result waits
  int report_wake_fd_ = -1;                           // eventfd, kCaller only
  // The report loop's own state; only the thread running RunReportWork() touches it.
  struct ReportState {
    uint64_t last_seq = 0;
    std::string findings, last_findings;  // kept across passes: no allocation once they are sized
    std::chrono::steady_clock::time_point last_report, next_pass, last_batch;
    std::chrono::steady_clock::duration period{};
    std::chrono::steady_clock::time_point next_code_release;  // max(): never
    CounterBatcher counters;  // full maps of raw counters once a minute and per connection
  };
  ReportState report_;
  metrics::Counter* code_released_bytes_ = nullptr;
  metrics::Counter* code_release_runs_ = nullptr;
  metrics::Counter* code_release_errors_ = nullptr;
};

}  // namespace fw::agent
