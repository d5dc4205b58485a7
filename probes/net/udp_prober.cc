// UDP prober thread: plan switching, send slots, batched receive with kernel timestamps, timeouts.
#include "probes/net/udp_prober.h"

#include <linux/errqueue.h>
#include <linux/net_tstamp.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/log.h"
#include "common/mutex.h"
#include "probes/net/probe_timeout.h"
#include "probes/net/socket_util.h"

namespace fw::net {
namespace {

constexpr size_t kRxBatch = 64;
constexpr uint32_t kWakeTag = UINT32_MAX;
// Epoll tag of a guest's descriptor: this bit and the descriptor (below 2^30). Socket tags are
// indexes into sockets_, far below it.
constexpr uint32_t kGuestTag = 1u << 30;
constexpr size_t kIpUdpOverhead = 28;  // IPv4 + UDP headers, for the byte budget
// What one queued small datagram is charged against a socket's receive buffer (its skb's
// truesize), taken high: NIC drivers that receive into 2 KiB buffers charge that much; loopback
// about half.
constexpr int64_t kQueuedDatagramBytes = 2048;
// The most receive buffer deferred reads ask of a socket (the kernel doubles what is asked, and
// caps it at net.core.rmem_max unless the process may force it).
constexpr int64_t kMaxDeferredRcvbuf = 4 << 20;

enum class SlotState : uint8_t { kFree, kOutstanding, kAnswered, kLost };

struct Pending {
  uint64_t seq = 0;
  int64_t send_mono = 0;
  int64_t tx_real = 0;  // kernel software TX timestamp (CLOCK_REALTIME), 0 until read back
  int64_t send_wall = 0;
  int64_t wait_ns = 0;  // how long this probe waits for its echo (the flow's timeout when sent)
  uint64_t window = 0;  // the busy-poll window (send slot serial) this probe was sent in
  SlotState state = SlotState::kFree;
};

struct Flow {
  size_t sock = 0;  // index into sockets_
  SocketAddress dst;
  uint32_t wire_id = 0;
  uint64_t next_seq = 0;
  uint64_t oldest = 0;  // lowest seq that may still be outstanding
  int64_t timeout_ns = 0;  // a probe of this flow unanswered this long is lost
  // With the plan's timeout floor: the flow's round trip, and from it each probe's wait in
  // [floor, timeout_ns]. Kept across plans for the same destination and socket (the same 5-tuple).
  ProbeTimeout rto;
  std::vector<Pending> ring;
  std::vector<uint8_t> tx;      // the packet; only the header changes per probe
  ProbeResult result_template;  // peer, ports, flow id, bytes filled in once
};

// The flows of one rate: their period cut into send slots, and when the next slot goes.
struct RateSchedule {
  int64_t period_ns = 0;
  int64_t step_ns = 1;                       // period_ns / slots
  std::vector<std::vector<uint32_t>> slots;  // flow indexes per send slot
  uint32_t next_slot = 0;
  int64_t next_time = 0;  // CLOCK_MONOTONIC (of clock_)
};

struct Sock {
  Fd fd;
  int family = AF_INET;
  uint16_t port = 0;
  uint32_t drops_seen = 0;  // the kernel's drop count (SO_RXQ_OVFL) last read on this socket
  // One per peer: a peer's flow j is on socket j and in one slot of one schedule (its own rate's,
  // whether or not the peer's flows run at several), so a batch (the slots of every schedule due
  // at one wakeup) holds at most one probe per peer.
  std::vector<mmsghdr> tx_msgs;
  std::vector<iovec> tx_iov;
  std::vector<uint32_t> tx_flows;  // flow index of each queued message
  size_t tx_count = 0;
};

int64_t ReadClock(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// CLOCK_REALTIME minus CLOCK_MONOTONIC, sampled with the realtime read bracketed by two monotonic
// reads; the midpoint bounds the sampling error by half the bracket (tens of ns).
int64_t RealtimeMinusMonotonic() {
  int64_t m1 = ReadClock(CLOCK_MONOTONIC);
  int64_t r = ReadClock(CLOCK_REALTIME);
  int64_t m2 = ReadClock(CLOCK_MONOTONIC);
  return r - (m1 + (m2 - m1) / 2);
}

}  // namespace

// Owned by the prober thread, except what is marked as shared.
class UdpProber::Loop {
 public:
  Loop(UdpProberOptions options, const Clock& clock, ResultQueue& results, ProbeBudget* budget)
      : options_(std::move(options)),
        clock_(clock),
        real_clock_(&clock == &RealClock::Get()),
        // Deferred reads time a reply by its kernel receive stamp, which needs both.
        deferred_(options_.reply_reads == ReplyReads::kDeferred && real_clock_ &&
                  options_.kernel_rx_timestamps),
        results_(results),
        budget_(budget),
        busy_poll_(options_.busy_poll, clock.MonotonicNanos()) {
    if (options_.key) key_.emplace(*options_.key);
  }

  Status Open();
  void Run();
  Status Submit(UdpProbePlan plan);
  void RequestStop();
  UdpProberStats Snapshot() const;
  std::vector<uint16_t> Ports() const {
    MutexLock lock(mu_);
    return ports_;
  }
  // Runs `fn` on the prober's thread at its next wakeup and returns its status; FailedPrecondition
  // when the thread is stopping or gone (then `fn` never runs).
  Status CallOnThread(std::function<Status()> fn);
  Status AttachGuest(LoopGuest* guest);  // the prober's thread
  void DetachGuest(LoopGuest* guest);    // the prober's thread

 private:
  static constexpr auto kRelaxed = std::memory_order_relaxed;
  void Wake();
  Status Apply(const UdpProbePlan& plan);
  StatusOr<size_t> SocketFor(int family, uint32_t j);
  // Sends the due send slot of every schedule whose slot time has come, in one batch per socket,
  // and moves each one's schedule on.
  void SendDueSlots(int64_t now);
  // Queues the probes of one slot's flows into their sockets' batches.
  void QueueSlot(const std::vector<uint32_t>& slot, int64_t wall);
  // `events`: what epoll reported for the socket (EPOLLERR: its error queue holds TX stamps).
  void Receive(size_t sock_index, uint32_t events);
  // Deferred reads: reads every socket that holds replies or TX stamps (one zero-timeout epoll on
  // the socket set the thread does not sleep on).
  void ReadDeferred();
  // Deferred reads end (a reply came without a receive stamp): the sockets move into the set the
  // thread sleeps on, and every reply is read at once from then on.
  void StopDeferring();
  // Deferred reads: each socket's receive buffer holds the replies and TX stamps of the probes it
  // sends in one turn, twice over (the plan's busiest turn, every schedule due together).
  void SizeReceiveBuffers();
  // The kernel's receive stamp of a reply (CLOCK_REALTIME ns, 0 without one); counts the drops
  // the kernel reports with it (SO_RXQ_OVFL).
  int64_t ReadRxCmsgs(size_t sock_index, const msghdr& h);
  // Reads software TX timestamps off the socket's error queue into the pending probes.
  void DrainTxStamps(size_t sock_index);
  void HandleReply(size_t sock_index, const mmsghdr& m, const uint8_t* data, int64_t offset,
                   int64_t now_mono);
  // rtt_ns: the user-space round trip; kernel_rtt_ns: the kernel-stamped one, or 0.
  void Resolve(Flow& f, Pending& p, bool lost, int64_t rtt_ns, int64_t kernel_rtt_ns);
  // Spins on the sockets (epoll, zero timeout) after a send slot until every probe of the slot is
  // answered, the window closes, or a plan or stop request arrives.
  void BusyPoll();
  void ExpireTimeouts(int64_t now);
  int64_t NextDeadline() const;
  // Runs the calls other threads posted (CallOnThread).
  void RunCalls();
  // Calls OnReady for the guest descriptors this turn reported.
  void GuestInput(const epoll_event* events, int n);
  // Calls Service for every guest that was ready this turn or whose deadline passed.
  void ServiceGuests();
  // The earliest guest deadline, CLOCK_MONOTONIC (INT64_MAX: none).
  int64_t NextGuestDeadline() const;

