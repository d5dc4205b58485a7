// Agent composition.
#include "daemon/agent/agent.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <unordered_map>

#include "common/code_pages.h"
#include "daemon/agent/fabric_nics.h"
#include "daemon/agent/node_report.h"
#include "daemon/agent/rdma_metrics.h"
#include "probes/rdma/rdma_wire.h"
#include "probes/rdma/verbs_ibv.h"

namespace fw::agent {

namespace v1 = fabricwatch::v1;

namespace {
// HTTP workers and how long each waits for a request. civetweb keeps a connection on one worker
// until it ends, so a client that sends its request slowly, or never, holds a worker until the
// request timeout. The agent serves one scraper and its own watchdog's /healthz with small answers
// that fit a socket's send buffer, and a client on the fabric's network sends its request within
// milliseconds of connecting, so one worker with a 250 ms timeout serves them: N slow clients (a
// port scanner, half-open connections) delay a scrape by at most N x 250 ms, less than the
// ceil(N / 3) s of three workers with a 1 s timeout, and two threads fewer (docs/performance.md).
// BadInputTest holds five such clients on the agent's port and wants /metrics within 2 s.
constexpr int kHttpWorkers = 1;
constexpr int kHttpRequestTimeoutMs = 250;

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}
}  // namespace

Agent::Agent(AgentOptions options)
    : options_(std::move(options)),
      session_id_(std::random_device{}() | (uint64_t{std::random_device{}()} << 32)),
      self_(registry_, FW_VERSION),
      buffer_(static_cast<size_t>(std::max(1, options_.buffer_batches)),
              static_cast<size_t>(std::max(1, options_.buffer_mb)) << 20) {
  if (options_.node_name.empty()) options_.node_name = Hostname();
  NodeMetricsOptions no;
  no.check.sysfs_root = options_.sysfs_root;
  no.check.hwloc_xml = options_.hwloc_xml;
  no.check.profile = options_.profile;
  no.check.node_name = options_.node_name;
  no.check.xmit_wait_tick_bytes = options_.xmit_wait_tick_bytes;
  no.sample_interval = std::chrono::milliseconds(
      static_cast<int64_t>(std::max(0.05, options_.sample_interval_s) * 1000));
  no.counter_slow_every = static_cast<int>(std::clamp(
      std::round(options_.counter_slow_interval_s / std::max(0.05, options_.sample_interval_s)),
      1.0, 3600.0));
  node_ = std::make_unique<NodeMetrics>(std::move(no), registry_, RealClock::Get());
}

Agent::~Agent() {
  Stop();
  if (report_wake_fd_ >= 0) close(report_wake_fd_);
}

v1::Hello Agent::MakeHello() const {
  v1::Hello h;
  h.set_node(options_.node_name);
  h.set_version(FW_VERSION);
  NodeSnapshot snap = node_->Latest();
  if (snap.inventory) {
    *h.mutable_inventory() = InventoryToProto(*snap.inventory);
  } else {
    h.mutable_inventory()->set_hostname(Hostname());
  }
  h.set_session_id(session_id_);
  h.set_next_seq(buffer_.next_seq());
  if (probes_ && probes_->prober_count() > 0 && !probes_->prober_nic(0).name.empty()) {
    // One endpoint per fabric NIC that probes, named by the NIC, first NIC first (a planner
    // without a map probes endpoints.front()).
    for (auto t : {v1::TRANSPORT_UDP, v1::TRANSPORT_TCP_CONNECT, v1::TRANSPORT_TCP_BW}) {
      for (size_t i = 0; i < probes_->prober_count(); ++i) {
        v1::ProbeEndpoint* e = h.add_endpoints();
        e->set_transport(t);
        e->set_address(probes_->prober_nic(i).address);
        e->set_port(probes_->responder_port());
        e->set_nic(probes_->prober_nic(i).name);
      }
    }
  } else if (!options_.probe_address.empty() && probes_) {
    for (auto t : {v1::TRANSPORT_UDP, v1::TRANSPORT_TCP_CONNECT, v1::TRANSPORT_TCP_BW}) {
      v1::ProbeEndpoint* e = h.add_endpoints();
      e->set_transport(t);
      e->set_address(options_.probe_address);
      e->set_port(probes_ ? probes_->responder_port() : static_cast<uint32_t>(options_.probe_port));
    }
  }
  // RDMA endpoints go after the UDP/TCP ones and leave `nic` empty (rdma.device names the NIC),
  // so a planner that reads endpoints.front() or matches by nic still finds the echo port.
  if (collective_) *h.mutable_collective() = collective_->capability();
  h.mutable_inventory()->set_rdma(rdma_ ? rdma::InventoryLine(rdma_->state())
                                        : "unavailable: disabled (--rdma off)");
  if (rdma_) {
    const rdma::RdmaState rs = rdma_->state();
    for (size_t i = 0; i < rs.endpoints.size(); ++i) {
      v1::ProbeEndpoint* e = h.add_endpoints();
      e->set_transport(v1::TRANSPORT_RDMA_UD);
      rdma::EndpointToProto(rs.endpoints[i],
                            i < rs.sources.size() ? rs.sources[i] : rdma::TsSource::kSoftware,
                            e->mutable_rdma());
    }
  }
  return h;
}

