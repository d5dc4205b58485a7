// PathTracer: raw sockets, the trace loop and its hand-off to the agent.
#include "probes/net/path_tracer.h"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/icmp.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>

#include "common/log.h"
#include "common/mutex.h"
#include "probes/net/socket_util.h"

namespace fw::net {
namespace {

constexpr size_t kMaxKeptTraces = 4096;

int64_t MonoNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct InFlight {
  HopAssembler hops;
  uint8_t next_ttl = 1;  // the ttl to send next
  uint8_t silent = 0;    // silent hops in a row
  int64_t deadline_ns = 0;
  bool answered_current = false;
  std::array<int64_t, kTraceMaxTtl> sent_ns{};  // by ttl - 1: when that hop's probe left
};

}  // namespace

// Every call of LoopGuest comes from the host prober's thread; the inputs below (under mu) from
// the agent's threads.
class PathTracer::Loop final : public LoopGuest {
 public:
  explicit Loop(PathTracerOptions o)
      : options_(std::move(o)), scheduler_(options_.budget_fraction, options_.max_ttl) {}

  Status Open() {
    icmp_.Reset(socket(AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_ICMP));
    if (!icmp_.valid()) return ErrnoStatus("socket(AF_INET, SOCK_RAW, IPPROTO_ICMP)", errno);
    icmp_filter filter{};
    filter.data = ~((1u << ICMP_TIME_EXCEEDED) | (1u << ICMP_DEST_UNREACH));
    if (setsockopt(icmp_.get(), SOL_RAW, ICMP_FILTER, &filter, sizeof filter) != 0) {
      return ErrnoStatus("setsockopt(ICMP_FILTER)", errno);
    }
    udp_.Reset(socket(AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP));
    if (!udp_.valid()) return ErrnoStatus("socket(AF_INET, SOCK_RAW, IPPROTO_UDP)", errno);
    // Send only: a raw UDP socket would otherwise get a copy of every UDP datagram the host
    // receives.
    sock_filter drop_all{BPF_RET | BPF_K, 0, 0, 0};
    sock_fprog prog{1, &drop_all};
    if (setsockopt(udp_.get(), SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0) {
      return ErrnoStatus("setsockopt(SO_ATTACH_FILTER)", errno);
    }
    for (int fd : {icmp_.get(), udp_.get()}) {
      if (!options_.bind_device.empty() &&
          setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, options_.bind_device.c_str(),
                     static_cast<socklen_t>(options_.bind_device.size())) != 0) {
        return ErrnoStatus("setsockopt(SO_BINDTODEVICE " + options_.bind_device + ")", errno);
      }
    }
    if (!options_.bind_address_v4.empty()) {
      StatusOr<SocketAddress> a = ParseAddress(options_.bind_address_v4, 0);
      if (!a.ok()) return a.status();
      if (bind(udp_.get(), a->get(), a->len) != 0) {
        return ErrnoStatus("bind trace socket " + a->ToString(), errno);
      }
    }
    wake_.Reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!wake_.valid()) return ErrnoStatus("eventfd", errno);
    return Status::Ok();
  }

  std::vector<int> WatchedFds() const override { return {icmp_.get(), wake_.get()}; }

  void OnReady(int fd) override {
    if (fd == icmp_.get()) {
      ReadAnswers();
      return;
    }
    uint64_t v;
    if (read(wake_.get(), &v, sizeof v) < 0 && errno != EAGAIN) {
      SPDLOG_WARN("component=path_tracer msg=\"eventfd read failed\" error={}",
                  std::strerror(errno));
    }
  }

  // Sleeps until the earliest hop deadline, a new flow set or change, new budget (Wake), or an
  // answer; idle, until one of those.
  int64_t Service(int64_t now) override {
    TakeInputs();
    StartTraces(now);
    Advance(now);
    {
      // A queued trace that did not start waits for budget (or, with every slot in flight, for a
      // slot: a hop deadline or an answer wakes the loop then, budget or not).
      MutexLock lock(mu);
      packets_wanted = scheduler_.queued() > 0 && in_flight_.size() < options_.max_concurrent
                           ? scheduler_.PacketsUntilNext()
                           : UINT64_MAX;
    }
    int64_t next = INT64_MAX;
    for (const InFlight& t : in_flight_) next = std::min(next, t.deadline_ns);
    return next;
  }