  const UdpProberOptions options_;
  const Clock& clock_;
  const bool real_clock_;
  bool deferred_;  // replies read deferred (ReplyReads::kDeferred in effect); thread-owned
  ResultQueue& results_;
  ProbeBudget* const budget_;
  std::optional<HmacSha256> key_;
  BusyPollPolicy busy_poll_;

  Fd epoll_fd_, wake_fd_;
  // Deferred reads: the probe sockets, watched here instead of in epoll_fd_ (which the thread
  // sleeps on), so that a reply or TX stamp wakes no one.
  Fd reply_epoll_fd_;
  std::atomic<bool> stopping_{false};

  // Shared with SetPlan callers: the handoff of a new plan and its outcome.
  mutable Mutex mu_;
  CondVar applied_cv_;
  std::optional<UdpProbePlan> pending_plan_ FW_GUARDED_BY(mu_);
  uint64_t submitted_ FW_GUARDED_BY(mu_) = 0;
  uint64_t applied_ FW_GUARDED_BY(mu_) = 0;
  Status apply_status_ FW_GUARDED_BY(mu_);
  std::vector<uint16_t> ports_ FW_GUARDED_BY(mu_);
  struct Call {
    std::function<Status()> fn;
    Status status;
    bool done = false;
  };
  std::deque<std::shared_ptr<Call>> calls_ FW_GUARDED_BY(mu_);
  bool exited_ FW_GUARDED_BY(mu_) = false;  // the thread has left Run(): no call runs any more

  struct Guest {
    LoopGuest* guest = nullptr;
    std::vector<int> fds;
    int64_t deadline = INT64_MAX;  // CLOCK_MONOTONIC
    bool ready = false;            // a descriptor was reported this turn
  };
  std::vector<Guest> guests_;  // thread-owned

  // Thread-owned state.
  std::vector<Sock> sockets_;
  std::vector<std::vector<size_t>> by_family_{2};  // [v4|v6][j] -> index into sockets_
  std::vector<Flow> flows_;
  std::vector<RateSchedule> schedules_;  // one per distinct rate of the plan
  uint32_t generation_ = 0;
  int64_t timeout_floor_ns_ = 0;  // the plan's UdpProbePlan::timeout_floor_ns
  int64_t next_send_time_ = 0;  // the earliest next_time of schedules_
  // The first slot time at or after `mono` on the wall clock's grid of slot length `step`
  // (UdpProberOptions::align_send_slots), or `mono` itself without alignment.
  int64_t SlotAtOrAfter(int64_t mono, int64_t step) const;
  std::vector<uint8_t> rx_buffers_;
  size_t rx_buffer_size_ = 0;
  size_t packet_len_ = 0;  // every probe of the current plan has this size
  int last_send_errno_ = 0;
  // When each plan-entry skip cause was last logged.
  std::array<int64_t, kPlanSkipCount> skip_logged_ns_{};
  uint64_t window_serial_ = 0;       // serial of the latest send slot
  uint32_t window_outstanding_ = 0;  // probes of that slot sent and not yet answered
  bool in_window_ = false;           // inside BusyPoll()
  std::array<mmsghdr, kRxBatch> rx_msgs_{};
  std::array<iovec, kRxBatch> rx_iov_{};
  std::array<sockaddr_storage, kRxBatch> rx_addr_{};
  // Room for SCM_TIMESTAMPNS on replies, and for SCM_TIMESTAMPING plus IP(V6)_RECVERR with its
  // offender address on error-queue stamps; too small a buffer shows up as MSG_CTRUNC.
  // Room for SO_RXQ_OVFL's drop count too.
  static constexpr size_t kCmsgSpace =
      CMSG_SPACE(sizeof(scm_timestamping)) +
      CMSG_SPACE(sizeof(sock_extended_err) + sizeof(sockaddr_in6)) + CMSG_SPACE(sizeof(timespec)) +
      CMSG_SPACE(sizeof(uint32_t));
  struct alignas(cmsghdr) CmsgBuffer {
    uint8_t bytes[kCmsgSpace];
  };
  std::array<CmsgBuffer, kRxBatch> rx_cmsg_{};

  int64_t drops_logged_ns_ = 0;  // when receive-queue drops were last logged
  bool rcvbuf_warned_ = false;    // a socket got less receive buffer than deferred reads want
  std::atomic<uint64_t> rx_unstamped_deferred_{0}, rx_queue_drops_{0}, reply_reads_deferred_{0};
  std::atomic<uint64_t> sent_{0}, answered_{0}, lost_{0}, late_{0}, retracted_{0}, duplicate_{0},
      stray_{0},
      budget_skipped_{0}, send_errors_{0}, rx_kernel_ts_{0}, tx_kernel_ts_{0}, rx_user_ts_{0},
      abandoned_{0}, plans_applied_{0}, wakeups_{0}, busy_polls_{0}, busy_poll_ns_{0},
      busy_poll_hits_{0}, busy_poll_timeouts_{0}, busy_poll_skipped_{0}, planned_peers_{0};
  std::array<std::atomic<uint64_t>, kDropReasonCount> dropped_{};
  std::array<std::atomic<uint64_t>, kPlanSkipCount> plan_skipped_{};
};

Status UdpProber::Loop::Open() {
  if (options_.send_slots == 0) return Status::InvalidArgument("send_slots must be >= 1");
  epoll_fd_.Reset(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd_.valid()) return ErrnoStatus("epoll_create1", errno);
  wake_fd_.Reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd_.valid()) return ErrnoStatus("eventfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = kWakeTag;
  if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev) != 0) {
    return ErrnoStatus("epoll_ctl(eventfd)", errno);
  }
  if (options_.reply_reads == ReplyReads::kDeferred && !deferred_) {
    SPDLOG_WARN(
        "component=udp_prober msg=\"deferred reply reads need the real clock and kernel receive "
        "stamps; replies are read immediately\"");
  }
  if (!(options_.deferred_expiry_slack >= 0 && options_.deferred_expiry_slack <= 1)) {
    return Status::InvalidArgument("deferred_expiry_slack must be in [0, 1]");
  }
  if (deferred_) {
    if (options_.busy_poll.max_window_ns > 0) {
      return Status::InvalidArgument("deferred reply reads do not busy-poll: set one or the other");
    }
    reply_epoll_fd_.Reset(epoll_create1(EPOLL_CLOEXEC));
    if (!reply_epoll_fd_.valid()) return ErrnoStatus("epoll_create1(replies)", errno);
  }
  reply_reads_deferred_.store(deferred_ ? 1 : 0, kRelaxed);
  return Status::Ok();
}

void UdpProber::Loop::Wake() {
  uint64_t one = 1;
  if (write(wake_fd_.get(), &one, sizeof one) != sizeof one) {
    SPDLOG_WARN("component=udp_prober msg=\"wake eventfd write failed\" error={}",
                std::strerror(errno));
  }
}

void UdpProber::Loop::RequestStop() {
  stopping_ = true;
  Wake();
}

Status UdpProber::Loop::CallOnThread(std::function<Status()> fn) {
  auto call = std::make_shared<Call>();
  call->fn = std::move(fn);
  MutexLock lock(mu_);
  if (!exited_ && !stopping_.load()) {
    calls_.push_back(call);
    lock.Unlock();
    Wake();
    lock.Lock();
  }
  // Stopping: wait until the thread is gone, so that a caller detaching a guest knows the thread
  // is no longer inside it.
  while (!call->done && !exited_) applied_cv_.Wait(mu_);
  if (!call->done) return Status::FailedPrecondition("the UDP prober is stopping");
  return call->status;
}

