// Probe scheduling, result batching and probe metrics.
#include "daemon/agent/probe_scheduler.h"

#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <unordered_map>

#include "common/log.h"
#include "probes/net/bandwidth_probe.h"
#include "probes/net/probe_packet.h"
#include "probes/net/socket_util.h"
#include "probes/net/tcp_prober.h"

namespace fw::agent {

namespace v1 = fabricwatch::v1;

namespace {

v1::Transport ToWire(net::Transport t) {
  switch (t) {
    case net::Transport::kUdp:
      return v1::TRANSPORT_UDP;
    case net::Transport::kTcpConnect:
      return v1::TRANSPORT_TCP_CONNECT;
    case net::Transport::kTcpBw:
      return v1::TRANSPORT_TCP_BW;
    case net::Transport::kRdmaUd:
      return v1::TRANSPORT_RDMA_UD;
    case net::Transport::kRdmaRc:
      return v1::TRANSPORT_RDMA_RC;
    case net::Transport::kCollective:
      return v1::TRANSPORT_COLLECTIVE;
  }
  return v1::TRANSPORT_UNSPECIFIED;
}

// What a burst request may ask (BurstRequest): larger ones are skipped as invalid.
constexpr uint64_t kMaxBurstBytes = net::kMaxBulkPayload;
constexpr double kMaxBurstTimeout_s = 60;

// RTT buckets from 10 µs to 1 s: loopback and veth sit in the tens of µs, fabrics in the µs to
// ms, and anything past a second is a timeout.
const std::vector<double> kRttBuckets = {1e-5,   2.5e-5, 5e-5, 1e-4,   2.5e-4, 5e-4, 1e-3,
                                         2.5e-3, 5e-3,   1e-2, 2.5e-2, 0.1,    0.25, 1.0};

// Whether a UDP socket can be bound to the NIC's address (and device), as the prober's will be:
// a NIC that fails here is skipped at start rather than failing every plan entry later.
// SO_BINDTODEVICE refused for want of privilege (before Linux 5.7 it needs CAP_NET_RAW) clears
// `device`: the NIC then probes by its address and the routing table, and says so.
Status CheckNicSocket(FabricNic& nic) {
  StatusOr<net::SocketAddress> addr = net::ParseAddress(nic.address, 0);
  if (!addr.ok()) return addr.status();
  net::Fd fd(socket(addr->family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return net::ErrnoStatus("socket(UDP)", errno);
  if (!nic.device.empty() && setsockopt(fd.get(), SOL_SOCKET, SO_BINDTODEVICE, nic.device.c_str(),
                                        static_cast<socklen_t>(nic.device.size())) != 0) {
    const int err = errno;
    if (err != EPERM) return net::ErrnoStatus("SO_BINDTODEVICE " + nic.device, err);
    spdlog::warn(
        "msg=\"fabric nic: SO_BINDTODEVICE not permitted; probing by address and route\" "
        "nic={} device={}",
        nic.name, nic.device);
    nic.device.clear();
  }
  if (bind(fd.get(), addr->get(), addr->len) != 0) {
    return net::ErrnoStatus("bind " + addr->ToString(), errno);
  }
  return Status::Ok();
}

}  // namespace

// TCP connect probes on the first prober's thread: connects are started when due in Service,
// their sockets wait in an epoll set of their own (watched by the prober's), and the timeout is
// a deadline, so no thread blocks on them. Bursts, which block for their length, are handed to a
// thread that runs only while there are bursts to run (StartBursts).
class ProbeScheduler::ConnectGuest final : public net::LoopGuest {
 public:
  explicit ConnectGuest(ProbeScheduler& s) : s_(s), prober_(s.clock_, s.budget_.get()) {}

  Status Open() {
    epoll_.Reset(epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_.valid()) return net::ErrnoStatus("epoll_create1", errno);
    wake_.Reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!wake_.valid()) return net::ErrnoStatus("eventfd", errno);
    return Status::Ok();
  }
  // A new plan, a requested burst or the end of a burst run: look again. Any thread.
  void Wake() {
    uint64_t one = 1;
    if (write(wake_.get(), &one, sizeof one) < 0 && errno != EAGAIN) {
      spdlog::warn("msg=\"connect probe eventfd write failed\" error={}", std::strerror(errno));
    }
  }
  std::vector<int> WatchedFds() const override { return {epoll_.get(), wake_.get()}; }

  void OnReady(int fd) override {
    if (fd == wake_.get()) {
      uint64_t v;
      if (read(wake_.get(), &v, sizeof v) < 0 && errno != EAGAIN) {
        spdlog::warn("msg=\"connect probe eventfd read failed\" error={}", std::strerror(errno));
      }
      return;
    }
    std::array<epoll_event, 64> events;
    const int n = epoll_wait(epoll_.get(), events.data(), events.size(), 0);
    for (int i = 0; i < n; ++i) {
      auto it = pending_.find(events[i].data.fd);
      if (it == pending_.end()) continue;
      epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->first, nullptr);
      Push(prober_.Finish(it->second.attempt), it->second.nics);
      pending_.erase(it);
    }
  }