Status Agent::Start(ReportOn report_on) {
  if (report_on == ReportOn::kCaller) {
    report_wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (report_wake_fd_ < 0) return Status::Internal("eventfd for the report loop failed");
  }
  // The first check and counter pass; after it the report loop samples (node_ gets no thread of
  // its own), so one thread wakes once per period and reports the pass it has just made.
  Status d = node_->SampleNow();
  if (!d.ok()) {
    // The agent still samples counters, probes and reports without an inventory; say so once.
    spdlog::warn("msg=\"node check failed\" error=\"{}\"", d.message());
  }
  auto http = http::Server::Start(options_.http_listen, kHttpWorkers,
                                  options_.web ? &*options_.web : nullptr, kHttpRequestTimeoutMs);
  if (!http.ok()) return http.status();
  http_ = std::move(*http);
  http_->HandleMetrics(registry_, [this](double s) { self_.ObserveScrape(s); });
  http_->Handle("/healthz",
                [](const http::Request&, http::Response& r) { r.Send(200, "text/plain", "ok\n"); });

  if (options_.probes) {
    ProbeSchedulerOptions po;
    po.port = options_.probe_port;
    if (options_.probe_source_port_base < 0 || options_.probe_source_port_base > 65000) {
      return Status::InvalidArgument("--probe-source-port-base must be 0..65000");
    }
    po.source_port_base = options_.probe_source_port_base;
    if (!(options_.probe_busy_poll_us >= 0 && options_.probe_busy_poll_us <= 10'000)) {
      return Status::InvalidArgument("--probe-busy-poll-us must be 0..10000");
    }
    po.busy_poll_ns = static_cast<int64_t>(options_.probe_busy_poll_us * 1e3);
    if (!(options_.probe_send_phase_ms == -1 ||
          (options_.probe_send_phase_ms >= 0 && options_.probe_send_phase_ms <= 60'000))) {
      return Status::InvalidArgument("--probe-send-phase-ms must be -1 or 0..60000");
    }
    po.send_slot_phase_ns = options_.probe_send_phase_ms < 0
                                ? -1
                                : static_cast<int64_t>(options_.probe_send_phase_ms * 1e6);
    if (options_.probe_send_slots < 1 || options_.probe_send_slots > 100) {
      return Status::InvalidArgument("--probe-send-slots must be 1..100");
    }
    po.send_slots = static_cast<uint32_t>(options_.probe_send_slots);
    if (options_.probe_reply_reads == "deferred") {
      if (po.busy_poll_ns > 0) {
        return Status::InvalidArgument(
            "--probe-reply-reads deferred does not busy-poll: set --probe-busy-poll-us 0");
      }
      po.reply_reads = net::ReplyReads::kDeferred;
    } else if (options_.probe_reply_reads != "immediate") {
      return Status::InvalidArgument("--probe-reply-reads must be immediate or deferred");
    }
    if (options_.probe_tx_timestamps != "on" && options_.probe_tx_timestamps != "off") {
      return Status::InvalidArgument("--probe-tx-timestamps must be on or off");
    }
    po.kernel_tx_timestamps = options_.probe_tx_timestamps == "on";
    if (options_.plan_max_targets < 1 || !(options_.plan_max_pps > 0) ||
        !(options_.plan_max_bytes_per_s > 0)) {
      return Status::InvalidArgument(
          "--plan-max-targets, --plan-max-pps and --plan-max-bytes-per-s must be positive");
    }
    po.ceilings.max_targets = static_cast<size_t>(options_.plan_max_targets);
    po.ceilings.max_pps = options_.plan_max_pps;
    po.ceilings.max_bytes_per_s = options_.plan_max_bytes_per_s;
    po.responder_allow_any = options_.responder_allow_any;
    if (!options_.probe_nics.empty()) {
      auto nics = ParseFabricNics(options_.probe_nics, InterfaceAddressV4);
      if (!nics.ok()) return nics.status();
      po.nics = std::move(*nics);
      // The responder answers on every fabric address (docs/probes.md, "Every fabric NIC").
      po.listen_address = "0.0.0.0";
      if (options_.probe_address.empty()) {
        for (const FabricNic& n : po.nics) {
          if (!n.address.empty()) {
            options_.probe_address = n.address;
            break;
          }
        }
      }
    } else if (!options_.probe_address.empty()) {
      po.listen_address = options_.probe_address;
    }
    if (!options_.probe_key_file.empty()) {
      std::ifstream in(options_.probe_key_file);
      std::string key((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      while (!key.empty() && (key.back() == '\n' || key.back() == '\r')) key.pop_back();
      if (!in || key.empty()) {
        return Status::InvalidArgument("probe key file " + options_.probe_key_file +
                                       ": unreadable or empty");
      }
      po.key = key;
    }
    // The report loop drains the results (ReportLoop): one thread fewer than a batcher of its own.
    po.own_batcher = false;
    po.request_batch = [this] {
      MutexLock lock(report_mu_);
      batch_now_ = true;
      WakeReport();
    };
    probes_ = std::make_unique<ProbeScheduler>(
        po, buffer_,
        [this] {
          if (uplink_) uplink_->Notify();
        },
        registry_);
    Status ps = probes_->Start();
    if (!ps.ok()) return ps;
  }

  Uplink::Options uo;
  uo.aggregator = options_.aggregator;
  uo.tls = options_.tls;
  uo.heartbeat_interval_s = options_.heartbeat_interval_s;
  uplink_ = std::make_unique<Uplink>(
      uo, buffer_, [this] { return MakeHello(); },
      [this](const v1::ProbePlan& plan) {
        if (probes_) probes_->ApplyPlan(plan);
        for (NicTraces& t : traces_) {
          t.runner->OnPlan(probes_->prober_count() == 1 ? plan : PlanForProber(plan, t.prober));
        }
        if (rdma_) {
          rdma_->SetTargets(rdma::UdTargetsFromPlan(plan, nullptr));
          rdma_->SetRcPlan(rdma::RcPeersFromPlan(plan), plan.rdma_rc_interval_s(),
                           plan.rdma_rc_bytes());
        }
      },
      registry_,
      [this] {
        MutexLock lock(report_mu_);
        report_now_ = true;
        WakeReport();
      });
  CollectiveRunnerOptions co;
  co.node = options_.node_name;
  // Gloo binds and announces this address; without --probe-address the node name must resolve.
  co.tcp_address = options_.probe_address.empty() ? options_.node_name : options_.probe_address;
  co.test_delay = std::chrono::milliseconds(options_.collective_test_delay_ms);
  co.nvidia_driver_files.assign(std::begin(CollectiveRunnerOptions::kNvidiaDriverFiles),
                                std::end(CollectiveRunnerOptions::kNvidiaDriverFiles));
  collective_ = std::make_unique<CollectiveRunner>(
      co, [this](v1::AgentMessage m) { uplink_->SendBestEffort(std::move(m)); }, registry_);
  if (NodeSnapshot gpus = node_->Latest();
      gpus.inventory && !gpus.inventory->topology.gpus.empty()) {
    // The Hello announces NCCL's state, so the aggregator knows which nodes can run NCCL groups
    // across nodes. Only where GPUs and NVIDIA's driver are: elsewhere mapping the 200 MB library
    // at every start is not worth it (a later NCCL job still loads it and reports the state).
    std::error_code ec;
    if (std::filesystem::exists("/dev/nvidiactl", ec)) {
      collective_->CheckNccl();
      spdlog::info("msg=\"collective probes: {}\"", collective_->nccl_status());
    } else {
      spdlog::info("msg=\"collective probes: NCCL not checked at start: no /dev/nvidiactl\"");
    }
  }
  uplink_->SetMessageHandler([this](const v1::AggregatorMessage& m) {
    if (m.has_kv_reply()) {
      collective_->OnKvReply(m.kv_reply());
    } else if (m.has_collective_job()) {
      collective_->OnJob(m.collective_job());
    } else if (m.has_rdma_rc_connect() && rdma_) {
      auto rc = rdma::RcConnectFromProto(m.rdma_rc_connect());
      if (rc.ok()) {
        rdma_->OnRcMessage(std::move(rc.value()));
      } else {
        rdma_rc_refused_->Inc();
        spdlog::warn("msg=\"rdma rc: connection message refused\" from={} error=\"{}\" refused={}",
                     m.rdma_rc_connect().peer().substr(0, 64), rc.status().ToString(),
                     rdma_rc_refused_->Value());
      }
    }
  });
  // RDMA UD probes (docs/rdma.md). Without RDMA (ENOSYS here, or no usable port) the agent says
  // "rdma: unavailable" in the log, Hello's inventory and /metrics, and the rest goes on.
  code_released_bytes_ =
      &registry_
           .AddCounter("fabricwatch_agent_code_released_bytes_total",
                       "Resident bytes of idle code and read-only data pages the agent unmapped "
                       "(start-up code leaves RSS; docs/performance.md).")
           .WithLabels({});
  code_release_runs_ = &registry_
                            .AddCounter("fabricwatch_agent_code_release_runs_total",
                                        "Times the agent unmapped its idle code pages.")
                            .WithLabels({});
  code_release_errors_ =
      &registry_
           .AddCounter("fabricwatch_agent_code_release_errors_total",
                       "Failed reads of /proc/self/smaps and failed madvise calls while "
                       "unmapping idle code pages.")
           .WithLabels({});
  metrics::Gauge& rdma_available =
      registry_
          .AddGauge("fabricwatch_rdma_available",
                    "1 when RDMA UD probes run on this node, 0 when RDMA is unavailable or off.")
          .WithLabels({});
  if (options_.rdma != "off") {
    std::unique_ptr<rdma::Verbs> verbs =
        options_.rdma_verbs ? options_.rdma_verbs() : rdma::MakeIbverbs(options_.sysfs_root);
    // RDMA probes pay from the scheduler's budget, beside the UDP and TCP probes, and count in
    // the same fabricwatch_probe_* series (transport="rdma_ud").
    // Registered only with RDMA on, so that hosts without it export no RC series.
    metrics::Gauge* rc_goodput =
        &registry_
             .AddGauge("fabricwatch_rdma_rc_goodput_bps",
                       "Goodput of the most recent RC write burst (rdma_rc), bits/s.")
             .WithLabels({});
    rdma_rc_refused_ =
        &registry_
             .AddCounter("fabricwatch_rdma_rc_refused_total",
                         "RC connection messages from the aggregator refused as malformed.")
             .WithLabels({});
    rdma_ = std::make_unique<rdma::RdmaRunner>(
        std::move(verbs), RealClock::Get(), options_.rdma_runner,
        [this, rc_goodput](std::vector<rdma::RdmaProbeResult>&& batch) {
          v1::ProbeBatch b;
          for (const rdma::RdmaProbeResult& r : batch) {
            if (probes_) probes_->RecordResult(r.base);
            if (r.base.transport == net::Transport::kRdmaRc && !r.base.lost) {
              rc_goodput->Set(r.base.goodput_bps);
            }
            rdma::ResultToProto(r, b.add_results());
          }
          buffer_.Push(std::move(b));
          uplink_->Notify();
        },
        probes_ ? probes_->budget() : nullptr,
        // RC connection data goes through the aggregator (docs/rdma.md "RC write bandwidth").
        [this](const rdma::RcConnectMsg& m) {
          v1::AgentMessage a;
          rdma::RcConnectToProto(m, a.mutable_rdma_rc_connect());
          uplink_->SendBestEffort(std::move(a));
        });
    (void)rdma_->Start();  // a failure is the unavailable state, logged by the runner
    RegisterRdmaUdMetrics(registry_, rdma_->stats());
    spdlog::info("msg=\"rdma: {}\"", rdma::InventoryLine(rdma_->state()));
  }
  rdma_available.Set(rdma_ && rdma_->state().available ? 1 : 0);
  if (probes_) StartTracing();
  collective_->Start();
  uplink_->Start();
  {
    const auto now = std::chrono::steady_clock::now();
    report_.period = std::chrono::milliseconds(
        static_cast<int64_t>(std::max(0.05, options_.sample_interval_s) * 1000));
    report_.next_pass = now + report_.period;
    report_.last_batch = now;
    report_.last_report = now;
    report_.next_code_release =
        options_.code_release_interval_s > 0
            ? now + std::min<std::chrono::steady_clock::duration>(
                        kFirstCodeRelease, std::chrono::milliseconds(static_cast<int64_t>(
                                               options_.code_release_interval_s * 1000)))
            : std::chrono::steady_clock::time_point::max();
  }
  if (report_on == ReportOn::kOwnThread) {
    report_thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "fw-report");
      ReportLoop();
    });
  }
  if (options_.test_batches > 0) {
    test_thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "fw-test-batches");
      TestBatchLoop();
    });
  }
  NodeSnapshot snap = node_->Latest();
  spdlog::info("msg=\"agent started\" node={} aggregator={} http_port={} gpus={} ports={}",
               options_.node_name, options_.aggregator, http_port(),
               snap.inventory ? snap.inventory->topology.gpus.size() : 0, snap.ports.size());
  return Status::Ok();
}

