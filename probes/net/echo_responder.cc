// Echo responder: one thread with one epoll set (UDP socket, TCP listener, connections, stop
// event). A UDP wakeup costs three system calls (epoll_wait, recvmmsg, sendmmsg), one more than a
// thread blocked in recvmmsg alone, which is what the responder had before: the agent keeps one
// thread fewer (issue 19's thread budget) for about a microsecond per wakeup.
#include "probes/net/echo_responder.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "probes/net/token_bucket.h"

namespace fw::net {
namespace {

constexpr size_t kMaxFrame = kHeaderSize + kMacSize + kMaxEchoPayload;
constexpr size_t kUdpBatch = 32;
constexpr size_t kUdpBufferSize = kMaxFrame + 1;  // one spare byte: a longer datagram is malformed
constexpr size_t kBulkScratch = 256 * 1024;
constexpr uint64_t kStopToken = 1;

ResponderDrop FromParse(DropReason r) {
  return static_cast<ResponderDrop>(static_cast<uint8_t>(r) - 1);
}

// The source address without its port: rate limits are per host, not per flow.
struct SourceKey {
  std::array<uint8_t, 16> addr{};
  uint8_t family = 0;
  bool operator==(const SourceKey&) const = default;
};
struct SourceKeyHash {
  size_t operator()(const SourceKey& k) const {
    uint64_t h = 1469598103934665603ull ^ k.family;
    for (uint8_t b : k.addr) h = (h ^ b) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

SourceKey KeyOf(const sockaddr_storage& ss) {
  SourceKey k;
  k.family = static_cast<uint8_t>(ss.ss_family);
  if (ss.ss_family == AF_INET) {
    std::memcpy(k.addr.data(), &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, 4);
  } else if (ss.ss_family == AF_INET6) {
    std::memcpy(k.addr.data(), &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, 16);
  }
  return k;
}

struct TcpConn {
  Fd fd;
  sockaddr_storage peer{};
  std::vector<uint8_t> frame = std::vector<uint8_t>(kMaxFrame);  // header + MAC + echo payload
  size_t have = 0;  // bytes of the current frame (header, then echo payload) read
  bool header_parsed = false;
  ProbeHeader header;
  uint64_t bulk_left = 0;  // bulk payload bytes still to sink
  size_t out_len = 0;      // pending reply bytes in `frame`
  size_t out_sent = 0;
  int64_t last_progress_ns = 0;
};

}  // namespace

std::string_view ResponderDropName(ResponderDrop d) {
  switch (d) {
    case ResponderDrop::kUnexpectedType:
      return "unexpected_type";
    case ResponderDrop::kRateLimitedSource:
      return "rate_limited_source";
    case ResponderDrop::kRateLimitedGlobal:
      return "rate_limited_global";
    case ResponderDrop::kTcpConnectionLimit:
      return "tcp_connection_limit";
    case ResponderDrop::kTcpIdleTimeout:
      return "tcp_idle_timeout";
    case ResponderDrop::kTcpReset:
      return "tcp_reset";
    case ResponderDrop::kSendFailed:
      return "send_failed";
    case ResponderDrop::kNotInPlan:
      return "not_in_plan";
    case ResponderDrop::kCount:
      return "unknown";
    default:
      return DropReasonName(static_cast<DropReason>(static_cast<uint8_t>(d) + 1));
  }
}

// Everything the responder thread owns: the epoll set, the sockets, connections and buffers.
// Admission state (rate limits, allow list) is under admit_mu_ (the allow list is posted from other
// threads), and only the atomics are read from other threads.
// As a guest of a prober's loop (EchoResponder::Start with a host), the prober's epoll set watches
// the UDP socket and this loop's epoll set (listener, connections), whose events OnReady takes
// with a zero-timeout epoll_wait: a UDP request costs the same calls as on the responder's own
// thread, a TCP event one more.
class EchoResponder::Loop final : public LoopGuest {
 public:
  Loop(ResponderOptions options, const Clock& clock)
      : options_(std::move(options)),
        clock_(clock),
        global_(clock, options_.global_rate, options_.global_burst) {
    if (options_.key) key_.emplace(*options_.key);
  }