void UdpProber::Loop::RunCalls() {
  for (;;) {
    std::shared_ptr<Call> call;
    {
      MutexLock lock(mu_);
      if (calls_.empty()) return;
      call = std::move(calls_.front());
      calls_.pop_front();
    }
    Status s = call->fn();
    MutexLock lock(mu_);
    call->status = std::move(s);
    call->done = true;
    applied_cv_.NotifyAll();
  }
}

Status UdpProber::Loop::AttachGuest(LoopGuest* guest) {
  Guest g;
  g.guest = guest;
  g.fds = guest->WatchedFds();
  for (size_t i = 0; i < g.fds.size(); ++i) {
    const int fd = g.fds[i];
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = kGuestTag | static_cast<uint32_t>(fd);
    if (fd < 0 || static_cast<uint32_t>(fd) >= kGuestTag ||
        epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      const Status s = fd < 0 ? Status::InvalidArgument("guest descriptor < 0")
                              : ErrnoStatus("epoll_ctl(guest)", errno);
      for (size_t k = 0; k < i; ++k) epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, g.fds[k], nullptr);
      return s;
    }
  }
  g.deadline = guest->Service(ReadClock(CLOCK_MONOTONIC));
  guests_.push_back(std::move(g));
  return Status::Ok();
}

void UdpProber::Loop::DetachGuest(LoopGuest* guest) {
  for (size_t i = 0; i < guests_.size(); ++i) {
    if (guests_[i].guest != guest) continue;
    for (int fd : guests_[i].fds) epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
    guests_.erase(guests_.begin() + static_cast<std::ptrdiff_t>(i));
    return;
  }
}

void UdpProber::Loop::GuestInput(const epoll_event* events, int n) {
  if (guests_.empty()) return;
  for (int i = 0; i < n; ++i) {
    const uint32_t tag = events[i].data.u32;
    if (tag == kWakeTag || !(tag & kGuestTag)) continue;
    const int fd = static_cast<int>(tag & ~kGuestTag);
    for (Guest& g : guests_) {
      if (std::find(g.fds.begin(), g.fds.end(), fd) == g.fds.end()) continue;
      g.guest->OnReady(fd);
      g.ready = true;
      break;
    }
  }
}

void UdpProber::Loop::ServiceGuests() {
  if (guests_.empty()) return;
  const int64_t now = ReadClock(CLOCK_MONOTONIC);
  for (Guest& g : guests_) {
    if (!g.ready && now < g.deadline) continue;
    g.ready = false;
    g.deadline = g.guest->Service(now);
  }
}

int64_t UdpProber::Loop::NextGuestDeadline() const {
  int64_t next = INT64_MAX;
  for (const Guest& g : guests_) next = std::min(next, g.deadline);
  return next;
}

Status UdpProber::Loop::Submit(UdpProbePlan plan) {
  MutexLock lock(mu_);
  uint64_t ticket = ++submitted_;
  pending_plan_ = std::move(plan);
  lock.Unlock();
  Wake();
  lock.Lock();
  while (applied_ < ticket && !stopping_.load()) applied_cv_.Wait(mu_);
  if (applied_ < ticket) return Status::FailedPrecondition("the UDP prober is stopping");
  return applied_ == ticket ? apply_status_ : Status::Ok();
}

StatusOr<size_t> UdpProber::Loop::SocketFor(int family, uint32_t j) {
  std::vector<size_t>& pool = by_family_[family == AF_INET6 ? 1 : 0];
  while (pool.size() <= j) {
    uint32_t index = static_cast<uint32_t>(pool.size());
    uint16_t port =
        options_.src_port_base ? static_cast<uint16_t>(options_.src_port_base + index) : 0;
    StatusOr<SocketAddress> bind_addr = ParseAddress(
        family == AF_INET6 ? options_.bind_address_v6 : options_.bind_address_v4, port);
    if (!bind_addr.ok()) return bind_addr.status();
    Sock s;
    s.family = family;
    s.fd.Reset(socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!s.fd.valid()) return ErrnoStatus("socket(UDP)", errno);
    if (options_.kernel_rx_timestamps) {
      int one = 1;
      if (setsockopt(s.fd.get(), SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) != 0) {
        return ErrnoStatus("setsockopt(SO_TIMESTAMPNS)", errno);
      }
      // TX stamps come back on the error queue with the sent packet (no OPT_TSONLY), so each
      // stamp is matched to its probe by the header it carries, not by counting sends.
      int flags = SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE;
      if (options_.kernel_tx_timestamps &&
          setsockopt(s.fd.get(), SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof flags) != 0) {
        return ErrnoStatus("setsockopt(SO_TIMESTAMPING)", errno);
      }
    }
    // The kernel's count of datagrams dropped on a full receive buffer rides on every later one.
    if (int one = 1; setsockopt(s.fd.get(), SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof one) != 0) {
      return ErrnoStatus("setsockopt(SO_RXQ_OVFL)", errno);
    }
    if (!options_.bind_device.empty() &&
        setsockopt(s.fd.get(), SOL_SOCKET, SO_BINDTODEVICE, options_.bind_device.c_str(),
                   static_cast<socklen_t>(options_.bind_device.size())) != 0) {
      return ErrnoStatus("setsockopt(SO_BINDTODEVICE " + options_.bind_device + ")", errno);
    }
    if (bind(s.fd.get(), bind_addr->get(), bind_addr->len) != 0) {
      return ErrnoStatus("bind probe source port " + bind_addr->ToString(), errno);
    }
    StatusOr<SocketAddress> local = LocalAddress(s.fd.get());
    if (!local.ok()) return local.status();
    s.port = local->port();
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(sockets_.size());
    const int set = deferred_ ? reply_epoll_fd_.get() : epoll_fd_.get();
    if (epoll_ctl(set, EPOLL_CTL_ADD, s.fd.get(), &ev) != 0) {
      return ErrnoStatus("epoll_ctl(probe socket)", errno);
    }
    pool.push_back(sockets_.size());
    sockets_.push_back(std::move(s));
  }
  return pool[j];
}