void Agent::StartTracing() {
  for (size_t i = 0; i < probes_->prober_count(); ++i) {
    const FabricNic& nic = probes_->prober_nic(i);
    net::PathTracerOptions to;
    to.budget_fraction = options_.trace_budget_fraction;
    // Each NIC's flows are traced from that NIC (its address and device), so a trace takes the
    // egress its flow takes; without NICs, from the probe address.
    const std::string& source = nic.name.empty() ? options_.probe_address : nic.address;
    in_addr v4{};
    if (inet_pton(AF_INET, source.c_str(), &v4) == 1) to.bind_address_v4 = source;
    to.bind_device = nic.device;
    // On prober i's thread: the tracer sleeps to its hop deadlines and reads its sockets without
    // blocking, so it needs no thread of its own (docs/performance.md).
    auto tracer = net::PathTracer::Start(to, probes_->prober(i));
    if (!tracer.ok()) {
      spdlog::warn(
          "msg=\"path tracing off: findings under ECMP name candidate groups, not links\" "
          "nic={} error=\"{}\" hint=\"needs CAP_NET_RAW\"",
          nic.name.empty() ? "-" : nic.name, tracer.status().message());
      continue;
    }
    // The echoes this node sends back are traced too: they may cross another link than the
    // probes.
    NicTraces t;
    t.prober = i;
    t.address = to.bind_address_v4.empty() ? 0 : ntohl(v4.s_addr);
    t.runner = std::make_unique<TraceRunner>(
        WrapPathTracer(std::move(*tracer)), to.bind_address_v4,
        [this](v1::AgentMessage m) { uplink_->SendBestEffort(std::move(m)); },
        probes_->responder_port());
    traces_.push_back(std::move(t));
  }
  if (traces_.empty()) return;
  probes_->TrackAnsweredUdpFlows(TraceRunner::kMaxEchoFlows);
  spdlog::info("msg=\"path tracing on\" echo_port={} tracers={}", probes_->responder_port(),
               traces_.size());
}