  // `own_thread`: Run() will serve the sockets; else a host's loop, through LoopGuest.
  Status Open(uint16_t* port_out, bool own_thread);
  void Run();  // the responder thread
  std::vector<int> WatchedFds() const override { return {udp_fd_.get(), epoll_fd_.get()}; }
  void OnReady(int fd) override;
  int64_t Service(int64_t now_ns) override;
  void RequestStop() {
    stopping_ = true;
    uint64_t one = kStopToken;
    if (write(stop_fd_.get(), &one, sizeof one) != sizeof one) {
      // Cannot fail for a fresh eventfd; if it did, the epoll timeout (at most 1 s) still sees
      // stopping_.
      SPDLOG_WARN("component=responder msg=\"stop eventfd write failed\" error={}",
                  std::strerror(errno));
    }
  }
  ResponderStats Snapshot() const;
  // Closes every socket. REQUIRES: the thread has exited.
  void CloseAll() {
    conns_.clear();
    udp_fd_.Reset();
    listen_fd_.Reset();
  }

 private:
  void Count(ResponderDrop d) { dropped_[static_cast<size_t>(d)].fetch_add(1, kRelaxed); }
  // Counts a failed socket call and logs it once per (call, errno).
  void SocketError(const char* call, int err) {
    Add(socket_errors_, 1);
    MutexLock lock(error_mu_);
    if (last_error_call_ == call && last_errno_ == err) return;
    last_error_call_ = call;
    last_errno_ = err;
    SPDLOG_WARN(
        "component=responder msg=\"{} failed\" error=\"{}\" note=\"logged once per cause; "
        "see socket_errors\"",
        call, std::strerror(err));
  }
  bool accept_paused_ = false;
  Mutex error_mu_;
  const char* last_error_call_ FW_GUARDED_BY(error_mu_) = nullptr;
  int last_errno_ FW_GUARDED_BY(error_mu_) = 0;
  void Add(std::atomic<uint64_t>& c, uint64_t n) { c.fetch_add(n, kRelaxed); }
  // Takes one token from the global and the source bucket, or counts why not. Thread-safe.
  bool Admit(const sockaddr_storage& src);
  void HandleUdp();
  void AcceptTcp();
  void HandleTcp(int fd, uint32_t events);
  // Reads and acts on whatever the connection has; false when it must be closed.
  bool ReadTcp(TcpConn& c);
  bool FlushTcp(TcpConn& c);
  void CloseTcp(int fd);
  void SweepIdle();
  // Handles what one epoll_wait on epoll_fd_ returned; false when the stop eventfd was among it.
  bool Dispatch(const epoll_event* events, int n);
  // Every 100 ms with connections open or accept paused: resumes accepting, closes idle ones.
  static constexpr int64_t kSweepNs = 100'000'000;
  int64_t last_sweep_ns_ = 0;
  Status Watch(int fd, uint32_t events, int op = EPOLL_CTL_ADD);

  static constexpr auto kRelaxed = std::memory_order_relaxed;

  ResponderOptions options_;
  const Clock& clock_;
  std::optional<HmacSha256> key_;
  Fd epoll_fd_, udp_fd_, listen_fd_, stop_fd_;
  std::atomic<bool> stopping_{false};

  Mutex admit_mu_;  // uncontended but for a UDP request racing a TCP one; before allowed_mu_
  TokenBucket global_ FW_GUARDED_BY(admit_mu_);
  std::unordered_map<SourceKey, TokenBucket, SourceKeyHash> sources_ FW_GUARDED_BY(admit_mu_);
  std::unordered_set<SourceKey, SourceKeyHash> allowed_ FW_GUARDED_BY(admit_mu_);  // empty: all
  // The list allowed_ replaced, still admitted until previous_until_ns_ (monotonic).
  std::unordered_set<SourceKey, SourceKeyHash> previous_ FW_GUARDED_BY(admit_mu_);
  int64_t previous_until_ns_ FW_GUARDED_BY(admit_mu_) = 0;

 public:
  // Hands a new allow list to the thread (SetAllowedPeers). Thread-safe.
  void PostAllowed(std::unordered_set<SourceKey, SourceKeyHash> allowed, int64_t keep_previous_ns) {
    MutexLock lock(allowed_mu_);
    pending_allowed_ = std::move(allowed);
    pending_keep_until_ns_ = clock_.MonotonicNanos() + keep_previous_ns;
    allowed_dirty_ = true;
  }