Status UdpProber::Loop::Apply(const UdpProbePlan& plan) {
  // Plan-wide settings first: a plan that fails here leaves the running one untouched.
  if (!(plan.rate_hz >= kUdpMinRateHz && plan.rate_hz <= kUdpMaxRateHz)) {
    return Status::InvalidArgument("rate_hz must be in [1e-6, 10000]");
  }
  if (plan.timeout_ns <= 0 || plan.timeout_ns > kUdpMaxTimeoutNs) {
    return Status::InvalidArgument("timeout must be in (0, 60 s]");
  }
  if (plan.timeout_floor_ns < 0 || plan.timeout_floor_ns > kUdpMaxTimeoutNs) {
    return Status::InvalidArgument("timeout floor must be in [0, 60 s]");
  }
  if (plan.payload_bytes > kMaxEchoPayload) {
    return Status::InvalidArgument("payload_bytes must be <= " + std::to_string(kMaxEchoPayload));
  }

  // Then peer by peer: one the prober cannot use is skipped, the others are probed.
  std::array<uint64_t, kPlanSkipCount> skipped{};
  std::array<std::string, kPlanSkipCount> example;  // the first skipped peer of each cause
  auto skip = [&](PlanSkip why, const PeerTarget& p, std::string detail) {
    const size_t i = static_cast<size_t>(why);
    if (skipped[i]++ == 0) example[i] = "peer '" + p.name + "' " + std::move(detail);
  };
  std::vector<Flow> flows;
  const uint32_t generation = generation_ + 1;
  const size_t packet_len = kHeaderSize + (key_ ? kMacSize : 0) + plan.payload_bytes;
  size_t peers = 0;
  std::vector<size_t> socks;
  std::vector<double> flow_rate;  // per flow
  for (const PeerTarget& p : plan.peers) {
    if (std::optional<PlanSkip> why = CheckPeer(p.name, p.address, p.port)) {
      skip(*why, p, "address '" + p.address + "' port " + std::to_string(p.port));
      continue;
    }
    const double rate = p.rate_hz == 0 ? plan.rate_hz : p.rate_hz;
    if (!(rate >= kUdpMinRateHz && rate <= kUdpMaxRateHz)) {  // NaN and infinity fail too
      skip(PlanSkip::kRate, p, "rate " + std::to_string(p.rate_hz) + "/s (1e-6..10000)");
      continue;
    }
    const bool per_flow = p.unraised_rate_hz != 0;  // NaN is per-flow, and fails below
    if (per_flow && !(p.unraised_rate_hz >= kUdpMinRateHz && p.unraised_rate_hz <= kUdpMaxRateHz)) {
      skip(PlanSkip::kRate, p,
           "unraised rate " + std::to_string(p.unraised_rate_hz) + "/s (1e-6..10000)");
      continue;
    }
    const int64_t timeout = p.timeout_ns == 0 ? plan.timeout_ns : p.timeout_ns;
    if (timeout <= 0 || timeout > kUdpMaxTimeoutNs) {
      skip(PlanSkip::kTimeout, p, "timeout " + std::to_string(p.timeout_ns) + " ns (0..60 s)");
      continue;
    }
    if (p.flows == 0 || p.flows > kUdpMaxFlowsPerPeer ||
        flows.size() + p.flows > kUdpMaxTotalFlows) {
      skip(PlanSkip::kFlows, p, std::to_string(p.flows) + " flows (1..64 each, 65535 in all)");
      continue;
    }
    const SocketAddress dst = *ParseAddress(p.address, p.port);
    socks.clear();
    Status sock_status;
    for (uint32_t j = 0; j < p.flows && sock_status.ok(); ++j) {
      StatusOr<size_t> sock = SocketFor(dst.family(), j);
      if (sock.ok())
        socks.push_back(*sock);
      else
        sock_status = sock.status();
    }
    if (!sock_status.ok()) {
      skip(PlanSkip::kSocket, p, sock_status.message());
      continue;
    }
    ++peers;
    for (uint32_t j = 0; j < p.flows; ++j) {
      const double own_rate =
          !per_flow || ((p.raised_flows >> j) & 1) != 0 ? rate : p.unraised_rate_hz;
      // Room for every probe that can be outstanding within the flow's timeout at its own rate.
      const size_t ring =
          static_cast<size_t>(std::ceil(own_rate * static_cast<double>(timeout) * 1e-9)) + 2;
      flow_rate.push_back(own_rate);
      Flow f;
      f.sock = socks[j];
      f.dst = dst;
      f.wire_id = ((generation & 0xffff) << 16) | static_cast<uint32_t>(flows.size());
      f.timeout_ns = timeout;
      f.ring.resize(ring);
      f.tx.assign(packet_len, 0);
      f.result_template.SetPeer(p.name);
      f.result_template.transport = Transport::kUdp;
      f.result_template.src_port = sockets_[socks[j]].port;
      f.result_template.dst_port = p.port;
      f.result_template.flow_id = j;
      f.result_template.src_nic = p.src_nic;
      f.result_template.dst_nic = p.dst_nic;
      f.result_template.bytes = packet_len;
      flows.push_back(std::move(f));
    }
  }
  const int64_t now = clock_.MonotonicNanos();
  for (size_t i = 0; i < kPlanSkipCount; ++i) {
    if (skipped[i] == 0) continue;
    plan_skipped_[i].fetch_add(skipped[i], kRelaxed);
    // One line per cause at most once a minute, never per probe; the counter has every one.
    if (skip_logged_ns_[i] != 0 && now - skip_logged_ns_[i] < 60'000'000'000) continue;
    skip_logged_ns_[i] = now;
    SPDLOG_WARN("component=udp_prober msg=\"plan entries skipped\" reason={} count={} first={}",
                PlanSkipName(static_cast<PlanSkip>(i)), skipped[i], LogQuote(example[i]));
  }
  planned_peers_.store(peers, kRelaxed);
  for (Sock& s : sockets_) {
    s.tx_msgs.assign(plan.peers.size(), mmsghdr{});
    s.tx_iov.assign(plan.peers.size(), iovec{});
    s.tx_flows.assign(plan.peers.size(), 0);
    s.tx_count = 0;
  }
  // Outstanding probes of the old plan are abandoned, not reported as lost.
  for (const Flow& f : flows_) {
    for (const Pending& p : f.ring)
      abandoned_.fetch_add(p.state == SlotState::kOutstanding, kRelaxed);
  }
  // Round-trip estimates carry over to the new plan's flows of the same 5-tuple (destination and
  // source socket): an escalation re-plans a pair without forgetting its flows' round trips.
  if (plan.timeout_floor_ns > 0 && !flows_.empty()) {
    std::unordered_map<std::string, const ProbeTimeout*> old;
    old.reserve(flows_.size());
    auto key = [](const Flow& f) {
      std::string k(reinterpret_cast<const char*>(f.dst.get()), f.dst.len);
      k.append(reinterpret_cast<const char*>(&f.sock), sizeof f.sock);
      return k;
    };
    for (const Flow& f : flows_) {
      if (f.rto.sampled()) old.emplace(key(f), &f.rto);
    }
    for (Flow& f : flows) {
      auto it = old.find(key(f));
      if (it != old.end()) f.rto = *it->second;
    }
  }
  timeout_floor_ns_ = plan.timeout_floor_ns;
  flows_ = std::move(flows);
  generation_ = generation;
  // One schedule per distinct rate, each cut into slots as a plan of that rate alone would be, so
  // a peer at another rate (an escalated pair) adds a schedule and leaves the other flows' send
  // instants where they were. Rates are exact, not rounded to a common tick.
  std::map<double, std::vector<uint32_t>> by_rate;
  for (uint32_t i = 0; i < flows_.size(); ++i) by_rate[flow_rate[i]].push_back(i);
  schedules_.clear();
  const int64_t apply_time = clock_.MonotonicNanos();
  next_send_time_ = INT64_MAX;
  for (auto& [rate, members] : by_rate) {
    RateSchedule r;
    r.period_ns = static_cast<int64_t>(1e9 / rate);
    const uint32_t slots = static_cast<uint32_t>(
        std::max<size_t>(1, std::min<size_t>(options_.send_slots, members.size())));
    r.slots.assign(slots, {});
    for (size_t k = 0; k < members.size(); ++k) r.slots[k % slots].push_back(members[k]);
    r.step_ns = std::max<int64_t>(r.period_ns / static_cast<int64_t>(slots), 1);
    r.next_time = SlotAtOrAfter(apply_time, r.step_ns);
    next_send_time_ = std::min(next_send_time_, r.next_time);
    schedules_.push_back(std::move(r));
  }
  packet_len_ = packet_len;
  if (deferred_) SizeReceiveBuffers();
  // Room to see (and reject) a longer reply, and for the headers an error-queue copy carries.
  rx_buffer_size_ = packet_len + 256;  // room to see (and reject) a longer datagram
  rx_buffers_.assign(kRxBatch * rx_buffer_size_, 0);
  for (size_t i = 0; i < kRxBatch; ++i) {
    rx_iov_[i] = {rx_buffers_.data() + i * rx_buffer_size_, rx_buffer_size_};
  }
  std::vector<uint16_t> ports;
  for (const Sock& s : sockets_) ports.push_back(s.port);
  {
    MutexLock lock(mu_);
    ports_ = std::move(ports);
  }
  plans_applied_.fetch_add(1, kRelaxed);
  return Status::Ok();
}

void UdpProber::Loop::Resolve(Flow& f, Pending& p, bool lost, int64_t rtt_ns,
                              int64_t kernel_rtt_ns) {
  p.state = lost ? SlotState::kLost : SlotState::kAnswered;
  (lost ? lost_ : answered_).fetch_add(1, kRelaxed);
  if (lost) f.rto.OnLoss();
  if (!lost && p.window == window_serial_ && window_outstanding_ > 0) --window_outstanding_;
  if (!lost && in_window_) busy_poll_hits_.fetch_add(1, kRelaxed);
  ProbeResult r = f.result_template;
  r.seq = p.seq;
  r.lost = lost;
  r.kernel_rtt_ns = lost ? 0 : kernel_rtt_ns;
  r.rtt_ns = lost ? 0 : (options_.report_kernel_rtt && kernel_rtt_ns > 0 ? kernel_rtt_ns : rtt_ns);
  r.timestamp_ns = p.send_wall;
  results_.TryPush(r);  // a full queue counts its own drops
}

void UdpProber::Loop::QueueSlot(const std::vector<uint32_t>& slot, int64_t wall) {
  for (uint32_t fi : slot) {
    Flow& f = flows_[fi];
    if (budget_ && !budget_->TryConsume(1, static_cast<double>(f.tx.size() + kIpUdpOverhead))) {
      budget_skipped_.fetch_add(1, kRelaxed);
      continue;
    }
    Pending& p = f.ring[f.next_seq % f.ring.size()];
    if (p.state == SlotState::kOutstanding) Resolve(f, p, true, 0, 0);  // stalled past the ring
    Sock& s = sockets_[f.sock];
    p.seq = f.next_seq++;
    p.send_wall = wall;
    p.wait_ns = f.rto.Next(timeout_floor_ns_, f.timeout_ns);
    p.tx_real = 0;
    p.window = window_serial_;
    ++window_outstanding_;
    p.state = SlotState::kOutstanding;
    s.tx_flows[s.tx_count] = fi;
    mmsghdr& m = s.tx_msgs[s.tx_count];
    m.msg_hdr = {};
    m.msg_hdr.msg_name = f.dst.get();
    m.msg_hdr.msg_namelen = f.dst.len;
    s.tx_iov[s.tx_count] = {f.tx.data(), f.tx.size()};
    m.msg_hdr.msg_iov = &s.tx_iov[s.tx_count];
    m.msg_hdr.msg_iovlen = 1;
    ++s.tx_count;
  }
}

void UdpProber::Loop::SendDueSlots(int64_t now) {
  const int64_t wall = clock_.WallNanos();
  ++window_serial_;
  window_outstanding_ = 0;
  next_send_time_ = INT64_MAX;
  for (RateSchedule& r : schedules_) {
    if (now >= r.next_time) {
      // After a stall longer than a period, re-anchor instead of sending a burst to catch up (on
      // the grid: this slot goes now, the next one at the grid's next point).
      const bool stalled = now - r.next_time > r.period_ns;
      QueueSlot(r.slots[r.next_slot], wall);
      r.next_slot = (r.next_slot + 1) % r.slots.size();
      if (stalled) {
        r.next_time =
            options_.align_send_slots ? SlotAtOrAfter(now + 1, r.step_ns) : now + r.step_ns;
      } else {
        r.next_time += r.step_ns;
        // Once a period, back onto the grid: the wall clock may be slewed against the monotonic
        // one (NTP), and the grid is the wall clock's. A shift of a few µs a period. Without a
        // grid there is nothing to snap to (SlotAtOrAfter is the identity there, and the half
        // step taken off would shorten every period by it).
        if (r.next_slot == 0 && options_.align_send_slots) {
          r.next_time = SlotAtOrAfter(r.next_time - r.step_ns / 2, r.step_ns);
        }
      }
    }
    next_send_time_ = std::min(next_send_time_, r.next_time);
  }
  const HmacSha256* key = key_ ? &*key_ : nullptr;
  for (Sock& s : sockets_) {
    if (s.tx_count == 0) continue;
    // Stamp each header as late as possible: right before the batch goes to the kernel.
    for (size_t i = 0; i < s.tx_count; ++i) {
      Flow& f = flows_[s.tx_flows[i]];
      Pending& p = f.ring[(f.next_seq - 1) % f.ring.size()];
      ProbeHeader h;
      h.type = PacketType::kEchoRequest;
      h.flow_id = f.wire_id;
      h.payload_len = static_cast<uint32_t>(f.tx.size() - kHeaderSize - (key ? kMacSize : 0));
      h.seq = p.seq;
      p.send_mono = clock_.MonotonicNanos();
      h.send_ts_ns = p.send_mono;
      WriteHeader(h, key, f.tx);
    }
    size_t done = 0;
    while (done < s.tx_count) {
      int n = sendmmsg(s.fd.get(), s.tx_msgs.data() + done, s.tx_count - done, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        // This datagram did not go out (buffer full, no route): it will time out as lost, which
        // is what the path looks like from here. Count it and move on to the rest of the batch.
        send_errors_.fetch_add(1, kRelaxed);
        Flow& failed = flows_[s.tx_flows[done]];
        Pending& fp = failed.ring[(failed.next_seq - 1) % failed.ring.size()];
        if (fp.window == window_serial_ && window_outstanding_ > 0) --window_outstanding_;
        fp.window = 0;  // no reply will come: do not wait for it in the busy-poll window
        if (n < 0 && errno != last_send_errno_) {  // log once per cause; the counter has the rest
          last_send_errno_ = errno;
          SPDLOG_WARN(
              "component=udp_prober msg=\"sendmmsg failed; probe counts as lost\" "
              "error=\"{}\" note=\"logged once per cause; see send_errors\"",
              std::strerror(errno));
        }
        ++done;
        continue;
      }
      sent_.fetch_add(n, kRelaxed);
      done += n;
    }
    s.tx_count = 0;
    // The stamps are usually queued by the time sendmmsg returns: take them now rather than on
    // an extra EPOLLERR wakeup.
    if (options_.kernel_rx_timestamps && options_.kernel_tx_timestamps) {
      DrainTxStamps(static_cast<size_t>(&s - sockets_.data()));
    }
  }
}

void UdpProber::Loop::HandleReply(size_t sock_index, const mmsghdr& m, const uint8_t* data,
                                  int64_t offset, int64_t now_mono) {
  const HmacSha256* key = key_ ? &*key_ : nullptr;
  const int64_t rx_real = ReadRxCmsgs(sock_index, m.msg_hdr);
  if (m.msg_hdr.msg_flags & MSG_TRUNC) {
    dropped_[static_cast<size_t>(DropReason::kBadLength)].fetch_add(1, kRelaxed);
    return;
  }
  ProbeHeader h;
  DropReason why = ParseDatagram(std::span<const uint8_t>(data, m.msg_len), key, &h);
  if (why == DropReason::kNone && h.type != PacketType::kEchoReply) why = DropReason::kBadType;
  if (why != DropReason::kNone) {
    dropped_[static_cast<size_t>(why)].fetch_add(1, kRelaxed);
    return;
  }
  const uint32_t index = h.flow_id & 0xffff;
  if ((h.flow_id >> 16) != (generation_ & 0xffff) || index >= flows_.size()) {
    stray_.fetch_add(1, kRelaxed);
    return;
  }
  Flow& f = flows_[index];
  SocketAddress from;
  std::memcpy(&from.storage, m.msg_hdr.msg_name, m.msg_hdr.msg_namelen);
  from.len = m.msg_hdr.msg_namelen;
  if (f.sock != sock_index || !from.SameEndpoint(f.dst)) {
    stray_.fetch_add(1, kRelaxed);
    return;
  }
  Pending& p = f.ring[h.seq % f.ring.size()];
  const bool same_seq = p.seq == h.seq && h.seq < f.next_seq;
  // The echo of a probe still on record (its sequence number and send stamp name it).
  const bool echo = same_seq && p.send_mono == h.send_ts_ns &&
                    (p.state == SlotState::kOutstanding || p.state == SlotState::kLost);
  // The round trips of this echo. The user-space one (send time written into the probe -> the
  // receive time of its batch, both CLOCK_MONOTONIC) is what an application sees. The
  // kernel-stamped one leaves out the prober's own syscalls and scheduling, best source first:
  //  1. kernel TX stamp -> kernel RX stamp: both CLOCK_REALTIME, one clock, no conversion;
  //  2. user-space send time -> kernel RX stamp mapped onto CLOCK_MONOTONIC with the offset
  //     sampled for this batch.
  // A kernel-based value outside (0, user-space RTT] means the wall clock stepped in between:
  // it falls through to the next source, or to none.
  const int64_t user_rtt = echo ? now_mono - p.send_mono : 0;
  int64_t arrival_rtt = 0;  // source 2
  int64_t kernel_rtt = 0;
  bool kernel_tx = false;
  if (rx_real != 0 && echo) {
    if (const int64_t k = rx_real - offset; k > p.send_mono && k <= now_mono) {
      arrival_rtt = k - p.send_mono;
    }
    if (p.tx_real != 0 && rx_real > p.tx_real && rx_real - p.tx_real <= user_rtt) {
      kernel_rtt = rx_real - p.tx_real;
      kernel_tx = true;
    } else {
      kernel_rtt = arrival_rtt;
    }
  }
  // The round trip that times the flow and is reported. Deferred reads: the read time includes
  // the reply's wait in the buffer, so the user-space send time to the kernel's receive stamp
  // (source 2; source 1 if only it is sound); 0 when there is no stamp: unknown, never the wait.
  const bool deferred = deferred_;  // as this reply was read (StopDeferring below ends it)
  int64_t rtt = user_rtt;
  if (deferred && echo) {
    rtt = arrival_rtt > 0 ? arrival_rtt : kernel_rtt;
    if (rtt == 0) {
      rx_unstamped_deferred_.fetch_add(1, kRelaxed);
      StopDeferring();
    }
  }
  // Deferred reads judge an echo by its receive stamp: one that came after its probe's deadline is
  // late, as it would be had the prober woken there, even when the expiry pass has not run yet
  // (it may wait for the next send slot: UdpProberOptions::deferred_expiry_slack).
  if (deferred && echo && p.state == SlotState::kOutstanding && rtt > p.wait_ns) {
    Resolve(f, p, true, 0, 0);
  }
  if (!same_seq || p.state == SlotState::kLost) {
    late_.fetch_add(1, kRelaxed);
    // The echo of a probe already reported lost still times the flow's round trip: a queue that
    // outgrew the timeout lifts it.
    if (echo) {
      f.rto.OnEcho(rtt);
      // Lost on a round-trip timeout shorter than the fixed one, answered within the fixed one:
      // the fixed timeout would have read it answered, so the loss is taken back. (An unknown
      // round trip was within it when its upper bound, the read time, was.)
      const int64_t bound = rtt > 0 ? rtt : user_rtt;
      if (p.wait_ns < f.timeout_ns && bound < f.timeout_ns) {
        ProbeResult r = f.result_template;
        r.seq = p.seq;
        r.late = true;
        r.rtt_ns = rtt;
        r.timestamp_ns = p.send_wall;
        results_.TryPush(r);
        retracted_.fetch_add(1, kRelaxed);
        p.state = SlotState::kAnswered;  // a second copy of this echo is a duplicate
      }
    }
    return;
  }
  if (!echo) {  // answered already, or a send stamp that is not this probe's
    duplicate_.fetch_add(1, kRelaxed);
    return;
  }
  busy_poll_.RecordRtt(rtt);
  f.rto.OnEcho(rtt);
  if (!deferred || rtt > 0) (kernel_rtt > 0 ? rx_kernel_ts_ : rx_user_ts_).fetch_add(1, kRelaxed);
  if (kernel_tx) tx_kernel_ts_.fetch_add(1, kRelaxed);
  Resolve(f, p, false, rtt, kernel_rtt);
}

int64_t UdpProber::Loop::ReadRxCmsgs(size_t sock_index, const msghdr& h) {
  int64_t rx_real = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(const_cast<msghdr*>(&h), c)) {
    if (c->cmsg_level != SOL_SOCKET) continue;
    if (c->cmsg_type == SCM_TIMESTAMPNS && real_clock_) {
      timespec ts;
      std::memcpy(&ts, CMSG_DATA(c), sizeof ts);
      rx_real = static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
    } else if (c->cmsg_type == SO_RXQ_OVFL) {
      uint32_t total;
      std::memcpy(&total, CMSG_DATA(c), sizeof total);
      Sock& s = sockets_[sock_index];
      const uint32_t fresh = total - s.drops_seen;  // a running count; wraps at 2^32
      if (fresh == 0) continue;
      s.drops_seen = total;
      rx_queue_drops_.fetch_add(fresh, kRelaxed);
      const int64_t now = ReadClock(CLOCK_MONOTONIC);
      if (drops_logged_ns_ == 0 || now - drops_logged_ns_ >= 60'000'000'000) {
        drops_logged_ns_ = now;
        SPDLOG_WARN(
            "component=udp_prober msg=\"datagrams dropped on a full receive buffer; their probes "
            "count as lost\" port={} dropped={} deferred_reads={} note=\"logged at most once a "
            "minute; see rx_queue_drops\"",
            s.port, fresh, deferred_);
      }
    }
  }
  return rx_real;
}