v1::ProbePlan Agent::PlanForProber(const v1::ProbePlan& plan, size_t i) const {
  v1::ProbePlan out = plan;
  out.clear_peers();
  for (const v1::PlannedPeer& p : plan.peers()) {
    if (probes_->ProberFor(p) == i) *out.add_peers() = p;
  }
  return out;
}

namespace {

// The local IPv4 address the routing table sends to `address` (host order) from; 0 when unknown.
uint32_t SourceToward(uint32_t address) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(9);
  dst.sin_addr.s_addr = htonl(address);
  sockaddr_in local{};
  socklen_t len = sizeof local;
  uint32_t out = 0;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&dst), sizeof dst) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
    out = ntohl(local.sin_addr.s_addr);
  }
  close(fd);
  return out;
}

}  // namespace

void Agent::PumpTraces() {
  if (traces_.empty() || !probes_) return;
  const Clock& clock = RealClock::Get();
  std::vector<net::AnsweredUdpFlow> answered = probes_->TakeAnsweredUdpFlows();
  if (traces_.size() == 1) {
    traces_[0].runner->OnAnswered(answered, clock.MonotonicNanos());
  } else {
    // An echo leaves by the route to its prober: the tracer of the NIC with that source address
    // traces it (the first NIC's when none matches). One route lookup per prober address.
    std::vector<std::vector<net::AnsweredUdpFlow>> per(traces_.size());
    std::unordered_map<uint32_t, size_t> by_address;
    for (const net::AnsweredUdpFlow& f : answered) {
      auto [it, added] = by_address.try_emplace(f.address, 0);
      if (added) {
        const uint32_t src = SourceToward(f.address);
        for (size_t k = 0; k < traces_.size(); ++k) {
          if (traces_[k].address != 0 && traces_[k].address == src) it->second = k;
        }
      }
      per[it->second].push_back(f);
    }
    for (size_t k = 0; k < traces_.size(); ++k) {
      traces_[k].runner->OnAnswered(per[k], clock.MonotonicNanos());
    }
  }
  for (NicTraces& t : traces_) {
    const uint64_t sent = probes_->UdpProbesSent(t.prober);
    const uint64_t delta = sent >= t.probes_sent ? sent - t.probes_sent : 0;
    t.probes_sent = sent;
    t.runner->Pump(delta, probes_->UdpSourcePorts(t.prober), clock.MonotonicNanos(),
                   clock.WallNanos());
  }
}