  int64_t Service(int64_t now_ns) override {
    const int64_t now = s_.clock_.MonotonicNanos();
    struct Due {
      net::TcpTarget target;
      std::pair<uint16_t, uint16_t> nics;
    };
    std::vector<Due> due;
    int64_t next = INT64_MAX;  // on clock_
    bool bursts = false;
    {
      MutexLock lock(s_.mu_);
      if (s_.stopping_) return INT64_MAX;
      for (SlowTarget& t : s_.slow_targets_) {
        if (now >= t.next_connect_ns) {
          due.push_back({{t.node, t.address, t.port, t.source}, {t.src_nic, t.dst_nic}});
          t.next_connect_ns = now + static_cast<int64_t>(s_.options_.tcp_connect_interval_s * 1e9);
        }
        next = std::min(next, t.next_connect_ns);
        // A running burst thread picks up what falls due meanwhile, and wakes this guest when
        // it ends.
        if (t.bandwidth && !s_.plan_has_bursts_ && !s_.bursts_running_) {
          bursts |= now >= t.next_bandwidth_ns;
          next = std::min(next, t.next_bandwidth_ns);
        }
      }
      bursts |= !s_.pending_bursts_.empty() && !s_.bursts_running_;
      if (bursts) s_.bursts_running_ = true;
    }
    if (bursts) s_.StartBursts();
    const int64_t wall = s_.clock_.WallNanos();
    for (Due& d : due) {
      StatusOr<net::ConnectAttempt> a = prober_.Begin(d.target, wall);
      if (!a.ok()) {
        Push(a.status(), d.nics);
      } else if (!a->fd.valid()) {
        Push(a->result, d.nics);
      } else {
        epoll_event ev{};
        ev.events = EPOLLOUT;
        ev.data.fd = a->fd.get();
        if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, a->fd.get(), &ev) != 0) {
          Push(net::ErrnoStatus("epoll_ctl(connect probe)", errno), d.nics);
          continue;
        }
        const int fd = a->fd.get();
        pending_[fd] = Pending{std::move(*a), d.nics, now + kConnectTimeoutNs};
      }
    }
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (now < it->second.deadline) {
        next = std::min(next, it->second.deadline);
        ++it;
        continue;
      }
      epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->first, nullptr);
      Push(net::TcpConnectProber::Lost(it->second.attempt), it->second.nics);
      it = pending_.erase(it);
    }
    return next == INT64_MAX ? INT64_MAX : now_ns + std::max<int64_t>(0, next - now);
  }

 private:
  static constexpr int64_t kConnectTimeoutNs = 1'000'000'000;
  struct Pending {
    net::ConnectAttempt attempt;
    std::pair<uint16_t, uint16_t> nics;  // (src, dst)
    int64_t deadline = 0;                // on clock_
  };
  void Push(StatusOr<net::ProbeResult> r, std::pair<uint16_t, uint16_t> nics) {
    if (!r.ok()) {
      s_.probe_errors_.Inc();
      return;
    }
    std::tie(r->src_nic, r->dst_nic) = nics;
    s_.queue_.TryPush(*r);  // a full queue counts the drop itself
  }

  ProbeScheduler& s_;
  net::TcpConnectProber prober_;
  net::Fd epoll_, wake_;
  std::unordered_map<int, Pending> pending_;  // by socket
};

