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

std::vector<StatusOr<ProbeResult>> TcpConnectProber::ProbeAll(std::span<const TcpTarget> targets,
                                                              std::chrono::nanoseconds timeout) {
  struct Attempt {
    Fd fd;
    int64_t start_ns = 0;
    ProbeResult result;
    bool done = false;
  };
  std::vector<StatusOr<ProbeResult>> out(targets.size(), Status::Internal("not probed"));
  std::vector<Attempt> attempts(targets.size());
  const int64_t wall = clock_.WallNanos();
  size_t waiting = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    const TcpTarget& t = targets[i];
    Attempt& a = attempts[i];
    a.done = true;
    StatusOr<SocketAddress> dst = ParseAddress(t.address, t.port);
    if (!dst.ok()) {
      out[i] = Status::InvalidArgument("tcp probe to " + t.name + ": " + dst.status().message());
      continue;
    }
    if (budget_ && !budget_->TryConsume(3, kConnectProbeBytes)) {
      out[i] = Status::ResourceExhausted("tcp probe to " + t.name + ": probe budget spent");
      continue;
    }
    a.fd.Reset(socket(dst->family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!a.fd.valid()) {
      out[i] = ErrnoStatus("tcp probe socket", errno);
      continue;
    }
    if (Status b = BindSource(a.fd.get(), dst->family(), t.source); !b.ok()) {
      out[i] = Status(b.code(), "tcp probe to " + t.name + ": " + b.message());
      a.fd.Reset(-1);
      continue;
    }
    a.result.SetPeer(t.name);
    a.result.transport = Transport::kTcpConnect;
    a.result.dst_port = t.port;
    a.result.seq = seq_++;
    a.result.bytes = static_cast<uint64_t>(kConnectProbeBytes);
    a.result.timestamp_ns = wall;
    a.start_ns = clock_.MonotonicNanos();
    int rc = connect(a.fd.get(), dst->get(), dst->len);
    int err = rc == 0 ? 0 : errno;
    if (StatusOr<SocketAddress> local = LocalAddress(a.fd.get()); local.ok()) {
      a.result.src_port = local->port();
    }
    if (err == 0) {  // immediate completion (loopback can do this)
      a.result.rtt_ns = clock_.MonotonicNanos() - a.start_ns;
      out[i] = a.result;
    } else if (err == EINPROGRESS) {
      a.done = false;
      ++waiting;
    } else {
      out[i] = ErrnoStatus("tcp connect to " + t.name + " " + dst->ToString(), err);
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
      if (!attempts[i].done) {
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
    const int64_t now = clock_.MonotonicNanos();
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Attempt& a = attempts[index[k]];
      a.done = true;
      --waiting;
      int so_error = 0;
      socklen_t len = sizeof so_error;
      if (getsockopt(a.fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) so_error = errno;
      if (so_error != 0) {
        out[index[k]] = ErrnoStatus("tcp connect to " + std::string(a.result.PeerName()), so_error);
        continue;
      }
      a.result.rtt_ns = now - a.start_ns;
      out[index[k]] = a.result;
    }
  }
  for (size_t i = 0; i < attempts.size(); ++i) {
    if (!attempts[i].done) {  // no handshake within the timeout: lost
      attempts[i].result.lost = true;
      out[i] = attempts[i].result;
    }
  }
  return out;
}

}  // namespace fw::net