void Agent::TestBatchLoop() {
  auto period = std::chrono::duration<double>(1.0 / std::max(0.1, options_.test_batch_rate));
  auto next = std::chrono::steady_clock::now();
  for (int i = 1; i <= options_.test_batches && !stopping_; ++i) {
    v1::ProbeBatch b;
    b.set_test_id(static_cast<uint64_t>(i));
    v1::ProbeResult* r = b.add_results();
    r->set_peer("test");
    r->set_transport(v1::TRANSPORT_UDP);
    r->set_probe_seq(static_cast<uint64_t>(i));
    buffer_.Push(std::move(b));
    uplink_->Notify();
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(period);
    std::this_thread::sleep_until(next);
  }
  spdlog::info("msg=\"test batches queued\" count={}", options_.test_batches);
}

void Agent::SendCheckReport() {
  v1::AgentMessage m;
  *m.mutable_check_report() = CheckReportToProto(node_->Latest());
  uplink_->SendBestEffort(std::move(m));
}

void Agent::WakeReport() {
  report_cv_.NotifyAll();
  if (report_wake_fd_ >= 0) (void)eventfd_write(report_wake_fd_, 1);
}

std::chrono::steady_clock::time_point Agent::NextReportDue() {
  if (report_now_) return std::chrono::steady_clock::time_point::min();
  // The next batch is due by the plan's report interval, or sooner when an urgent result waits
  // (batch_now_: BatchPacer).
  return probes_
             ? std::min(report_.next_pass,
                        BatchPacer::Due(report_.last_batch, probes_->BatchInterval(), batch_now_))
             : report_.next_pass;
}