void UdpProber::Loop::SizeReceiveBuffers() {
  // Probes each socket sends in the plan's busiest turn: the largest slot of every schedule on it.
  std::vector<int64_t> per_turn(sockets_.size(), 0);
  std::vector<int64_t> in_slot(sockets_.size(), 0);
  for (const RateSchedule& r : schedules_) {
    std::vector<int64_t> most(sockets_.size(), 0);
    for (const std::vector<uint32_t>& slot : r.slots) {
      std::fill(in_slot.begin(), in_slot.end(), 0);
      for (uint32_t fi : slot) ++in_slot[flows_[fi].sock];
      for (size_t i = 0; i < most.size(); ++i) most[i] = std::max(most[i], in_slot[i]);
    }
    for (size_t i = 0; i < most.size(); ++i) per_turn[i] += most[i];
  }
  for (size_t i = 0; i < sockets_.size(); ++i) {
    Sock& s = sockets_[i];
    // A reply and a TX stamp per probe, for this turn's probes and stragglers of the last.
    const int64_t want = std::min(per_turn[i] * 2 * 2 * kQueuedDatagramBytes, kMaxDeferredRcvbuf);
    int have = 0;
    socklen_t len = sizeof have;
    if (getsockopt(s.fd.get(), SOL_SOCKET, SO_RCVBUF, &have, &len) != 0 || have >= want) continue;
    const int ask = static_cast<int>((want + 1) / 2);  // the kernel doubles it for its overhead
    if (setsockopt(s.fd.get(), SOL_SOCKET, SO_RCVBUFFORCE, &ask, sizeof ask) != 0) {
      (void)setsockopt(s.fd.get(), SOL_SOCKET, SO_RCVBUF, &ask, sizeof ask);  // capped: rmem_max
    }
    len = sizeof have;
    if (getsockopt(s.fd.get(), SOL_SOCKET, SO_RCVBUF, &have, &len) == 0 && have < want &&
        !rcvbuf_warned_) {
      rcvbuf_warned_ = true;
      SPDLOG_WARN(
          "component=udp_prober msg=\"receive buffer below what deferred reply reads want; "
          "replies may be dropped (rx_queue_drops)\" port={} bytes={} wanted={} "
          "note=\"raise net.core.rmem_max or grant CAP_NET_ADMIN; logged once\"",
          s.port, have, want);
    }
  }
}

