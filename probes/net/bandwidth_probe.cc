// Bandwidth burst: nonblocking connect, stream the payload, wait for the responder's ack.
#include "probes/net/bandwidth_probe.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <thread>

#include "probes/net/probe_packet.h"
#include "probes/net/socket_util.h"

namespace fw::net {
namespace {
constexpr size_t kChunk = 256 * 1024;
constexpr double kMss = 1448;

// Waits for `events` on `fd` until `deadline_ns`. Returns 1 ready, 0 timed out, or an error.
StatusOr<int> WaitFor(const Clock& clock, int fd, short events, int64_t deadline_ns) {
  for (;;) {
    int64_t left = deadline_ns - clock.MonotonicNanos();
    if (left <= 0) return 0;
    pollfd p{fd, events, 0};
    timespec ts{static_cast<time_t>(left / 1'000'000'000), static_cast<long>(left % 1'000'000'000)};
    int n = ppoll(&p, 1, &ts, nullptr);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("ppoll", errno);
    }
    if (n > 0) return 1;
  }
}
}  // namespace

BandwidthProbe::BandwidthProbe(const Clock& clock, ProbeBudget* budget,
                               std::optional<std::string> key)
    : clock_(clock), budget_(budget), chunk_(kChunk, 0) {
  if (key) key_.emplace(*key);
}

double BandwidthBurstBytes(uint64_t payload_bytes) {
  return static_cast<double>(payload_bytes) * (1 + 52 / kMss);
}

StatusOr<ProbeResult> BandwidthProbe::Run(const TcpTarget& target,
                                          const BandwidthOptions& options) {
  const std::string who = "bandwidth probe to " + target.name;
  if (options.bytes == 0 || options.bytes > kMaxBulkPayload) {
    return Status::InvalidArgument(who + ": bytes must be 1.." + std::to_string(kMaxBulkPayload));
  }
  StatusOr<SocketAddress> dst = ParseAddress(target.address, target.port);
  if (!dst.ok()) return Status::InvalidArgument(who + ": " + dst.status().message());
  if (budget_ && !budget_->TryConsume(0, BandwidthBurstBytes(options.bytes))) {
    return Status::ResourceExhausted(who + ": the probe budget cannot pay for " +
                                     std::to_string(options.bytes) + " bytes now");
  }
  ProbeResult r;
  r.SetPeer(target.name);
  r.transport = Transport::kTcpBw;
  r.dst_port = target.port;
  r.seq = seq_++;
  r.bytes = options.bytes;
  r.timestamp_ns = clock_.WallNanos();
  // A burst on a host whose CPUs are saturated measures the host, not the path: the analyzer
  // sets such low bursts aside (docs/analysis.md). A failed reading leaves "not measured".
  // Both are read over the lead and the burst: the kernel weighs PSI's per-CPU stall times by
  // their non-idle time in jiffies (docs/probes.md), so a share over a few milliseconds reads 0
  // or 1; over 120 ms it is within a few percent.
  pressure_.Start(clock_.MonotonicNanos());
  if (cpu_.Start().ok() && options.cpu_lead.count() > 0) std::this_thread::sleep_for(options.cpu_lead);
  const int64_t deadline = clock_.MonotonicNanos() + options.timeout.count();

  Fd fd(socket(dst->family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus(who + ": socket", errno);
  if (Status b = BindSource(fd.get(), dst->family(), target.source); !b.ok()) {
    return Status(b.code(), who + ": " + b.message());
  }
  if (connect(fd.get(), dst->get(), dst->len) != 0 && errno != EINPROGRESS) {
    return ErrnoStatus(who + ": connect " + dst->ToString(), errno);
  }
  StatusOr<int> ready = WaitFor(clock_, fd.get(), POLLOUT, deadline);
  if (!ready.ok()) return ready.status();
  if (*ready == 0) {
    r.lost = true;
    return r;
  }
  int so_error = 0;
  socklen_t len = sizeof so_error;
  if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) so_error = errno;
  if (so_error != 0) return ErrnoStatus(who + ": connect " + dst->ToString(), so_error);
  if (StatusOr<SocketAddress> local = LocalAddress(fd.get()); local.ok()) {
    r.src_port = local->port();
  }

  const HmacSha256* key = key_ ? &*key_ : nullptr;
  const int64_t start = clock_.MonotonicNanos();
  ProbeHeader h;
  h.type = PacketType::kBulkRequest;
  h.payload_len = static_cast<uint32_t>(options.bytes);
  h.seq = r.seq;
  h.send_ts_ns = start;
  uint8_t header[kHeaderSize + kMacSize];
  const size_t header_len = WriteHeader(h, key, header);
  uint64_t header_sent = 0, payload_sent = 0;
  while (header_sent < header_len || payload_sent < options.bytes) {
    ssize_t n;
    if (header_sent < header_len) {
      n = send(fd.get(), header + header_sent, header_len - header_sent, MSG_NOSIGNAL);
    } else {
      size_t chunk = static_cast<size_t>(std::min<uint64_t>(kChunk, options.bytes - payload_sent));
      n = send(fd.get(), chunk_.data(), chunk, MSG_NOSIGNAL);
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return ErrnoStatus(who + ": send", errno);
      StatusOr<int> w = WaitFor(clock_, fd.get(), POLLOUT, deadline);
      if (!w.ok()) return w.status();
      if (*w == 0) {
        r.lost = true;
        return r;
      }
      continue;
    }
    (header_sent < header_len ? header_sent : payload_sent) += static_cast<uint64_t>(n);
  }

  // The ack: one header, plus a MAC when its flag says so (a keyless responder sends none, and
  // the parser then reports missing_auth instead of this side waiting for bytes that never come).
  uint8_t ack[kHeaderSize + kMacSize];
  size_t ack_len = kHeaderSize;
  size_t got = 0;
  while (got < ack_len) {
    ssize_t n = recv(fd.get(), ack + got, ack_len - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      if (got == kHeaderSize && (ack[7] & kFlagAuth)) ack_len = kHeaderSize + kMacSize;
      continue;
    }
    if (n == 0) return Status::Unavailable(who + ": the responder closed before acking the burst");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return ErrnoStatus(who + ": recv ack", errno);
    StatusOr<int> w = WaitFor(clock_, fd.get(), POLLIN, deadline);
    if (!w.ok()) return w.status();
    if (*w == 0) {
      r.lost = true;
      return r;
    }
  }
  const int64_t end = clock_.MonotonicNanos();
  ProbeHeader a;
  DropReason why = ParseHeader(std::span<const uint8_t>(ack, got), key, &a);
  if (why != DropReason::kNone) {
    return Status::Unavailable(who + ": malformed ack (" + std::string(DropReasonName(why)) + ")");
  }
  if (a.type != PacketType::kBulkAck || a.seq != r.seq || a.send_ts_ns != start) {
    return Status::Unavailable(who + ": the ack does not match the burst");
  }
  last_pressure_ = pressure_.Stop(clock_.MonotonicNanos());
  r.cpu_pressure_permille = static_cast<uint16_t>(BusyPermille(last_pressure_.some));
  const CpuBusy busy = cpu_.Stop();
  r.cpu_busy_permille = static_cast<uint16_t>(BusyPermille(busy.all));
  r.cpu_peak_permille = static_cast<uint16_t>(BusyPermille(busy.busiest));
  r.rtt_ns = end - start;
  r.goodput_bps = static_cast<double>(options.bytes) * 8.0 / (static_cast<double>(r.rtt_ns) * 1e-9);
  return r;
}

}  // namespace fw::net