  void Wake() {
    uint64_t one = 1;
    if (write(wake_.get(), &one, sizeof one) < 0 && errno != EAGAIN) {
      SPDLOG_WARN("component=path_tracer msg=\"eventfd write failed\" error={}",
                  std::strerror(errno));
    }
  }

  // Inputs from other threads.
  Mutex mu;
  std::optional<std::vector<TraceFlow>> new_flows FW_GUARDED_BY(mu);
  std::vector<std::pair<TraceFlow, bool>> changed FW_GUARDED_BY(mu);
  uint64_t probe_packets FW_GUARDED_BY(mu) = 0;
  // As of the loop's last Service(): the probe packets after which a queued trace can start
  // (UINT64_MAX: none waits for budget). AddProbePackets wakes the loop only once probe_packets
  // reach it: the agent adds budget every second, a trace needs max_ttl packets of it (at the
  // default 2 % of 50 probes/s, one every 8 s), and an idle tracer needs none.
  uint64_t packets_wanted FW_GUARDED_BY(mu) = UINT64_MAX;
  std::deque<TracedPath> done FW_GUARDED_BY(mu);
  PathTracerStats stats FW_GUARDED_BY(mu);

 private:
  void TakeInputs() {
    MutexLock lock(mu);
    if (new_flows) {
      scheduler_.SetFlows(*new_flows);
      new_flows.reset();
    }
    for (const auto& [f, suspect] : changed) scheduler_.Changed(f, suspect);
    changed.clear();
    scheduler_.AddProbePackets(probe_packets);
    probe_packets = 0;
    stats.budget_deferred = scheduler_.deferred();
  }

  void StartTraces(int64_t now) {
    while (in_flight_.size() < options_.max_concurrent) {
      std::optional<TraceFlow> f = scheduler_.Next();
      if (!f) return;
      in_flight_.push_back(InFlight{HopAssembler(std::move(*f), options_.max_ttl)});
      InFlight& t = in_flight_.back();
      MutexLock lock(mu);
      ++stats.traces_started;
      SendHop(t, now);
    }
  }

  void SendHop(InFlight& t, int64_t now) FW_REQUIRES(mu) {
    const TraceFlow& f = t.hops.flow();
    uint8_t buf[64];
    const size_t len = WriteTraceProbe(f.src_port, f.dst_port, t.next_ttl, buf);
    int ttl = t.next_ttl;
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(f.peer_address);
    t.deadline_ns = now + options_.hop_timeout_ns;
    t.answered_current = false;
    if (t.next_ttl >= 1 && t.next_ttl <= kTraceMaxTtl) t.sent_ns[t.next_ttl - 1] = now;
    ++t.next_ttl;
    if (len == 0 || setsockopt(udp_.get(), IPPROTO_IP, IP_TTL, &ttl, sizeof ttl) != 0 ||
        sendto(udp_.get(), buf, len, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) < 0) {
      ++stats.send_errors;
      if (stats.send_errors == 1 || stats.send_errors % 1000 == 0) {
        SPDLOG_WARN(
            "component=path_tracer msg=\"trace probe send failed\" peer={} ttl={} error={} "
            "count={}",
            LogQuote(f.peer), ttl, std::strerror(errno), stats.send_errors);
      }
      return;
    }
    ++stats.packets_sent;
  }

  void Advance(int64_t now) {
    MutexLock lock(mu);
    for (size_t i = 0; i < in_flight_.size();) {
      InFlight& t = in_flight_[i];
      bool finished = t.hops.ReachedPeer();
      if (!finished && (t.answered_current || now >= t.deadline_ns)) {
        t.silent = t.answered_current ? 0 : static_cast<uint8_t>(t.silent + 1);
        finished = t.silent >= 2 || t.next_ttl > t.hops.max_ttl();
        if (!finished) SendHop(t, now);
      }
      if (!finished) {
        ++i;
        continue;
      }
      ++stats.traces_done;
      if (done.size() >= kMaxKeptTraces) {
        done.pop_front();
        ++stats.dropped_traces;
      }
      done.push_back(t.hops.Finish(now));
      if (i + 1 != in_flight_.size()) in_flight_[i] = std::move(in_flight_.back());
      in_flight_.pop_back();
    }
  }