void UdpProber::Loop::ReadDeferred() {
  std::array<epoll_event, 64> events;
  const timespec zero{};
  for (;;) {
    int n = epoll_pwait2(reply_epoll_fd_.get(), events.data(), events.size(), &zero, nullptr);
    if (n < 0 && errno == EINTR) continue;
    // An error here fails the main loop's epoll_pwait2 too, which reports it.
    for (int i = 0; i < n; ++i) Receive(events[i].data.u32, events[i].events);
    // Receive drained each socket it was given; a full batch may have left others ready.
    if (n < static_cast<int>(events.size()) || !deferred_) return;
  }
}

void UdpProber::Loop::StopDeferring() {
  if (!deferred_) return;
  deferred_ = false;
  reply_reads_deferred_.store(0, kRelaxed);
  for (size_t i = 0; i < sockets_.size(); ++i) {
    epoll_ctl(reply_epoll_fd_.get(), EPOLL_CTL_DEL, sockets_[i].fd.get(), nullptr);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(i);
    if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, sockets_[i].fd.get(), &ev) != 0) {
      SPDLOG_ERROR("component=udp_prober msg=\"epoll_ctl(probe socket) failed\" error={}",
                   std::strerror(errno));
    }
  }
  SPDLOG_WARN(
      "component=udp_prober msg=\"a reply came without a kernel receive stamp; replies are read "
      "immediately from now on\" note=\"see rx_unstamped_deferred\"");
}