ProbeScheduler::ProbeScheduler(ProbeSchedulerOptions options, OutboundBuffer& buffer,
                               std::function<void()> notify, metrics::Registry& r,
                               const Clock& clock)
    : options_(std::move(options)),
      buffer_(buffer),
      notify_(std::move(notify)),
      clock_(clock),
      queue_(options_.result_queue_capacity),
      goodput_(r.AddGauge("fabricwatch_probe_goodput_bps",
                          "Goodput of the most recent bandwidth burst, bits/s.")
                   .WithLabels({})),
      burst_cpu_busy_(r.AddGauge("fabricwatch_probe_burst_cpu_busy_ratio",
                                 "This host's CPU busy share (all CPUs) over the most recent TCP "
                                 "bandwidth burst and its lead; a saturated host's bursts measure "
                                 "the host, not the path.")
                          .WithLabels({})),
      cpu_read_errors_(r.AddCounter("fabricwatch_probe_cpu_read_errors_total",
                                    "Readings of /proc/stat around TCP bandwidth bursts that "
                                    "failed; those bursts report no CPU share.")
                           .WithLabels({})),
      burst_cpu_pressure_(r.AddGauge("fabricwatch_probe_burst_cpu_pressure_ratio",
                                     "The share of the most recent TCP bandwidth burst during "
                                     "which runnable tasks on this host waited for a CPU (PSI "
                                     "\"some\"); a contended host's bursts measure the host.")
                              .WithLabels({})),
      cpu_pressure_unmeasured_(
          r.AddCounter("fabricwatch_probe_cpu_pressure_unmeasured_total",
                       "TCP bandwidth bursts whose CPU pressure was not measured: no "
                       "/proc/pressure/cpu on this kernel, or a reading that failed.")
              .WithLabels({})),
      queue_dropped_(r.AddCounter("fabricwatch_probe_results_dropped_total",
                                  "Probe results dropped because the result queue was full.")
                         .WithLabels({})),
      budget_rejected_(r.AddCounter("fabricwatch_probe_budget_rejected_total",
                                    "Probes not sent because the agent's probe budget was spent.")
                           .WithLabels({})),
      late_replies_(r.AddCounter("fabricwatch_probe_late_replies_total",
                                 "UDP probe replies that came after their probe's timeout (the "
                                 "probe was already reported lost).")
                        .WithLabels({})),
      receive_drops_(r.AddCounter("fabricwatch_probe_receive_drops_total",
                                  "Datagrams the kernel dropped on a full UDP probe socket receive "
                                  "buffer (their probes count as lost).")
                         .WithLabels({})),
      losses_taken_back_(r.AddCounter(
                             "fabricwatch_probe_losses_taken_back_total",
                             "UDP probes reported lost on their round-trip timeout whose echo then "
                             "came within the fixed timeout, reported again as late results.")
                             .WithLabels({})),
      probe_errors_(r.AddCounter("fabricwatch_probe_errors_total",
                                 "Connect and bandwidth probes that failed before measuring "
                                 "(refused, unreachable, bad target).")
                        .WithLabels({})),
      plans_(r.AddCounter("fabricwatch_probe_plans_applied_total", "Probe plans applied.")
                 .WithLabels({})),
      planned_peers_(r.AddGauge("fabricwatch_probe_planned_peers", "Peers in the current plan.")
                         .WithLabels({})),
      nic_setup_failures_(r.AddCounter("fabricwatch_probe_nic_setup_failures_total",
                                       "Fabric NICs the agent could not probe from at start, by "
                                       "reason: no_address, bind.",
                                       {"reason"})),
      nics_probing_(r.AddGauge("fabricwatch_probe_nics",
                               "Fabric NICs the agent probes from (1 without --probe-nics).")
                        .WithLabels({})),
      malformed_replies_(r.AddCounter("fabricwatch_probe_malformed_replies_total",
                                      "Probe replies dropped as malformed, by reason.",
                                      {"reason"})),
      responder_dropped_(r.AddCounter("fabricwatch_responder_dropped_total",
                                      "Requests the echo responder did not answer, by reason.",
                                      {"reason"})),
      responder_requests_(r.AddCounter("fabricwatch_responder_requests_total",
                                       "Well-formed echo requests received (UDP).")
                              .WithLabels({})),
      responder_bytes_in_(r.AddCounter("fabricwatch_responder_received_bytes_total",
                                       "Bytes received by the echo responder.")
                              .WithLabels({})),
      responder_bytes_out_(r.AddCounter("fabricwatch_responder_sent_bytes_total",
                                        "Bytes sent by the echo responder (never more than "
                                        "received).")
                               .WithLabels({})) {
  auto& rtt = r.AddHistogram("fabricwatch_probe_rtt_seconds", "Probe round-trip time.",
                             {"transport"}, kRttBuckets);
  auto& sent = r.AddCounter("fabricwatch_probe_sent_total", "Probes sent.", {"transport"});
  auto& lost = r.AddCounter("fabricwatch_probe_lost_total", "Probes unanswered within the timeout.",
                            {"transport"});
  for (int t = 0; t < 6; ++t) {
    std::string name(net::TransportName(static_cast<net::Transport>(t)));
    rtt_[t] = &rtt.WithLabels({name});
    sent_[t] = &sent.WithLabels({name});
    lost_[t] = &lost.WithLabels({name});
  }
  auto& skipped = r.AddCounter("fabricwatch_probe_plan_entries_skipped_total",
                               "Probe plan entries this agent could not use and skipped, by "
                               "reason; the rest of the plan applied.",
                               {"reason"});
  for (size_t i = 0; i < net::kPlanSkipCount; ++i) {
    plan_skipped_[i] =
        &skipped.WithLabels({std::string(net::PlanSkipName(static_cast<net::PlanSkip>(i)))});
  }
  auto& trimmed =
      r.AddCounter("fabricwatch_probe_plan_trimmed_total",
                   "Probe plans trimmed to this agent's local ceilings, by limit.", {"limit"});
  for (size_t i = 0; i < kPlanTrimCount; ++i) {
    plan_trimmed_[i] = &trimmed.WithLabels({std::string(PlanTrimName(static_cast<PlanTrim>(i)))});
  }
  auto& bursts = r.AddCounter("fabricwatch_probe_burst_requests_total",
                              "Bandwidth bursts the plan asked for (a qualification's rounds), by "
                              "outcome: run, lost (failed or timed out), refused (probe budget), "
                              "invalid (entry skipped), repeat (already taken for its round).",
                              {"outcome"});
  constexpr const char* kOutcomes[] = {"run", "lost", "refused", "invalid", "repeat"};
  for (size_t i = 0; i < burst_requests_.size(); ++i) {
    burst_requests_[i] = &bursts.WithLabels({kOutcomes[i]});
  }
  r.AddBeforeRender([this] { RefreshStats(); });
  // Bad news and escalated flows' results do not wait for the report interval (BatchPacer).
  queue_.SetPushHook([this](const net::ProbeResult& result) {
    if (!pacer_.Urgent(result) || urgent_.exchange(true)) return;
    if (!options_.own_batcher) {
      if (options_.request_batch) options_.request_batch();
      return;
    }
    { MutexLock lock(mu_); }  // BatchLoop checks urgent_ under mu_: no lost wakeup
    cv_.NotifyAll();
  });
}

ProbeScheduler::~ProbeScheduler() { Stop(); }

Status ProbeScheduler::Start() {
  // A generous default budget until the aggregator's plan sets the real one.
  budget_ = std::make_unique<net::ProbeBudget>(clock_, 1000, 12.5e6, 1.0);
  net::ResponderOptions ro;
  ro.listen_address = options_.listen_address;
  ro.port = static_cast<uint16_t>(options_.port);
  ro.key = options_.key;
  auto responder = net::EchoResponder::Start(ro, clock_);
  if (!responder.ok()) return responder.status();
  responder_ = std::move(*responder);
  if (Status s = StartProbers(); !s.ok()) return s;
  if (options_.own_batcher) {
    batcher_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "fw-sched-batch");
      BatchLoop();
    });
  }
  bandwidth_ = std::make_unique<net::BandwidthProbe>(clock_, budget_.get(), options_.key);
  connect_ = std::make_unique<ConnectGuest>(*this);
  if (Status s = connect_->Open(); !s.ok()) return s;
  if (Status s = udp_.front().udp->AddGuest(connect_.get()); !s.ok()) return s;
  spdlog::info("msg=\"probes started\" responder_port={}", responder_->port());
  return Status::Ok();
}

void ProbeScheduler::Stop() {
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.NotifyAll();
  // After this the prober's thread starts no burst run; the one running ends after its burst.
  if (connect_) udp_.front().udp->RemoveGuest(connect_.get());
  if (bursts_.joinable()) bursts_.join();
  for (NicProber& p : udp_) p.udp->Stop();
  if (batcher_.joinable()) {
    batcher_.join();
  } else {
    BatchNow();  // the results the owner's last call left
  }
  if (responder_) responder_->Stop();
}