void Agent::ReportLoop() {
  MutexLock lock(report_mu_);
  while (!stopping_) {
    const auto until = NextReportDue();
    if (std::chrono::steady_clock::now() < until) {
      (void)report_cv_.WaitUntil(report_mu_, until);
      continue;
    }
    lock.Unlock();
    (void)RunReportWork();
    lock.Lock();
  }
}

// Everything periodic and light, on one thread: the probe results into batches every report
// interval (sooner when an urgent result waits: BatchPacer), and every sample interval the
// counter pass, the traces' packet budget, the counter batch and, when due, the check report.
std::chrono::steady_clock::time_point Agent::RunReportWork() {
  MutexLock lock(report_mu_);
  const bool forced = report_now_;
  report_now_ = false;
  auto now = std::chrono::steady_clock::now();
  const BatchPacer::Jobs jobs =
      probes_ ? BatchPacer::DueTogether(
                    now, report_.next_pass, report_.period,
                    BatchPacer::Due(report_.last_batch, probes_->BatchInterval(), batch_now_),
                    probes_->BatchInterval())
              : BatchPacer::Jobs{now >= report_.next_pass, false};
  if (jobs.batch) batch_now_ = false;
  lock.Unlock();
  // The probe batch, the counter batch, traces and a check report reach the uplink with one
  // wake-up of its thread, at the end of this wakeup (Uplink::WakeHold).
  std::optional<Uplink::WakeHold> hold(std::in_place, *uplink_);
  if (jobs.batch) {
    probes_->BatchNow();
    report_.last_batch = now;
  }
  // A forced report (a reconnect) sends the latest pass and keeps the sampling period. The next
  // pass is a period after this wakeup (not after the pass), the batch's phase, or after its due
  // time when a batch took it along early (BatchPacer::NextPass).
  if (forced || jobs.pass) {
    if (jobs.pass) {
      (void)node_->SampleNow();  // errors are logged and counted inside
      report_.next_pass = BatchPacer::NextPass(now, report_.next_pass, report_.period);
    }
    PumpTraces();
    // A new connection's aggregator holds no base for partial maps of raw counters.
    if (forced) report_.counters.Reset();
    NodeSnapshot snap = node_->Latest();
    if (snap.seq != report_.last_seq && !snap.ports.empty()) {
      report_.last_seq = snap.seq;
      v1::AgentMessage m;
      *m.mutable_counter_batch() = report_.counters.Next(snap, now);
      uplink_->SendBestEffort(std::move(m));
    }
    std::string& findings = report_.findings;
    findings.clear();
    for (const Finding& f : snap.findings) {
      findings.append(f.kind).append(f.location.id).append(f.summary).push_back('\n');
    }
    now = std::chrono::steady_clock::now();
    if (forced || findings != report_.last_findings ||
        now - report_.last_report >= kCheckReportPeriod) {
      findings.swap(report_.last_findings);
      report_.last_report = now;
      SendCheckReport();
    }
    hold.reset();  // the code release reads /proc/self/smaps and unmaps: not while held
    MaybeReleaseCode(now);
  }
  hold.reset();
  lock.Lock();
  return NextReportDue();
}