void UdpProber::Loop::DrainTxStamps(size_t sock_index) {
  Sock& s = sockets_[sock_index];
  for (;;) {
    for (size_t i = 0; i < kRxBatch; ++i) {
      msghdr& h = rx_msgs_[i].msg_hdr;
      h = {};
      h.msg_iov = &rx_iov_[i];
      h.msg_iovlen = 1;
      h.msg_control = rx_cmsg_[i].bytes;
      h.msg_controllen = sizeof rx_cmsg_[i].bytes;
    }
    int n = recvmmsg(s.fd.get(), rx_msgs_.data(), kRxBatch, MSG_ERRQUEUE | MSG_DONTWAIT, nullptr);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // EAGAIN: empty
    for (int i = 0; i < n; ++i) {
      const msghdr& h = rx_msgs_[i].msg_hdr;
      int64_t tx_real = 0;
      bool is_stamp = false;
      for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(const_cast<msghdr*>(&h), c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPING) {
          scm_timestamping stamps;
          std::memcpy(&stamps, CMSG_DATA(c), sizeof stamps);
          tx_real =
              static_cast<int64_t>(stamps.ts[0].tv_sec) * 1'000'000'000 + stamps.ts[0].tv_nsec;
        } else if ((c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR) ||
                   (c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_RECVERR)) {
          sock_extended_err err;
          std::memcpy(&err, CMSG_DATA(c), sizeof err);
          is_stamp = err.ee_errno == ENOMSG && err.ee_origin == SO_EE_ORIGIN_TIMESTAMPING;
        }
      }
      // The looped packet carries the lower-layer headers first; our probe is its tail.
      const size_t len = rx_msgs_[i].msg_len;
      if (!is_stamp || tx_real == 0 || len < packet_len_ || (h.msg_flags & MSG_TRUNC)) continue;
      ProbeHeader ph;
      const uint8_t* probe = rx_buffers_.data() + i * rx_buffer_size_ + (len - packet_len_);
      if (ParseHeader(std::span<const uint8_t>(probe, packet_len_), nullptr, &ph) !=
          DropReason::kNone) {
        continue;
      }
      const uint32_t index = ph.flow_id & 0xffff;
      if ((ph.flow_id >> 16) != (generation_ & 0xffff) || index >= flows_.size()) continue;
      Flow& f = flows_[index];
      Pending& p = f.ring[ph.seq % f.ring.size()];
      if (p.seq == ph.seq && p.state == SlotState::kOutstanding) p.tx_real = tx_real;
    }
    if (static_cast<size_t>(n) < kRxBatch) return;
  }
}

void UdpProber::Loop::Receive(size_t sock_index, uint32_t events) {
  Sock& s = sockets_[sock_index];
  // TX stamps are normally drained right after sendmmsg. Read the error queue here only when
  // epoll says it holds something: an unconditional read is one more syscall between a reply's
  // arrival and its receive time, i.e. inside every user-space round trip.
  if ((events & EPOLLERR) && options_.kernel_rx_timestamps && options_.kernel_tx_timestamps) {
    DrainTxStamps(sock_index);
  }
  for (;;) {
    for (size_t i = 0; i < kRxBatch; ++i) {
      msghdr& h = rx_msgs_[i].msg_hdr;
      h = {};
      h.msg_name = &rx_addr_[i];
      h.msg_namelen = sizeof(sockaddr_storage);
      h.msg_iov = &rx_iov_[i];
      h.msg_iovlen = 1;
      h.msg_control = rx_cmsg_[i].bytes;
      h.msg_controllen = sizeof rx_cmsg_[i].bytes;
    }
    int n = recvmmsg(s.fd.get(), rx_msgs_.data(), kRxBatch, MSG_DONTWAIT, nullptr);
    if (n < 0) {
      if (errno == EINTR) continue;
      // EAGAIN: drained. ECONNREFUSED and friends: an ICMP error for an earlier datagram; the
      // probe it belonged to times out as lost.
      return;
    }
    const int64_t now = clock_.MonotonicNanos();  // first: the user-space RTT ends here
    const int64_t offset = RealtimeMinusMonotonic();
    for (int i = 0; i < n; ++i) {
      HandleReply(sock_index, rx_msgs_[i], rx_buffers_.data() + i * rx_buffer_size_, offset, now);
    }
    if (static_cast<size_t>(n) < kRxBatch) return;
  }
}

void UdpProber::Loop::BusyPoll() {
  if (deferred_) return;  // Open() refuses a window with deferred reads; a fallback keeps none
  if (!real_clock_ || !busy_poll_.enabled() || window_outstanding_ == 0) return;
  const int64_t start = clock_.MonotonicNanos();
  const int64_t window = busy_poll_.Admit(start);
  if (window == 0) {
    busy_poll_skipped_.fetch_add(1, kRelaxed);
    return;
  }
  const int64_t end = std::min(start + window, next_send_time_);
  std::array<epoll_event, 64> events;
  const timespec zero{};
  bool woken = false;
  int64_t now = start;
  in_window_ = true;
  while (window_outstanding_ > 0 && now < end && !woken) {
    int n = epoll_pwait2(epoll_fd_.get(), events.data(), events.size(), &zero, nullptr);
    if (n < 0 && errno != EINTR) break;  // the main loop's epoll_pwait2 reports and stops
    for (int i = 0; i < n; ++i) {
      // A plan or a stop: leave it (the eventfd stays readable) for the main loop, now.
      if (events[i].data.u32 == kWakeTag) {
        woken = true;
      } else if (!(events[i].data.u32 & kGuestTag)) {
        Receive(events[i].data.u32, events[i].events);
      }  // a guest's descriptor stays readable for the main loop
    }
    now = clock_.MonotonicNanos();
  }
  in_window_ = false;
  busy_poll_.Charge(now - start);
  busy_polls_.fetch_add(1, kRelaxed);
  busy_poll_ns_.fetch_add(static_cast<uint64_t>(now - start), kRelaxed);
  if (window_outstanding_ > 0 && !woken) busy_poll_timeouts_.fetch_add(1, kRelaxed);
}

void UdpProber::Loop::ExpireTimeouts(int64_t now) {
  for (Flow& f : flows_) {
    while (f.oldest < f.next_seq) {
      Pending& p = f.ring[f.oldest % f.ring.size()];
      if (p.seq == f.oldest && p.state == SlotState::kOutstanding) {
        if (now - p.send_mono < p.wait_ns) break;
        Resolve(f, p, true, 0, 0);
      }
      ++f.oldest;
    }
  }
}

int64_t UdpProber::Loop::SlotAtOrAfter(int64_t mono, int64_t step) const {
  if (!options_.align_send_slots) return mono;
  const int64_t offset = clock_.WallNanos() - clock_.MonotonicNanos();  // realtime - monotonic
  const int64_t phase = ((options_.send_slot_phase_ns % step) + step) % step;
  const int64_t t = mono + offset - phase;  // on the wall clock, relative to the phase
  const int64_t into = ((t % step) + step) % step;
  return into == 0 ? mono : mono + (step - into);
}