  void ReadAnswers() {
    uint8_t buf[1500];
    for (int budget = 0; budget < 256; ++budget) {
      ssize_t n = recv(icmp_.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          SPDLOG_WARN("component=path_tracer msg=\"ICMP read failed\" error={}",
                      std::strerror(errno));
        }
        return;
      }
      IcmpAnswer a;
      const TraceDrop d =
          ParseIcmpAnswer(std::span<const uint8_t>(buf, static_cast<size_t>(n)), &a);
      MutexLock lock(mu);
      if (d != TraceDrop::kNone) {
        // Other ICMP traffic of the host lands here too; refusals are counted, not logged each.
        ++stats.dropped[static_cast<size_t>(d)];
        continue;
      }
      bool matched = false;
      const int64_t now = MonoNs();
      for (InFlight& t : in_flight_) {
        // Only the hop in flight counts as its answer; an earlier hop's late answer still fills
        // its slot.
        const int64_t sent =
            a.probe_ttl >= 1 && a.probe_ttl <= kTraceMaxTtl ? t.sent_ns[a.probe_ttl - 1] : 0;
        if (t.hops.Add(a, sent > 0 ? now - sent : 0)) {
          matched = true;
          if (a.probe_ttl + 1 == t.next_ttl) t.answered_current = true;
          break;
        }
      }
      ++(matched ? stats.answers : stats.answers_unmatched);
    }
  }

  PathTracerOptions options_;
  TraceScheduler scheduler_;
  std::vector<InFlight> in_flight_;
  Fd icmp_, udp_, wake_;
};

StatusOr<std::unique_ptr<PathTracer>> PathTracer::Start(PathTracerOptions options,
                                                        UdpProber& host) {
  std::unique_ptr<PathTracer> t(new PathTracer());
  t->loop_ = std::make_unique<Loop>(std::move(options));
  Status s = t->loop_->Open();
  if (!s.ok()) return s;
  s = host.AddGuest(t->loop_.get());
  if (!s.ok()) return s;
  t->host_ = &host;
  return t;
}

PathTracer::~PathTracer() { Stop(); }

void PathTracer::Stop() {
  if (host_ == nullptr) return;
  host_->RemoveGuest(loop_.get());
  host_ = nullptr;
}

void PathTracer::SetFlows(std::vector<TraceFlow> flows) {
  {
    MutexLock lock(loop_->mu);
    loop_->new_flows = std::move(flows);
  }
  loop_->Wake();
}

void PathTracer::Changed(const TraceFlow& flow, bool suspect) {
  {
    MutexLock lock(loop_->mu);
    if (loop_->changed.size() < 65536) loop_->changed.emplace_back(flow, suspect);
  }
  loop_->Wake();
}

void PathTracer::AddProbePackets(uint64_t n) {
  bool wake = false;
  {
    MutexLock lock(loop_->mu);
    loop_->probe_packets += n;
    // Enough new budget lets a deferred trace start, which an idle loop would not see before its
    // next input. A Service() running now may set packets_wanted just after this read; its trace
    // then waits for the next call (the agent's next counter pass).
    wake = n > 0 && loop_->probe_packets >= loop_->packets_wanted;
    if (wake) ++loop_->stats.budget_wakes;
  }
  if (wake) loop_->Wake();
}

std::vector<TracedPath> PathTracer::TakeTraces() {
  MutexLock lock(loop_->mu);
  std::vector<TracedPath> out(std::make_move_iterator(loop_->done.begin()),
                              std::make_move_iterator(loop_->done.end()));
  loop_->done.clear();
  return out;
}

PathTracerStats PathTracer::Stats() const {
  MutexLock lock(loop_->mu);
  return loop_->stats;
}

}  // namespace fw::net