void ProbeScheduler::ApplyPlan(const v1::ProbePlan& plan) {
  MutexLock apply(apply_mu_);
  {
    MutexLock lock(mu_);
    if (plan.version() != 0 && plan.version() <= plan_version_) return;
  }
  const GuardedPlan g = GuardPlan(plan, options_.ceilings);
  ReportGuard(plan.version(), g);
  pacer_.SetPlan(plan);

  std::vector<net::UdpProbePlan> udp(udp_.size());
  std::vector<SlowTarget> slow;
  std::mt19937_64 rng(plan.version());
  const int64_t now = clock_.MonotonicNanos();
  size_t udp_peers = 0;
  for (size_t k = 0; k < g.peers.size(); ++k) {
    const v1::PlannedPeer* p = g.peers[k];
    // From the NIC the plan names; results name both NICs (none when this agent has no NICs).
    const size_t i = udp_.empty() ? 0 : ProberFor(*p);
    const uint16_t src_nic = udp_.empty() ? 0 : udp_[i].id;
    const uint16_t dst_nic = src_nic == 0 ? 0 : NicId(p->dst_nic());
    if (p->transport() == v1::TRANSPORT_UDP || p->transport() == v1::TRANSPORT_UNSPECIFIED) {
      net::PeerTarget t;
      t.name = p->node();
      t.address = p->address();
      t.port = static_cast<uint16_t>(p->port());
      t.flows = static_cast<uint32_t>(std::max(1, p->src_ports_size()));
      t.src_nic = src_nic;
      t.dst_nic = dst_nic;
      t.rate_hz = g.udp_rates_hz[k];  // each entry at its own rate (an escalated pair's only)
      // ... or, an escalation that raises only the flows across its suspect, per flow
      t.raised_flows = g.udp_raised_flows[k];
      t.unraised_rate_hz = g.udp_unraised_rates_hz[k];
      t.timeout_ns = g.udp_timeouts_ns[k];  // and timeout (an escalated pair's is short)
      if (i < udp.size()) udp[i].peers.push_back(std::move(t));
      ++udp_peers;
    }
    SlowTarget s;
    s.node = p->node();
    s.source = src_nic != 0 ? udp_[i].nic.address : ProbeSource();
    s.src_nic = src_nic;
    s.dst_nic = dst_nic;
    s.address = p->address();
    s.port = static_cast<uint16_t>(p->port());
    s.bandwidth = p->bandwidth() && options_.bandwidth_probes;
    // Spread connect probes and bursts over their periods so a plan change causes no storm.
    std::uniform_real_distribution<double> jitter(0, 1);
    s.next_connect_ns =
        now + static_cast<int64_t>(jitter(rng) * options_.tcp_connect_interval_s * 1e9);
    s.next_bandwidth_ns =
        now + static_cast<int64_t>((0.1 + jitter(rng)) * g.bandwidth_interval_s * 1e9);
    slow.push_back(std::move(s));
  }
  for (net::UdpProbePlan& u : udp) u.timeout_floor_ns = g.udp_timeout_floor_ns;
  const size_t peers = udp_peers;
  Status st = udp_.empty() ? Status::FailedPrecondition("not started") : Status::Ok();
  for (size_t i = 0; i < udp_.size() && st.ok(); ++i) {
    st = udp_[i].udp->SetPlan(std::move(udp[i]));
  }
  if (!st.ok()) {
    spdlog::warn("msg=\"probe plan rejected\" version={} error={}", plan.version(),
                 LogQuote(st.message()));
    return;
  }
  ApplyAllowedProbers(plan);
  uint64_t bandwidth_bytes = 0;
  {
    MutexLock lock(mu_);
    plan_version_ = plan.version();
    slow_targets_ = std::move(slow);
    if (plan.bandwidth_bytes() > 0) bandwidth_bytes_ = plan.bandwidth_bytes();
    bandwidth_interval_s_ = g.bandwidth_interval_s;
    bandwidth_bytes = bandwidth_bytes_;
    QueueBursts(plan, bandwidth_bytes_);
    for (const v1::BurstRequest& b : plan.bursts()) {
      bandwidth_bytes = std::max(bandwidth_bytes, std::min<uint64_t>(b.bytes(), kMaxBurstBytes));
    }
  }
  if (g.budget_pps > 0 && g.budget_bytes_per_s > 0) {
    // The byte bucket must hold a whole bandwidth burst, or bursts could never be admitted;
    // 10% headroom so that latency probes drawn meanwhile do not block it.
    const double burst_s =
        std::max(1.0, 1.1 * net::BandwidthBurstBytes(bandwidth_bytes) / g.budget_bytes_per_s);
    budget_->Reconfigure(g.budget_pps, g.budget_bytes_per_s, burst_s);
  }
  plans_.Inc();
  planned_peers_.Set(static_cast<double>(g.peers.size()));
  spdlog::info(
      "msg=\"probe plan applied\" version={} peers={} udp_peers={} udp_flows={} udp_pps={:.3f} "
      "max_rate_hz={:.3f} per_flow_raised={} per_flow_unraised={} raised_ids_ignored={}",
      plan.version(), g.peers.size(), peers, g.udp_flows, g.udp_pps, g.udp_max_rate_hz,
      g.udp_raised_flows_total, g.udp_unraised_flows_total, g.raised_ids_ignored);
  cv_.NotifyAll();
  if (connect_) connect_->Wake();  // new targets, and perhaps bursts to run
}