void Agent::MaybeReleaseCode(std::chrono::steady_clock::time_point now) {
  if (now < report_.next_code_release) return;
  report_.next_code_release =
      now + std::chrono::milliseconds(static_cast<int64_t>(options_.code_release_interval_s * 1000));
  const bool first = code_release_runs_->Value() == 0;
  CodeReleaseResult r;
  const Status s = ReleaseCodePages(r);
  code_release_runs_->Inc();
  if (!s.ok()) {
    code_release_errors_->Inc();
    spdlog::warn("msg=\"could not release idle code pages\" error=\"{}\"", s.message());
    return;
  }
  code_released_bytes_->Inc(static_cast<double>(r.resident_bytes));
  if (r.failures > 0) code_release_errors_->Inc(static_cast<double>(r.failures));
  // The first release says what start-up left mapped; the later ones are routine.
  spdlog::log(first ? spdlog::level::info : spdlog::level::debug,
              "msg=\"released idle code pages\" mappings={} resident_kib={} failures={}",
              r.mappings, r.resident_bytes >> 10, r.failures);
}

void Agent::Stop() {
  if (stopping_.exchange(true)) return;
  {
    MutexLock lock(report_mu_);
    WakeReport();
  }
  if (report_thread_.joinable()) report_thread_.join();
  if (test_thread_.joinable()) test_thread_.join();
  if (node_) node_->Stop();
  if (probes_) probes_->Stop();
  if (rdma_) rdma_->Stop();
  if (collective_) collective_->Stop();
  if (uplink_) uplink_->Stop();
  if (http_) http_->Stop();
  spdlog::info("msg=\"agent stopped\" node={}", options_.node_name);
}

}  // namespace fw::agent