 private:
  void TakeAllowed() FW_REQUIRES(admit_mu_) {
    if (!allowed_dirty_.load()) return;
    MutexLock lock(allowed_mu_);
    previous_ = std::move(allowed_);
    previous_until_ns_ = pending_keep_until_ns_;
    allowed_ = std::move(pending_allowed_);
    pending_allowed_.clear();
    allowed_dirty_ = false;
  }
  Mutex allowed_mu_;
  std::unordered_set<SourceKey, SourceKeyHash> pending_allowed_ FW_GUARDED_BY(allowed_mu_);
  int64_t pending_keep_until_ns_ FW_GUARDED_BY(allowed_mu_) = 0;
  std::atomic<bool> allowed_dirty_{false};
  std::unordered_map<int, std::unique_ptr<TcpConn>> conns_;

  // UDP batch buffers, allocated once.
  std::vector<uint8_t> udp_buffers_ = std::vector<uint8_t>(kUdpBatch * kUdpBufferSize);
  std::array<mmsghdr, kUdpBatch> rx_msgs_{};
  std::array<iovec, kUdpBatch> rx_iov_{};
  std::array<sockaddr_storage, kUdpBatch> rx_addr_{};
  std::array<mmsghdr, kUdpBatch> tx_msgs_{};
  std::array<iovec, kUdpBatch> tx_iov_{};
  // Listening on the IPv4 wildcard (several fabric NICs): each request's destination address
  // (IP_PKTINFO) becomes its reply's source, so a prober on any NIC hears back from the address
  // it probed, whichever NIC the route to it prefers.
  bool pktinfo_ = false;
  struct alignas(cmsghdr) Control {
    char bytes[CMSG_SPACE(sizeof(in_pktinfo))];
  };
  std::array<Control, kUdpBatch> rx_ctl_{};
  std::array<Control, kUdpBatch> tx_ctl_{};
  // Points `tx`'s control data (in `ctl`) at a pktinfo whose source is `rx`'s destination.
  static void SetReplySource(const msghdr& rx, Control& ctl, msghdr& tx);
  std::vector<uint8_t> bulk_scratch_ = std::vector<uint8_t>(kBulkScratch);

  // Answered UDP flows (TrackAnsweredUdpFlows): the UDP thread adds a batch's under one lock.
 public:
  std::atomic<size_t> track_max_{0};
  Mutex answered_mu_;
  std::unordered_set<uint64_t> answered_ FW_GUARDED_BY(answered_mu_);  // address << 16 | port
  uint64_t answered_not_kept_ FW_GUARDED_BY(answered_mu_) = 0;

 private:
  std::array<uint64_t, kUdpBatch> batch_flows_{};

  std::atomic<uint64_t> udp_requests_{0}, udp_replies_{0}, tcp_accepted_{0}, tcp_echo_replies_{0},
      bulk_acks_{0}, bytes_in_{0}, bytes_out_{0}, source_table_full_{0}, socket_errors_{0};
  std::array<std::atomic<uint64_t>, kResponderDropCount> dropped_{};
};

void EchoResponder::Loop::SetReplySource(const msghdr& rx, Control& ctl, msghdr& tx) {
  for (cmsghdr* c = CMSG_FIRSTHDR(const_cast<msghdr*>(&rx)); c != nullptr;
       c = CMSG_NXTHDR(const_cast<msghdr*>(&rx), c)) {
    if (c->cmsg_level != IPPROTO_IP || c->cmsg_type != IP_PKTINFO) continue;
    in_pktinfo got{};
    std::memcpy(&got, CMSG_DATA(c), sizeof got);
    in_pktinfo want{};
    want.ipi_spec_dst = got.ipi_addr;  // the address the request was sent to
    std::memset(ctl.bytes, 0, sizeof ctl.bytes);
    tx.msg_control = ctl.bytes;
    tx.msg_controllen = sizeof ctl.bytes;
    cmsghdr* out = CMSG_FIRSTHDR(&tx);
    out->cmsg_level = IPPROTO_IP;
    out->cmsg_type = IP_PKTINFO;
    out->cmsg_len = CMSG_LEN(sizeof want);
    std::memcpy(CMSG_DATA(out), &want, sizeof want);
    return;
  }
}

Status EchoResponder::Loop::Watch(int fd, uint32_t events, int op) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd_.get(), op, fd, &ev) != 0) return ErrnoStatus("epoll_ctl", errno);
  return Status::Ok();
}

