// TCP connect-latency probe over poll().
#include "probes/net/tcp_prober.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "probes/net/socket_util.h"

namespace fw::net {
namespace {
constexpr double kConnectProbeBytes = 180;  // SYN + ACK + FIN with IPv4/TCP headers and options
}

StatusOr<ConnectAttempt> TcpConnectProber::Begin(const TcpTarget& t, int64_t wall_ns) {
  StatusOr<SocketAddress> dst = ParseAddress(t.address, t.port);
  if (!dst.ok()) {
    return Status::InvalidArgument("tcp probe to " + t.name + ": " + dst.status().message());
  }
  if (budget_ && !budget_->TryConsume(3, kConnectProbeBytes)) {
    return Status::ResourceExhausted("tcp probe to " + t.name + ": probe budget spent");
  }
  ConnectAttempt a;
  a.fd.Reset(socket(dst->family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!a.fd.valid()) return ErrnoStatus("tcp probe socket", errno);
  if (Status b = BindSource(a.fd.get(), dst->family(), t.source); !b.ok()) {
    return Status(b.code(), "tcp probe to " + t.name + ": " + b.message());
  }
  a.result.SetPeer(t.name);
  a.result.transport = Transport::kTcpConnect;
  a.result.dst_port = t.port;
  a.result.seq = seq_++;
  a.result.bytes = static_cast<uint64_t>(kConnectProbeBytes);
  a.result.timestamp_ns = wall_ns;
  a.start_ns = clock_.MonotonicNanos();
  int rc = connect(a.fd.get(), dst->get(), dst->len);
  int err = rc == 0 ? 0 : errno;
  if (StatusOr<SocketAddress> local = LocalAddress(a.fd.get()); local.ok()) {
    a.result.src_port = local->port();
  }
  if (err == 0) {  // immediate completion (loopback can do this)
    a.result.rtt_ns = clock_.MonotonicNanos() - a.start_ns;
    a.fd.Reset(-1);
    return a;
  }
  if (err != EINPROGRESS) {
    return ErrnoStatus("tcp connect to " + t.name + " " + dst->ToString(), err);
  }
  return a;
}

StatusOr<ProbeResult> TcpConnectProber::Finish(ConnectAttempt& a) {
  const int64_t now = clock_.MonotonicNanos();
  int so_error = 0;
  socklen_t len = sizeof so_error;
  if (getsockopt(a.fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) so_error = errno;
  a.fd.Reset(-1);
  if (so_error != 0) {
    return ErrnoStatus("tcp connect to " + std::string(a.result.PeerName()), so_error);
  }
  a.result.rtt_ns = now - a.start_ns;
  return a.result;
}

ProbeResult TcpConnectProber::Lost(ConnectAttempt& a) {
  a.fd.Reset(-1);
  a.result.lost = true;
  return a.result;
}

std::vector<StatusOr<ProbeResult>> TcpConnectProber::ProbeAll(std::span<const TcpTarget> targets,
                                                              std::chrono::nanoseconds timeout) {
  std::vector<StatusOr<ProbeResult>> out(targets.size(), Status::Internal("not probed"));
  std::vector<ConnectAttempt> attempts(targets.size());
  const int64_t wall = clock_.WallNanos();
  size_t waiting = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    StatusOr<ConnectAttempt> a = Begin(targets[i], wall);
    if (!a.ok()) {
      out[i] = a.status();
    } else if (!a->fd.valid()) {
      out[i] = a->result;
    } else {
      attempts[i] = std::move(*a);
      ++waiting;
    }
  }

  const int64_t deadline = clock_.MonotonicNanos() + timeout.count();
  std::vector<pollfd> fds;
  std::vector<size_t> index;
  while (waiting > 0) {
    int64_t left = deadline - clock_.MonotonicNanos();
    if (left <= 0) break;
    fds.clear();
    index.clear();
    for (size_t i = 0; i < attempts.size(); ++i) {
      if (attempts[i].fd.valid()) {
        fds.push_back({attempts[i].fd.get(), POLLOUT, 0});
        index.push_back(i);
      }
    }
    timespec ts{static_cast<time_t>(left / 1'000'000'000), static_cast<long>(left % 1'000'000'000)};
    int n = ppoll(fds.data(), fds.size(), &ts, nullptr);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = ErrnoStatus("ppoll", errno);
      for (size_t i : index) out[i] = s;
      return out;
    }
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      out[index[k]] = Finish(attempts[index[k]]);
      --waiting;
    }
  }
  for (size_t i = 0; i < attempts.size(); ++i) {
    if (attempts[i].fd.valid()) out[i] = Lost(attempts[i]);  // no handshake within the timeout
  }
  return out;
}

}  // namespace fw::net