void ProbeScheduler::QueueBursts(const v1::ProbePlan& plan, uint64_t default_bytes) {
  plan_has_bursts_ = plan.bursts_size() > 0;
  size_t invalid = 0;
  std::string example;
  for (const v1::BurstRequest& b : plan.bursts()) {
    const bool bad_timeout =
        !std::isfinite(b.timeout_s()) || b.timeout_s() < 0 || b.timeout_s() > kMaxBurstTimeout_s;
    if (net::CheckPeer(b.node(), b.address(), b.port()) || b.round() == 0 ||
        b.bytes() > kMaxBurstBytes || bad_timeout) {
      if (invalid++ == 0) {
        example = "node '" + b.node().substr(0, 80) + "' address '" + b.address().substr(0, 80) +
                  "' port " + std::to_string(b.port()) + " round " + std::to_string(b.round()) +
                  " bytes " + std::to_string(b.bytes());
      }
      burst_requests_[static_cast<size_t>(BurstOutcome::kInvalid)]->Inc();
      continue;
    }
    std::pair<uint64_t, std::string> key{b.round(), b.node()};
    if (!bursts_seen_.insert(key).second) {
      burst_requests_[static_cast<size_t>(BurstOutcome::kRepeat)]->Inc();
      continue;
    }
    bursts_seen_order_.push_back(std::move(key));
    if (bursts_seen_order_.size() > kBurstsRemembered) {
      bursts_seen_.erase(bursts_seen_order_.front());
      bursts_seen_order_.pop_front();
    }
    BurstOrder o;
    o.node = b.node();
    o.address = b.address();
    o.port = static_cast<uint16_t>(b.port());
    o.bytes = b.bytes() > 0 ? b.bytes() : default_bytes;
    o.round = b.round();
    o.timeout = std::chrono::nanoseconds(
        static_cast<int64_t>((b.timeout_s() > 0 ? b.timeout_s() : 10.0) * 1e9));
    pending_bursts_.push_back(std::move(o));
  }
  const int64_t now = clock_.MonotonicNanos();
  if (invalid > 0 &&
      (burst_invalid_logged_ns_ == 0 || now - burst_invalid_logged_ns_ >= 60'000'000'000)) {
    burst_invalid_logged_ns_ = now;
    spdlog::warn("msg=\"burst requests skipped\" version={} count={} first={}", plan.version(),
                 invalid, LogQuote(example));
  }
}

void ProbeScheduler::RunRequestedBurst(net::BandwidthProbe& probe, const BurstOrder& order) {
  net::BandwidthOptions bo;
  bo.bytes = order.bytes;
  bo.timeout = order.timeout;
  const net::TcpTarget target{order.node, order.address, order.port, ProbeSource()};  // by route
  // The probe budget may be drained by the latency probes of the moment (or by a first attempt
  // the peer refused): wait for it, up to 2 s. The peer's responder may apply the plan that
  // admits us a moment after we apply ours (both come with one re-plan) and refuses by closing
  // the connection: up to 2 retries 300 ms apart. The aggregator waits for the round longer.
  StatusOr<net::ProbeResult> r = probe.Run(target, bo);
  for (int waits = 0, refusals = 0;
       !r.ok() && ((r.status().code() == StatusCode::kResourceExhausted && waits < 20) ||
                   (r.status().code() == StatusCode::kUnavailable && refusals < 2));) {
    const bool budget = r.status().code() == StatusCode::kResourceExhausted;
    ++(budget ? waits : refusals);
    std::this_thread::sleep_for(std::chrono::milliseconds(budget ? 100 : 300));
    r = probe.Run(target, bo);
  }
  cpu_read_errors_.Set(static_cast<double>(probe.cpu_read_failures()));
  if (r.ok()) NoteCpuPressure(probe, *r);
  net::ProbeResult out;
  BurstOutcome outcome = BurstOutcome::kRun;
  if (r.ok()) {
    out = *r;
    if (out.lost) outcome = BurstOutcome::kLost;
  } else {
    outcome = r.status().code() == StatusCode::kResourceExhausted ? BurstOutcome::kRefused
                                                                  : BurstOutcome::kLost;
    spdlog::warn("msg=\"requested burst failed\" peer={} round={} error={}", order.node,
                 order.round, LogQuote(r.status().message()));
    out.SetPeer(order.node);
    out.transport = net::Transport::kTcpBw;
    out.dst_port = order.port;
    out.bytes = order.bytes;
    out.timestamp_ns = clock_.WallNanos();
    out.lost = true;
  }
  out.seq = order.round;  // the aggregator finds the round's results by it
  burst_requests_[static_cast<size_t>(outcome)]->Inc();
  queue_.TryPush(out);  // a full queue counts the drop itself
  if (!options_.own_batcher) {
    if (options_.request_batch) options_.request_batch();
    return;
  }
  {
    MutexLock lock(mu_);
    flush_ = true;
  }
  cv_.NotifyAll();
}

const std::string& ProbeScheduler::ProbeSource() const {
  static const std::string kAny;
  const std::string& a = options_.listen_address;
  return a.empty() || a == "0.0.0.0" || a == "::" ? kAny : a;
}

void ProbeScheduler::ApplyAllowedProbers(const v1::ProbePlan& plan) {
  if (!responder_) return;
  std::vector<std::string> allowed;
  if (!options_.responder_allow_any) {
    allowed.reserve(static_cast<size_t>(plan.allowed_probers_size()));
    GuardedPlan bad;
    const size_t kAddress = static_cast<size_t>(net::PlanSkip::kAddress);
    for (const std::string& a : plan.allowed_probers()) {
      if (net::ParseAddress(a, 0).ok()) {
        allowed.push_back(a);
      } else if (bad.skipped[kAddress]++ == 0) {
        bad.example[kAddress] = "allowed prober " + a.substr(0, 64);
      }
    }
    ReportGuard(plan.version(), bad);
  }
  // Cannot fail: every address parsed above.
  (void)responder_->SetAllowedPeers(allowed, options_.allowed_probers_grace);
}

void ProbeScheduler::ReportGuard(uint64_t version, const GuardedPlan& g) {
  // A cause seen again within this window is counted but not logged: an aggregator that keeps
  // sending the same bad entry must not flood the journal.
  constexpr int64_t kLogEveryNs = 60'000'000'000;
  const int64_t now = clock_.MonotonicNanos();
  auto due = [&](int64_t& last) {
    if (last != 0 && now - last < kLogEveryNs) return false;
    last = now;
    return true;
  };
  for (size_t i = 0; i < net::kPlanSkipCount; ++i) {
    if (g.skipped[i] == 0) continue;
    plan_skipped_[i]->Inc(g.skipped[i]);
    if (due(skip_logged_ns_[i])) {
      spdlog::warn(
          "msg=\"probe plan entries skipped; the rest of the plan applies\" version={} reason={} "
          "count={} first={}",
          version, net::PlanSkipName(static_cast<net::PlanSkip>(i)), g.skipped[i],
          LogQuote(g.example[i]));
    }
  }
  bool logged = false;
  for (size_t i = 0; i < kPlanTrimCount; ++i) {
    if (!g.trimmed[i]) continue;
    plan_trimmed_[i]->Inc();
    if (due(trim_logged_ns_[i]) && !logged) {
      logged = true;  // one line names every ceiling this plan met
      spdlog::warn("msg=\"probe plan trimmed to the local ceilings\" version={} trimmed={}",
                   version, LogQuote(g.trim_detail));
    }
  }
}

void ProbeScheduler::NoteCpuPressure(const net::BandwidthProbe& probe, const net::ProbeResult& r) {
  if (r.lost || r.cpu_pressure_permille != 0) return;
  cpu_pressure_unmeasured_.Inc();
  if (cpu_pressure_logged_) return;
  cpu_pressure_logged_ = true;  // once: a kernel without PSI would say so on every burst
  const CpuPressureMeter& m = probe.pressure_meter();
  const char* reason = m.pressure_absent() ? "no /proc/pressure/cpu (kernel before 4.20, or psi=0)"
                       : m.failures() > 0  ? "a reading failed"
                                           : "the burst was too short to measure";
  spdlog::warn(
      "msg=\"bandwidth bursts report no CPU pressure\" reason={} detail=\"low bursts of a "
      "contended host can then be set aside only by their CPU busy share; counted in "
      "fabricwatch_probe_cpu_pressure_unmeasured_total\"",
      LogQuote(reason));
}

void ProbeScheduler::Publish(const net::ProbeResult& r) {
  int t = static_cast<int>(r.transport);
  if (t < 0 || t >= 6) return;
  sent_[t]->Inc();
  if (r.lost) {
    lost_[t]->Inc();
  } else if (r.transport != net::Transport::kTcpBw && r.transport != net::Transport::kRdmaRc) {
    // Bursts (tcp_bw, rdma_rc) have a goodput, no round trip; a UDP reply read deferred without
    // a receive stamp has none either (rtt_ns 0).
    if (r.rtt_ns > 0) rtt_[t]->Observe(static_cast<double>(r.rtt_ns) * 1e-9);
  }
  if (r.transport == net::Transport::kTcpBw && !r.lost) {
    goodput_.Set(r.goodput_bps);
    if (r.cpu_busy_permille != 0) burst_cpu_busy_.Set(r.cpu_busy_permille / 1000.0);
    if (r.cpu_pressure_permille != 0) burst_cpu_pressure_.Set(r.cpu_pressure_permille / 1000.0);
  }
}

void ProbeScheduler::BatchLoop() {
  auto last = BatchPacer::Clock::now();
  for (;;) {
    {
      MutexLock lock(mu_);
      // Wake early when the queue fills up, so a batch never waits past max_batch_results.
      while (!stopping_ && !flush_ && queue_.size() < options_.max_batch_results &&
             cv_.WaitUntil(mu_, BatchPacer::Due(last, pacer_.interval(), urgent_.load()))) {
      }
      flush_ = false;
      if (stopping_ && queue_.size() == 0) return;
    }
    last = BatchPacer::Clock::now();
    BatchNow();
  }
}

void ProbeScheduler::BatchNow() {
  MutexLock batch_lock(batch_mu_);
  urgent_.store(false);  // an urgent result pushed from here on asks for the next batch
  std::vector<net::ProbeResult>& results = batch_results_;
  std::unordered_map<std::string, uint32_t>& names = batch_names_;
  results.reserve(options_.max_batch_results);
  for (;;) {
    results.clear();
    queue_.PopBatch(results, options_.max_batch_results);
    if (results.empty()) return;
    // Columns (ProbeBatch.columns): each peer name once, no sub-message per result. The
    // aggregator parses this several times faster than one ProbeResult message each.
    v1::ProbeBatch batch;
    v1::ProbeColumns& c = *batch.mutable_columns();
    const int n = static_cast<int>(results.size());
    c.mutable_peer()->Reserve(n);
    c.mutable_transport()->Reserve(n);
    c.mutable_src_port()->Reserve(n);
    c.mutable_dst_port()->Reserve(n);
    c.mutable_flow_id()->Reserve(n);
    c.mutable_probe_seq()->Reserve(n);
    c.mutable_lost()->Reserve(n);
    c.mutable_rtt_ns()->Reserve(n);
    c.mutable_bytes()->Reserve(n);
    c.mutable_goodput_bps()->Reserve(n);
    c.mutable_sent_unix_ns_delta()->Reserve(n);
    names.clear();
    auto name_index = [&](std::string_view name) FW_REQUIRES(batch_mu_) {
      auto [it, added] = names.try_emplace(std::string(name), c.name_lengths_size());
      if (added) {
        c.mutable_names()->append(name);
        c.add_name_lengths(static_cast<uint32_t>(name.size()));
      }
      return it->second;
    };
    // NIC columns only when some result names a NIC (an agent without --probe-nics sends none).
    const bool nic_columns = std::any_of(results.begin(), results.end(), [](const auto& r) {
      return r.src_nic != 0 || r.dst_nic != 0;
    });
    if (nic_columns) {
      MutexLock nic_lock(nic_names_mu_);
      for (const net::ProbeResult& r : results) {
        c.add_src_nic(name_index(r.src_nic < nic_names_.size() ? nic_names_[r.src_nic] : ""));
        c.add_dst_nic(name_index(r.dst_nic < nic_names_.size() ? nic_names_[r.dst_nic] : ""));
      }
    }
    // CPU columns only when some burst measured its host's CPU (most batches carry none).
    if (std::any_of(results.begin(), results.end(),
                    [](const auto& r) { return r.cpu_busy_permille != 0; })) {
      for (const net::ProbeResult& r : results) {
        c.add_cpu_busy_permille(r.cpu_busy_permille);
        c.add_cpu_peak_permille(r.cpu_peak_permille);
      }
    }
    if (std::any_of(results.begin(), results.end(),
                    [](const auto& r) { return r.cpu_pressure_permille != 0; })) {
      for (const net::ProbeResult& r : results) {
        c.add_cpu_pressure_permille(r.cpu_pressure_permille);
      }
    }
    // A late column only when some row takes a loss back (ProbeResult::late).
    if (std::any_of(results.begin(), results.end(), [](const auto& r) { return r.late; })) {
      for (const net::ProbeResult& r : results) c.add_late(r.late);
    }
    int64_t prev_sent = 0;
    for (const net::ProbeResult& r : results) {
      if (!r.late) Publish(r);  // the probe was counted sent and lost already
      c.add_peer(name_index(r.PeerName()));
      c.add_transport(ToWire(r.transport));
      c.add_src_port(r.src_port);
      c.add_dst_port(r.dst_port);
      c.add_flow_id(r.flow_id);
      c.add_probe_seq(r.seq);
      c.add_lost(r.lost);
      c.add_rtt_ns(r.lost ? 0 : static_cast<uint64_t>(std::max<int64_t>(0, r.rtt_ns)));
      c.add_bytes(r.bytes);
      c.add_goodput_bps(r.goodput_bps);
      // Wrapping arithmetic: the receiver adds the deltas back up the same way.
      c.add_sent_unix_ns_delta(static_cast<int64_t>(static_cast<uint64_t>(r.timestamp_ns) -
                                                    static_cast<uint64_t>(prev_sent)));
      prev_sent = r.timestamp_ns;
    }
    buffer_.Push(std::move(batch));
    if (notify_) notify_();
  }
}

void ProbeScheduler::StartBursts() {
  // The previous run has ended (bursts_running_ was false): joining it does not wait.
  if (bursts_.joinable()) bursts_.join();
  bursts_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "fw-sched-burst");
    BurstLoop();
  });
}