Status EchoResponder::Loop::Open(uint16_t* port_out, bool own_thread) {
  if (options_.per_source_rate < 0 || options_.global_rate < 0 || options_.per_source_burst < 0 ||
      options_.global_burst < 0) {
    return Status::InvalidArgument("responder rates and bursts must be >= 0");
  }
  if (options_.max_sources == 0 || options_.max_tcp_connections == 0) {
    return Status::InvalidArgument("responder max_sources and max_tcp_connections must be > 0");
  }
  StatusOr<SocketAddress> addr = ParseAddress(options_.listen_address, options_.port);
  if (!addr.ok()) return addr.status();
  epoll_fd_.Reset(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd_.valid()) return ErrnoStatus("epoll_create1", errno);
  stop_fd_.Reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!stop_fd_.valid()) return ErrnoStatus("eventfd", errno);

  // With port 0 the TCP listener picks the port and UDP must get the same one; retry on a clash.
  Status last;
  for (int attempt = 0; attempt < 16; ++attempt) {
    SocketAddress a = *addr;
    Fd tcp(socket(a.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!tcp.valid()) return ErrnoStatus("socket(TCP)", errno);
    int one = 1;
    if (setsockopt(tcp.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
      return ErrnoStatus("setsockopt(SO_REUSEADDR)", errno);
    }
    if (bind(tcp.get(), a.get(), a.len) != 0) {
      return ErrnoStatus("bind TCP " + a.ToString(), errno);
    }
    if (listen(tcp.get(), 128) != 0) return ErrnoStatus("listen", errno);
    StatusOr<SocketAddress> bound = LocalAddress(tcp.get());
    if (!bound.ok()) return bound.status();
    a.set_port(bound->port());
    Fd udp(socket(a.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!udp.valid()) return ErrnoStatus("socket(UDP)", errno);
    if (bind(udp.get(), a.get(), a.len) != 0) {
      last = ErrnoStatus("bind UDP " + a.ToString(), errno);
      if (errno == EADDRINUSE && options_.port == 0) continue;
      return last;
    }
    const auto* in = reinterpret_cast<const sockaddr_in*>(a.get());
    if (a.family() == AF_INET && in->sin_addr.s_addr == htonl(INADDR_ANY)) {
      if (setsockopt(udp.get(), IPPROTO_IP, IP_PKTINFO, &one, sizeof one) != 0) {
        return ErrnoStatus("setsockopt(IP_PKTINFO)", errno);
      }
      pktinfo_ = true;
    }
    udp_fd_ = std::move(udp);
    listen_fd_ = std::move(tcp);
    *port_out = a.port();
    break;
  }
  if (!udp_fd_.valid()) return last;
  for (int fd : {udp_fd_.get(), listen_fd_.get(), stop_fd_.get()}) {
    if (fd == udp_fd_.get() && !own_thread) continue;  // the host watches it itself
    Status s = Watch(fd, EPOLLIN);
    if (!s.ok()) return s;
  }
  last_sweep_ns_ = clock_.MonotonicNanos();
  for (size_t i = 0; i < kUdpBatch; ++i) {
    rx_iov_[i] = {udp_buffers_.data() + i * kUdpBufferSize, kUdpBufferSize};
    tx_iov_[i] = rx_iov_[i];
  }
  return Status::Ok();
}

bool EchoResponder::Loop::Admit(const sockaddr_storage& src) {
  SourceKey key = KeyOf(src);
  MutexLock lock(admit_mu_);
  TakeAllowed();
  if (!allowed_.empty() && !allowed_.contains(key) &&
      !(clock_.MonotonicNanos() < previous_until_ns_ &&
        (previous_.empty() || previous_.contains(key)))) {
    Count(ResponderDrop::kNotInPlan);
    return false;
  }
  auto it = sources_.find(key);
  if (it == sources_.end()) {
    if (sources_.size() >= options_.max_sources) {
      // Evict buckets that are full again: they hold nothing a fresh bucket would not.
      for (auto it2 = sources_.begin(); it2 != sources_.end();) {
        it2 = it2->second.Full() ? sources_.erase(it2) : std::next(it2);
      }
    }
    if (sources_.size() < options_.max_sources) {
      it = sources_.try_emplace(key, clock_, options_.per_source_rate, options_.per_source_burst)
               .first;
    } else {
      Add(source_table_full_, 1);
    }
  }
  if (it != sources_.end() && it->second.Available() < 1.0) {
    Count(ResponderDrop::kRateLimitedSource);
    return false;
  }
  if (!global_.TryTake(1.0)) {
    Count(ResponderDrop::kRateLimitedGlobal);
    return false;
  }
  if (it != sources_.end()) it->second.TryTake(1.0);
  return true;
}

// One receive of up to kUdpBatch waiting requests (the socket is readable), and their replies.
// Requests left over keep the socket readable: epoll reports it again on the next turn.
void EchoResponder::Loop::HandleUdp() {
  const HmacSha256* key = key_ ? &*key_ : nullptr;
  for (size_t i = 0; i < kUdpBatch; ++i) {
    rx_msgs_[i].msg_hdr = {};
    rx_msgs_[i].msg_hdr.msg_name = &rx_addr_[i];
    rx_msgs_[i].msg_hdr.msg_namelen = sizeof(sockaddr_storage);
    rx_msgs_[i].msg_hdr.msg_iov = &rx_iov_[i];
    rx_msgs_[i].msg_hdr.msg_iovlen = 1;
    if (pktinfo_) {
      rx_msgs_[i].msg_hdr.msg_control = rx_ctl_[i].bytes;
      rx_msgs_[i].msg_hdr.msg_controllen = sizeof rx_ctl_[i].bytes;
    }
  }
  const int n = recvmmsg(udp_fd_.get(), rx_msgs_.data(), kUdpBatch, MSG_DONTWAIT, nullptr);
  if (n <= 0) {
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      SocketError("recvmmsg", errno);
      // A persistent error must not spin a core: ENOMEM and the like clear with time.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return;
  }
  size_t replies = 0;
  const size_t track = track_max_.load(kRelaxed);
  size_t tracked = 0;
  for (int i = 0; i < n; ++i) {
    size_t len = rx_msgs_[i].msg_len;
    Add(bytes_in_, len);
    uint8_t* data = udp_buffers_.data() + i * kUdpBufferSize;
    if (rx_msgs_[i].msg_hdr.msg_flags & MSG_TRUNC) {
      Count(ResponderDrop::kBadLength);
      continue;
    }
    ProbeHeader h;
    DropReason r = ParseDatagram(std::span<const uint8_t>(data, len), key, &h);
    if (r != DropReason::kNone) {
      Count(FromParse(r));
      continue;
    }
    if (h.type != PacketType::kEchoRequest) {
      Count(ResponderDrop::kUnexpectedType);
      continue;
    }
    Add(udp_requests_, 1);
    if (!Admit(rx_addr_[i])) continue;
    size_t out = RewriteAsReply(h, PacketType::kEchoReply, h.payload_len, key,
                                std::span<uint8_t>(data, len));
    if (out == 0 || out > len) {  // cannot happen for a parsed request; never amplify anyway
      Count(ResponderDrop::kSendFailed);
      continue;
    }
    if (track && rx_addr_[i].ss_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&rx_addr_[i]);
      batch_flows_[tracked++] =
          (static_cast<uint64_t>(ntohl(in->sin_addr.s_addr)) << 16) | ntohs(in->sin_port);
    }
    mmsghdr& m = tx_msgs_[replies++];
    m.msg_hdr = {};
    m.msg_hdr.msg_name = &rx_addr_[i];
    m.msg_hdr.msg_namelen = rx_msgs_[i].msg_hdr.msg_namelen;
    tx_iov_[replies - 1] = {data, out};
    m.msg_hdr.msg_iov = &tx_iov_[replies - 1];
    m.msg_hdr.msg_iovlen = 1;
    if (pktinfo_) SetReplySource(rx_msgs_[i].msg_hdr, tx_ctl_[replies - 1], m.msg_hdr);
  }
  if (tracked > 0) {
    MutexLock lock(answered_mu_);
    for (size_t k = 0; k < tracked; ++k) {
      if (answered_.size() < track || answered_.contains(batch_flows_[k])) {
        answered_.insert(batch_flows_[k]);
      } else {
        ++answered_not_kept_;
      }
    }
  }
  size_t done = 0;
  while (done < replies) {
    int sent = sendmmsg(udp_fd_.get(), tx_msgs_.data() + done, replies - done, MSG_DONTWAIT);
    if (sent <= 0) {
      // The datagram at `done` failed (e.g. EAGAIN, or an unreachable peer): skip it alone.
      if (sent < 0 && errno == EINTR) continue;
      Count(ResponderDrop::kSendFailed);
      ++done;
      continue;
    }
    for (int k = 0; k < sent; ++k) Add(bytes_out_, tx_msgs_[done + k].msg_len);
    Add(udp_replies_, sent);
    done += sent;
  }
}

void EchoResponder::Loop::AcceptTcp() {
  for (;;) {
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    int fd = accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&peer), &len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
        SocketError("accept", errno);
        // Out of descriptors or memory: the connection stays in the backlog and the listener
        // stays readable. Stop watching it until the next sweep instead of spinning on it.
        if (Watch(listen_fd_.get(), 0, EPOLL_CTL_MOD).ok()) accept_paused_ = true;
      }
      return;
    }
    Fd owned(fd);
    if (conns_.size() >= options_.max_tcp_connections) {
      Count(ResponderDrop::kTcpConnectionLimit);
      continue;  // closes it
    }
    if (!Watch(fd, EPOLLIN | EPOLLRDHUP).ok()) continue;
    auto c = std::make_unique<TcpConn>();
    c->fd = std::move(owned);
    c->peer = peer;
    c->last_progress_ns = clock_.MonotonicNanos();
    conns_.emplace(fd, std::move(c));
    Add(tcp_accepted_, 1);
  }
}