int64_t UdpProber::Loop::NextDeadline() const {
  int64_t next = flows_.empty() ? INT64_MAX : next_send_time_;
  for (const Flow& f : flows_) {
    if (f.oldest < f.next_seq) {
      const Pending& p = f.ring[f.oldest % f.ring.size()];
      if (p.state != SlotState::kOutstanding) continue;
      int64_t due = p.send_mono + p.wait_ns;
      // Deferred reads: a send slot soon after the deadline expires the probe instead of a
      // wakeup of its own (HandleReply judges its echo by the receive stamp meanwhile).
      if (deferred_ && next_send_time_ >= due &&
          static_cast<double>(next_send_time_ - due) <=
              options_.deferred_expiry_slack * static_cast<double>(p.wait_ns)) {
        due = next_send_time_;
      }
      next = std::min(next, due);
    }
  }
  return next;
}

void UdpProber::Loop::Run() {
  pthread_setname_np(pthread_self(), "fw-udp-prober");
  std::array<epoll_event, 64> events;
  while (!stopping_.load()) {
    wakeups_.fetch_add(1, kRelaxed);
    int64_t now = clock_.MonotonicNanos();
    int64_t deadline = NextDeadline();
    int64_t d = deadline == INT64_MAX ? INT64_MAX : std::max<int64_t>(0, deadline - now);
    // The guests' deadlines are on CLOCK_MONOTONIC, which clock_ need not be (tests).
    if (const int64_t g = NextGuestDeadline(); g != INT64_MAX) {
      d = std::min(d, std::max<int64_t>(0, g - ReadClock(CLOCK_MONOTONIC)));
    }
    timespec wait{};
    timespec* wait_ptr = nullptr;  // block until woken when there is nothing to do
    if (d != INT64_MAX) {
      wait = {static_cast<time_t>(d / 1'000'000'000), static_cast<long>(d % 1'000'000'000)};
      wait_ptr = &wait;
    }
    int n = epoll_pwait2(epoll_fd_.get(), events.data(), events.size(), wait_ptr, nullptr);
    if (n < 0 && errno != EINTR) {
      SPDLOG_ERROR("component=udp_prober msg=\"epoll_pwait2 failed; prober stops\" error={}",
                   std::strerror(errno));
      break;
    }
    // Deferred reads: the replies and TX stamps that came while the thread slept, first, as an
    // immediate turn reads its ready sockets first: before a plan abandons their probes, before
    // the guests, and before the expiry pass below declares any probe lost.
    if (deferred_) ReadDeferred();
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u32 & kGuestTag && events[i].data.u32 != kWakeTag) continue;  // below
      if (events[i].data.u32 != kWakeTag) {
        Receive(events[i].data.u32, events[i].events);
        continue;
      }
      uint64_t drained;
      if (read(wake_fd_.get(), &drained, sizeof drained) < 0 && errno != EAGAIN) {
        SPDLOG_WARN("component=udp_prober msg=\"eventfd read failed\" error={}",
                    std::strerror(errno));
      }
      std::optional<UdpProbePlan> plan;
      uint64_t ticket;
      {
        MutexLock lock(mu_);
        plan.swap(pending_plan_);
        ticket = submitted_;
      }
      if (plan) {
        Status s = Apply(*plan);
        MutexLock lock(mu_);
        apply_status_ = s;
        applied_ = ticket;
        applied_cv_.NotifyAll();
      }
      RunCalls();
    }
    // The guests' input next, before a send slot that may be due: the replies of this turn are
    // stamped already, and a guest's answer (the responder's echo, which a peer times) does not
    // wait behind a slot's sendmmsg.
    GuestInput(events.data(), std::max(n, 0));
    now = clock_.MonotonicNanos();
    if (!flows_.empty() && now >= next_send_time_) {
      SendDueSlots(now);
      BusyPoll();
    }
    ExpireTimeouts(clock_.MonotonicNanos());
    ServiceGuests();
  }
  MutexLock lock(mu_);
  exited_ = true;
  applied_cv_.NotifyAll();
}

UdpProberStats UdpProber::Loop::Snapshot() const {
  UdpProberStats s;
  s.sent = sent_.load(kRelaxed);
  s.answered = answered_.load(kRelaxed);
  s.lost = lost_.load(kRelaxed);
  s.late = late_.load(kRelaxed);
  s.retracted = retracted_.load(kRelaxed);
  s.duplicate = duplicate_.load(kRelaxed);
  s.stray = stray_.load(kRelaxed);
  s.budget_skipped = budget_skipped_.load(kRelaxed);
  s.send_errors = send_errors_.load(kRelaxed);
  s.rx_kernel_ts = rx_kernel_ts_.load(kRelaxed);
  s.tx_kernel_ts = tx_kernel_ts_.load(kRelaxed);
  s.rx_user_ts = rx_user_ts_.load(kRelaxed);
  s.rx_unstamped_deferred = rx_unstamped_deferred_.load(kRelaxed);
  s.rx_queue_drops = rx_queue_drops_.load(kRelaxed);
  s.reply_reads_deferred = reply_reads_deferred_.load(kRelaxed);
  s.abandoned = abandoned_.load(kRelaxed);
  s.plans_applied = plans_applied_.load(kRelaxed);
  s.wakeups = wakeups_.load(kRelaxed);
  s.busy_polls = busy_polls_.load(kRelaxed);
  s.busy_poll_ns = busy_poll_ns_.load(kRelaxed);
  s.busy_poll_hits = busy_poll_hits_.load(kRelaxed);
  s.busy_poll_timeouts = busy_poll_timeouts_.load(kRelaxed);
  s.busy_poll_skipped = busy_poll_skipped_.load(kRelaxed);
  for (size_t i = 0; i < kDropReasonCount; ++i) s.dropped[i] = dropped_[i].load(kRelaxed);
  for (size_t i = 0; i < kPlanSkipCount; ++i) s.plan_skipped[i] = plan_skipped_[i].load(kRelaxed);
  s.planned_peers = planned_peers_.load(kRelaxed);
  return s;
}

StatusOr<std::unique_ptr<UdpProber>> UdpProber::Start(UdpProberOptions options, const Clock& clock,
                                                      ResultQueue& results, ProbeBudget* budget) {
  std::unique_ptr<UdpProber> p(new UdpProber());
  p->loop_ = std::make_unique<Loop>(std::move(options), clock, results, budget);
  Status s = p->loop_->Open();
  if (!s.ok()) return s;
  p->thread_ = std::thread([loop = p->loop_.get()] { loop->Run(); });
  return p;
}

UdpProber::~UdpProber() { Stop(); }

void UdpProber::Stop() {
  if (thread_.joinable()) {
    loop_->RequestStop();
    thread_.join();
  }
}

Status UdpProber::SetPlan(UdpProbePlan plan) {
  if (!thread_.joinable()) return Status::FailedPrecondition("the UDP prober is stopped");
  return loop_->Submit(std::move(plan));
}

Status UdpProber::AddGuest(LoopGuest* guest) {
  Loop* loop = loop_.get();
  return loop_->CallOnThread([loop, guest] { return loop->AttachGuest(guest); });
}

void UdpProber::RemoveGuest(LoopGuest* guest) {
  Loop* loop = loop_.get();
  // Fails only when the thread is stopping or gone, which calls no guest any more either way.
  (void)loop_->CallOnThread([loop, guest] {
    loop->DetachGuest(guest);
    return Status::Ok();
  });
}

UdpProberStats UdpProber::Stats() const { return loop_->Snapshot(); }
std::vector<uint16_t> UdpProber::SourcePorts() const { return loop_->Ports(); }

}  // namespace fw::net