void ProbeScheduler::BurstLoop() {
  for (;;) {
    std::optional<net::TcpTarget> due_bw;
    std::pair<uint16_t, uint16_t> bw_nics;
    std::vector<BurstOrder> requested;
    uint64_t bw_bytes = 0;
    {
      MutexLock lock(mu_);
      if (!stopping_) {
        requested.assign(std::make_move_iterator(pending_bursts_.begin()),
                         std::make_move_iterator(pending_bursts_.end()));
        pending_bursts_.clear();
        const int64_t now = clock_.MonotonicNanos();
        for (SlowTarget& t : slow_targets_) {
          // One burst at a time: bursts to different peers must not overlap. Requested bursts
          // own the NIC while a plan carries them: the periodic ones wait.
          if (!due_bw && t.bandwidth && now >= t.next_bandwidth_ns && !plan_has_bursts_) {
            due_bw = net::TcpTarget{t.node, t.address, t.port, t.source};
            bw_nics = {t.src_nic, t.dst_nic};
            t.next_bandwidth_ns = now + static_cast<int64_t>(bandwidth_interval_s_ * 1e9);
          }
        }
        bw_bytes = bandwidth_bytes_;
      }
      if (requested.empty() && !due_bw) {
        bursts_running_ = false;
        break;
      }
    }
    // Requested bursts first: the aggregator waits for them to end its round.
    for (const BurstOrder& o : requested) RunRequestedBurst(*bandwidth_, o);
    if (due_bw) {
      net::BandwidthOptions bo;
      bo.bytes = bw_bytes;
      auto r = bandwidth_->Run(*due_bw, bo);
      cpu_read_errors_.Set(static_cast<double>(bandwidth_->cpu_read_failures()));
      if (r.ok()) NoteCpuPressure(*bandwidth_, *r);
      if (!r.ok()) {
        // A burst refused by the budget is counted by the budget itself.
        if (r.status().code() != StatusCode::kResourceExhausted) probe_errors_.Inc();
      } else {
        std::tie(r->src_nic, r->dst_nic) = bw_nics;
        queue_.TryPush(*r);
      }
    }
  }
  // What fell due while this ran (and the next periodic burst's time) is the guest's again.
  connect_->Wake();
}