bool EchoResponder::Loop::FlushTcp(TcpConn& c) {
  while (c.out_sent < c.out_len) {
    ssize_t n = send(c.fd.get(), c.frame.data() + c.out_sent, c.out_len - c.out_sent,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        // Stop reading until the reply is out: a peer cannot make us buffer more than one frame.
        return Watch(c.fd.get(), EPOLLOUT | EPOLLRDHUP, EPOLL_CTL_MOD).ok();
      }
      Count(ResponderDrop::kSendFailed);
      return false;
    }
    Add(bytes_out_, static_cast<uint64_t>(n));
    c.out_sent += static_cast<size_t>(n);
  }
  c.out_len = c.out_sent = 0;
  c.have = 0;
  c.header_parsed = false;
  return Watch(c.fd.get(), EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD).ok();
}

bool EchoResponder::Loop::ReadTcp(TcpConn& c) {
  const HmacSha256* key = key_ ? &*key_ : nullptr;
  for (;;) {
    if (c.out_len > 0) return true;  // waiting for EPOLLOUT
    uint8_t* dst;
    size_t want;
    if (c.header_parsed && c.header.type == PacketType::kBulkRequest) {
      dst = bulk_scratch_.data();
      want = static_cast<size_t>(std::min<uint64_t>(c.bulk_left, bulk_scratch_.size()));
    } else if (!c.header_parsed) {
      // Read the fixed header first, then the MAC if its flag says one follows.
      size_t need = kHeaderSize;
      if (c.have >= kHeaderSize && (c.frame[7] & kFlagAuth)) need += kMacSize;
      dst = c.frame.data() + c.have;
      want = need - c.have;
    } else {
      dst = c.frame.data() + c.have;
      want = c.header.HeaderLength() + c.header.payload_len - c.have;
    }
    ssize_t n = want == 0 ? 0 : recv(c.fd.get(), dst, want, MSG_DONTWAIT);
    if (want > 0) {
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
        Count(ResponderDrop::kTcpReset);
        return false;
      }
      if (n == 0) {
        // A clean close between frames is how a connect probe ends; mid-frame it is a drop.
        if (c.have > 0 || c.header_parsed) Count(ResponderDrop::kTcpReset);
        return false;
      }
      Add(bytes_in_, static_cast<uint64_t>(n));
      c.last_progress_ns = clock_.MonotonicNanos();
    }
    if (!c.header_parsed) {
      c.have += static_cast<size_t>(n);
      bool needs_mac = c.have >= kHeaderSize && (c.frame[7] & kFlagAuth);
      if (c.have < kHeaderSize || (needs_mac && c.have < kHeaderSize + kMacSize)) continue;
      DropReason r = ParseHeader(std::span<const uint8_t>(c.frame.data(), c.have), key, &c.header);
      if (r != DropReason::kNone) {
        Count(FromParse(r));
        return false;  // the stream cannot be resynchronized
      }
      if (c.header.type != PacketType::kEchoRequest && c.header.type != PacketType::kBulkRequest) {
        Count(ResponderDrop::kUnexpectedType);
        return false;
      }
      if (!Admit(c.peer)) return false;
      c.header_parsed = true;
      c.bulk_left = c.header.type == PacketType::kBulkRequest ? c.header.payload_len : 0;
    } else if (c.header.type == PacketType::kBulkRequest) {
      c.bulk_left -= static_cast<uint64_t>(n);
    } else {
      c.have += static_cast<size_t>(n);
    }
    // A frame is complete: answer it. The bulk ack is header-only; the echo is the same size.
    const bool bulk = c.header.type == PacketType::kBulkRequest;
    if (bulk ? c.bulk_left > 0 : c.have < c.header.HeaderLength() + c.header.payload_len) continue;
    size_t request_len = c.header.HeaderLength() + (bulk ? 0 : c.header.payload_len);
    ProbeHeader as_sent = c.header;
    if (bulk) as_sent.payload_len = 0;  // the sunk body is not in the buffer
    size_t out =
        RewriteAsReply(as_sent, bulk ? PacketType::kBulkAck : PacketType::kEchoReply,
                       as_sent.payload_len, key, std::span<uint8_t>(c.frame.data(), request_len));
    if (out == 0) {
      Count(ResponderDrop::kSendFailed);
      return false;
    }
    Add(bulk ? bulk_acks_ : tcp_echo_replies_, 1);
    c.out_len = out;
    c.out_sent = 0;
    if (!FlushTcp(c)) return false;
  }
}