Status ProbeScheduler::StartProbers() {
  net::UdpProberOptions base;
  base.key = options_.key;
  base.src_port_base = static_cast<uint16_t>(options_.source_port_base);
  base.busy_poll.max_window_ns = options_.busy_poll_ns;
  base.align_send_slots = options_.send_slot_phase_ns >= 0;
  base.send_slot_phase_ns = std::max<int64_t>(0, options_.send_slot_phase_ns);
  base.send_slots = std::max<uint32_t>(1, options_.send_slots);
  base.reply_reads = options_.reply_reads;
  base.kernel_tx_timestamps = options_.kernel_tx_timestamps;
  if (options_.nics.empty()) {
    net::UdpProberOptions uo = base;
    // Probes leave from the probe address (when it is one), so that the peers' allow lists,
    // which hold it, admit them whichever interface the route to a peer takes.
    if (const std::string& src = ProbeSource(); !src.empty()) {
      (src.find(':') == std::string::npos ? uo.bind_address_v4 : uo.bind_address_v6) = src;
    }
    auto udp = net::UdpProber::Start(uo, clock_, queue_, budget_.get());
    if (!udp.ok()) return udp.status();
    udp_.push_back({FabricNic{}, 0, std::move(*udp)});
    nics_probing_.Set(1);
    return Status::Ok();
  }
  std::string failures;
  for (FabricNic nic : options_.nics) {
    NicState state{nic.name, nic.address, false, ""};
    Status s = nic.address.empty()
                   ? Status::NotFound(nic.skip_reason.empty() ? "no address" : nic.skip_reason)
                   : CheckNicSocket(nic);
    const char* reason = nic.address.empty() ? "no_address" : "bind";
    if (s.ok()) {
      net::UdpProberOptions uo = base;
      (nic.address.find(':') == std::string::npos ? uo.bind_address_v4 : uo.bind_address_v6) =
          nic.address;
      uo.bind_device = nic.device;
      auto udp = net::UdpProber::Start(uo, clock_, queue_, budget_.get());
      if (udp.ok()) {
        state.probing = true;
        const uint16_t id = NicId(nic.name);
        spdlog::info("msg=\"fabric nic: probing\" nic={} address={} device={}", nic.name,
                     nic.address, nic.device.empty() ? "-" : nic.device);
        udp_.push_back({std::move(nic), id, std::move(*udp)});
      } else {
        s = udp.status();
      }
    }
    if (!state.probing) {
      state.reason = std::string(reason) + ": " + s.message();
      nic_setup_failures_.WithLabels({reason}).Inc();
      spdlog::warn("msg=\"fabric nic skipped; the other NICs probe\" nic={} reason={}", state.name,
                   LogQuote(state.reason));
      failures += (failures.empty() ? "" : "; ") + state.name + ": " + state.reason;
    }
    nic_states_.push_back(std::move(state));
  }
  nics_probing_.Set(static_cast<double>(udp_.size()));
  if (udp_.empty()) {
    return Status::FailedPrecondition("no fabric NIC can be probed from (" + failures + ")");
  }
  return Status::Ok();
}