void EchoResponder::Loop::CloseTcp(int fd) {
  epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);  // closing would remove it anyway
  conns_.erase(fd);
}

void EchoResponder::Loop::HandleTcp(int fd, uint32_t events) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  TcpConn& c = *it->second;
  bool keep = true;
  if (events & EPOLLOUT) keep = FlushTcp(c);
  if (keep && (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) keep = ReadTcp(c);
  if (!keep) CloseTcp(fd);
}

void EchoResponder::Loop::SweepIdle() {
  int64_t now = clock_.MonotonicNanos();
  std::vector<int> idle;
  for (auto& [fd, c] : conns_) {
    if (now - c->last_progress_ns > options_.tcp_idle_timeout_ns) idle.push_back(fd);
  }
  for (int fd : idle) {
    Count(ResponderDrop::kTcpIdleTimeout);
    CloseTcp(fd);
  }
}

bool EchoResponder::Loop::Dispatch(const epoll_event* events, int n) {
  for (int i = 0; i < n; ++i) {
    int fd = events[i].data.fd;
    if (fd == stop_fd_.get()) return false;
    if (fd == udp_fd_.get()) {
      HandleUdp();
    } else if (fd == listen_fd_.get()) {
      AcceptTcp();
    } else {
      HandleTcp(fd, events[i].events);
    }
  }
  return true;
}

void EchoResponder::Loop::OnReady(int fd) {
  if (fd == udp_fd_.get()) {
    HandleUdp();
    return;
  }
  std::array<epoll_event, 64> events;
  const int n = epoll_wait(epoll_fd_.get(), events.data(), events.size(), 0);
  if (n < 0 && errno != EINTR) SocketError("epoll_wait", errno);
  Dispatch(events.data(), std::max(n, 0));
}

int64_t EchoResponder::Loop::Service(int64_t now_ns) {
  if (now_ns - last_sweep_ns_ >= kSweepNs) {
    if (accept_paused_ && Watch(listen_fd_.get(), EPOLLIN, EPOLL_CTL_MOD).ok()) {
      accept_paused_ = false;
    }
    SweepIdle();
    last_sweep_ns_ = now_ns;
  }
  // With no connection there is nothing to time: a connection wakes the host through epoll_fd_.
  return conns_.empty() && !accept_paused_ ? INT64_MAX : last_sweep_ns_ + kSweepNs;
}

void EchoResponder::Loop::Run() {
  pthread_setname_np(pthread_self(), "fw-responder");
  std::array<epoll_event, 64> events;
  int64_t last_sweep = clock_.MonotonicNanos();
  while (!stopping_.load()) {
    // With connections open (or accept paused) the loop sweeps idle ones every 100-200 ms; with
    // none it has nothing to time and sleeps until a connection or the stop eventfd, at most 1 s
    // (the fallback should the stop write fail). A fixed 200 ms woke it 5 times a second.
    const int timeout_ms = conns_.empty() && !accept_paused_ ? 1000 : 200;
    int n = epoll_wait(epoll_fd_.get(), events.data(), events.size(), timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      SPDLOG_ERROR("component=responder msg=\"epoll_wait failed; responder stops\" error={}",
                   std::strerror(errno));
      return;
    }
    if (!Dispatch(events.data(), n)) return;
    int64_t now = clock_.MonotonicNanos();
    if (now - last_sweep > kSweepNs) {
      if (accept_paused_ && Watch(listen_fd_.get(), EPOLLIN, EPOLL_CTL_MOD).ok()) {
        accept_paused_ = false;
      }
      SweepIdle();
      last_sweep = now;
    }
  }
}