uint16_t ProbeScheduler::NicId(const std::string& name) {
  if (name.empty()) return 0;
  MutexLock lock(nic_names_mu_);
  if (auto it = nic_ids_.find(name); it != nic_ids_.end()) return it->second;
  if (nic_names_.size() >= kMaxNicNames) return 0;  // unnamed rather than unbounded
  const auto id = static_cast<uint16_t>(nic_names_.size());
  nic_names_.push_back(name);
  nic_ids_.emplace(name, id);
  return id;
}

size_t ProbeScheduler::ProberFor(const v1::PlannedPeer& p) const {
  for (size_t i = 0; i < udp_.size(); ++i) {
    if (!p.src_nic().empty() && udp_[i].nic.name == p.src_nic()) return i;
  }
  return 0;
}

uint64_t ProbeScheduler::UdpProbesSent() const {
  uint64_t n = 0;
  for (const NicProber& p : udp_) n += p.udp->Stats().sent;
  return n;
}

uint64_t ProbeScheduler::UdpProbesSent(size_t i) const {
  return i < udp_.size() ? udp_[i].udp->Stats().sent : 0;
}

std::vector<uint16_t> ProbeScheduler::UdpSourcePorts(size_t i) const {
  return i < udp_.size() ? udp_[i].udp->SourcePorts() : std::vector<uint16_t>{};
}

void ProbeScheduler::RefreshStats() {
  if (!udp_.empty()) {
    net::UdpProberStats s;
    for (const NicProber& p : udp_) {
      const net::UdpProberStats one = p.udp->Stats();
      s.late += one.late;
      s.retracted += one.retracted;
      s.rx_queue_drops += one.rx_queue_drops;
      for (size_t i = 0; i < net::kPlanSkipCount; ++i) s.plan_skipped[i] += one.plan_skipped[i];
      for (size_t i = 0; i < net::kDropReasonCount; ++i) s.dropped[i] += one.dropped[i];
    }
    // GuardPlan checks everything else the prober would skip; only the socket cause is its own.
    constexpr size_t kSocket = static_cast<size_t>(net::PlanSkip::kSocket);
    plan_skipped_[kSocket]->Set(static_cast<double>(s.plan_skipped[kSocket]));
    late_replies_.Set(static_cast<double>(s.late));
    losses_taken_back_.Set(static_cast<double>(s.retracted));
    receive_drops_.Set(static_cast<double>(s.rx_queue_drops));
    for (size_t i = 1; i < net::kDropReasonCount; ++i) {
      if (s.dropped[i] == 0) continue;
      malformed_replies_
          .WithLabels({std::string(net::DropReasonName(static_cast<net::DropReason>(i)))})
          .Set(static_cast<double>(s.dropped[i]));
    }
  }
  if (responder_) {
    net::ResponderStats s = responder_->Stats();
    responder_requests_.Set(static_cast<double>(s.udp_requests));
    responder_bytes_in_.Set(static_cast<double>(s.bytes_in));
    responder_bytes_out_.Set(static_cast<double>(s.bytes_out));
    for (size_t i = 0; i < net::kResponderDropCount; ++i) {
      if (s.dropped[i] == 0) continue;
      responder_dropped_
          .WithLabels({std::string(net::ResponderDropName(static_cast<net::ResponderDrop>(i)))})
          .Set(static_cast<double>(s.dropped[i]));
    }
  }
  if (budget_) budget_rejected_.Set(static_cast<double>(budget_->rejected()));
  queue_dropped_.Set(static_cast<double>(queue_.dropped()));
}

}  // namespace fw::agent