ResponderStats EchoResponder::Loop::Snapshot() const {
  ResponderStats s;
  s.udp_requests = udp_requests_.load(kRelaxed);
  s.udp_replies = udp_replies_.load(kRelaxed);
  s.tcp_accepted = tcp_accepted_.load(kRelaxed);
  s.tcp_echo_replies = tcp_echo_replies_.load(kRelaxed);
  s.bulk_acks = bulk_acks_.load(kRelaxed);
  s.bytes_in = bytes_in_.load(kRelaxed);
  s.bytes_out = bytes_out_.load(kRelaxed);
  s.source_table_full = source_table_full_.load(kRelaxed);
  s.socket_errors = socket_errors_.load(kRelaxed);
  for (size_t i = 0; i < kResponderDropCount; ++i) s.dropped[i] = dropped_[i].load(kRelaxed);
  return s;
}

StatusOr<std::unique_ptr<EchoResponder>> EchoResponder::Start(ResponderOptions options,
                                                              const Clock& clock, UdpProber* host) {
  std::unique_ptr<EchoResponder> r(new EchoResponder());
  r->loop_ = std::make_unique<Loop>(std::move(options), clock);
  Status s = r->loop_->Open(&r->port_, host == nullptr);
  if (!s.ok()) return s;
  if (host != nullptr) {
    s = host->AddGuest(r->loop_.get());
    if (!s.ok()) return s;
    r->host_ = host;
    return r;
  }
  r->thread_ = std::thread([loop = r->loop_.get()] { loop->Run(); });
  return r;
}

EchoResponder::~EchoResponder() { Stop(); }

void EchoResponder::Stop() {
  if (host_ != nullptr) {
    host_->RemoveGuest(loop_.get());
    host_ = nullptr;
    loop_->CloseAll();
  }
  if (thread_.joinable()) {
    loop_->RequestStop();
    thread_.join();
    loop_->CloseAll();
  }
}

ResponderStats EchoResponder::Stats() const { return loop_->Snapshot(); }

Status EchoResponder::SetAllowedPeers(const std::vector<std::string>& addresses,
                                      std::chrono::nanoseconds keep_previous) {
  std::unordered_set<SourceKey, SourceKeyHash> allowed;
  for (const std::string& a : addresses) {
    StatusOr<SocketAddress> parsed = ParseAddress(a, 0);
    if (!parsed.ok()) return Status::InvalidArgument("allowed peer: " + parsed.status().message());
    allowed.insert(KeyOf(parsed->storage));
  }
  loop_->PostAllowed(std::move(allowed), keep_previous.count());
  return Status::Ok();
}

void EchoResponder::TrackAnsweredUdpFlows(size_t max) {
  loop_->track_max_.store(max, std::memory_order_relaxed);
}

std::vector<AnsweredUdpFlow> EchoResponder::TakeAnsweredUdpFlows(uint64_t* not_kept) {
  std::unordered_set<uint64_t> taken;
  uint64_t missed = 0;
  {
    MutexLock lock(loop_->answered_mu_);
    taken.swap(loop_->answered_);
    missed = std::exchange(loop_->answered_not_kept_, 0);
  }
  if (not_kept) *not_kept = missed;
  std::vector<AnsweredUdpFlow> out;
  out.reserve(taken.size());
  for (uint64_t k : taken) {
    out.push_back(AnsweredUdpFlow{static_cast<uint32_t>(k >> 16), static_cast<uint16_t>(k)});
  }
  return out;
}

}  // namespace fw::net
