// rdma-selftest: UD latency and RC write bandwidth on one port, in loopback or between two hosts.
#include "probes/rdma/rdma_selftest.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "probes/net/socket_util.h"
#include "probes/rdma/gid_table.h"
#include "probes/rdma/rc_write_bw.h"
#include "probes/rdma/ud_mesh.h"

namespace fw::rdma {
namespace {

struct Keep : ResultSink {
  void OnResult(const RdmaProbeResult& r) override {
    if (r.base.lost) {
      ++lost;
      return;
    }
    if (net.size() < 1'000'000) {
      net.push_back(r.network_rtt_ns);
      prober.push_back(r.prober_host_ns);
      responder.push_back(r.responder_host_ns);
      source = r.source;
    }
  }
  std::vector<int64_t> net, prober, responder;
  uint64_t lost = 0;
  TsSource source = TsSource::kSoftware;
};

// The q-quantile, -1 when there is none.
int64_t Quantile(std::vector<int64_t> v, double q) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

std::string Fmt(const char* f, double a) {
  char b[64];
  std::snprintf(b, sizeof(b), f, a);
  return b;
}

// Microseconds (or Gb/s from Mb/s) with two decimals; "nan" (text) or null (JSON) for none.
std::string Milli(int64_t v, bool json) {
  if (v < 0) return json ? "null" : "nan";
  return Fmt("%.2f", static_cast<double>(v) / 1e3);
}

std::string JsonString(std::string_view s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o + "\"";
}

SelftestFigures UdFigures(const Keep& keep, const UdMeshStats& st) {
  SelftestFigures g;
  g.sent = st.sent.load();
  g.answered = keep.net.size();
  g.lost = keep.lost;
  g.invalid = st.invalid_split.load();
  g.source = keep.source;
  g.net_p50_ns = Quantile(keep.net, 0.5);
  g.net_p99_ns = Quantile(keep.net, 0.99);
  g.prober_p50_ns = Quantile(keep.prober, 0.5);
  g.responder_p50_ns = Quantile(keep.responder, 0.5);
  return g;
}

// 0 when everything measured cleanly, else 2.
int Verdict(const SelftestFigures& g) {
  const bool bad = g.answered == 0 || g.lost > 0 || g.invalid > 0 || g.rc_failed ||
                   g.rc_bursts_ok < g.rc_bursts_asked;
  return bad ? 2 : 0;
}

// Runs `n` bursts; figures into `g`; a failed burst's reason into `err`.
void RunBursts(RcWriteBw& w, const Clock& clock, int n, SelftestFigures& g, std::string& err) {
  std::vector<int64_t> mbps;
  g.rc_bursts_asked = n;
  for (int i = 0; i < n; ++i) {
    auto r = w.RunBurst(clock);
    if (!r.ok()) {
      err = "burst " + std::to_string(i) + ": " + r.status().message();
      g.rc_failed = true;
      break;
    }
    mbps.push_back(static_cast<int64_t>(r->gbps * 1000));
  }
  g.rc_bursts_ok = static_cast<int>(mbps.size());
  g.rc_mbps_median = Quantile(mbps, 0.5);
  g.rc_mbps_max = mbps.empty() ? -1 : *std::max_element(mbps.begin(), mbps.end());
}

struct ReportHead {
  const char* mode = "loopback";  // loopback | client | server
  UdEndpoint local;
  std::string peer_host;  // peer modes
  UdEndpoint peer;
  uint64_t answered_for_peer = 0;  // server: probes of the peer it answered
};

void PrintReport(std::ostream& out, const SelftestOptions& o, const ReportHead& h,
                 const SelftestFigures& g, const RcWriteOptions& ro, const std::string& rc_error,
                 int code) {
  const UdEndpoint& e = h.local;
  const bool peer_mode = !h.peer_host.empty();
  if (o.json) {
    auto endpoint = [](const UdEndpoint& p) {
      return "{\"device\":" + JsonString(p.device) + ",\"port\":" + std::to_string(p.port) +
             ",\"link_layer\":" + JsonString(LinkLayerName(p.link_layer)) +
             ",\"lid\":" + std::to_string(p.lid) + ",\"gid_index\":" + std::to_string(p.gid_index) +
             ",\"gid\":" + JsonString(p.gid.ToString()) + ",\"qpn\":" + std::to_string(p.qpn) + "}";
    };
    out << "{\"mode\":" << JsonString(h.mode) << ",\"local\":" << endpoint(e);
    if (peer_mode) {
      out << ",\"peer\":{\"host\":" << JsonString(h.peer_host)
          << ",\"endpoint\":" << endpoint(h.peer) << "}";
    }
    if (std::string_view(h.mode) == "server") {
      out << ",\"answered_for_peer\":" << h.answered_for_peer;
    }
    out << ",\"ud\":{\"probes\":" << g.sent << ",\"answered\":" << g.answered
        << ",\"lost\":" << g.lost << ",\"invalid\":" << g.invalid
        << ",\"timestamps\":" << JsonString(TsSourceName(g.source))
        << ",\"network_rtt_us_p50\":" << Milli(g.net_p50_ns, true)
        << ",\"network_rtt_us_p99\":" << Milli(g.net_p99_ns, true)
        << ",\"prober_host_us_p50\":" << Milli(g.prober_p50_ns, true)
        << ",\"responder_host_us_p50\":" << Milli(g.responder_p50_ns, true) << "}";
    out << ",\"rc\":{\"bursts\":" << g.rc_bursts_asked << ",\"bursts_ok\":" << g.rc_bursts_ok
        << ",\"message_bytes\":" << ro.message_bytes << ",\"queue_depth\":" << ro.queue_depth
        << ",\"burst_bytes\":" << o.rc_burst_bytes
        << ",\"gbps_median\":" << Milli(g.rc_mbps_median, true)
        << ",\"gbps_max\":" << Milli(g.rc_mbps_max, true)
        << ",\"error\":" << (rc_error.empty() ? "null" : JsonString(rc_error)) << "}";
    out << ",\"exit\":" << code << "}\n";
    return;
  }
  out << "device " << e.device << " port " << int(e.port) << " link_layer "
      << LinkLayerName(e.link_layer) << " lid " << e.lid << " gid_index " << e.gid_index << " gid "
      << e.gid.ToString() << " qpn " << e.qpn << "\n";
  if (peer_mode) {
    out << "peer " << h.peer_host << " device " << h.peer.device << " port " << int(h.peer.port)
        << " lid " << h.peer.lid << " gid_index " << h.peer.gid_index << " gid "
        << h.peer.gid.ToString() << " qpn " << h.peer.qpn << "\n";
  }
  if (std::string_view(h.mode) == "server") {
    out << "server: answered " << h.answered_for_peer
        << " probes of the peer; the figures below are the client's\n";
  }
  out << "ud: probes " << g.sent << " answered " << g.answered << " lost " << g.lost << " invalid "
      << g.invalid << " timestamps " << TsSourceName(g.source) << "\n";
  out << "ud: network_rtt_us p50 " << Milli(g.net_p50_ns, false) << " p99 "
      << Milli(g.net_p99_ns, false) << "  prober_host_us p50 " << Milli(g.prober_p50_ns, false)
      << "  responder_host_us p50 " << Milli(g.responder_p50_ns, false) << "\n";
  if (g.rc_bursts_asked > 0) {
    if (!rc_error.empty()) out << "rc: " << rc_error << "\n";
    out << "rc: write " << ro.message_bytes << " B x " << ro.queue_depth << " in flight, "
        << g.rc_bursts_ok << " bursts of " << o.rc_burst_bytes << " B: Gb/s median "
        << Milli(g.rc_mbps_median, false) << " max " << Milli(g.rc_mbps_max, false) << "\n";
  }
}

// 0 when `device` exists; else prints why and returns 3.
int CheckDevice(Verbs& verbs, const std::string& device, std::ostream& out) {
  auto list = verbs.ListDevices();
  if (!list.ok()) {
    out << "rdma: unavailable (" << list.status().message() << ")\n";
    return 3;
  }
  std::string have;
  for (const DeviceInfo& d : *list) {
    if (d.name == device) return 0;
    have += (have.empty() ? "" : ",") + d.name;
  }
  out << "rdma: no device " << device << " (have: " << (have.empty() ? "none" : have) << ")\n";
  return 3;
}

// Steps the mesh (when given) and waits on its fds and `extra` for at most `wait_ns`.
void StepAndWait(UdMesh* mesh, int extra, int64_t wait_ns) {
  if (mesh != nullptr) wait_ns = std::min(wait_ns, mesh->Step());
  std::vector<pollfd> fds;
  if (extra >= 0) fds.push_back({extra, POLLIN, 0});
  if (mesh != nullptr) {
    for (int fd : mesh->WaitFds()) fds.push_back({fd, POLLIN, 0});
  }
  wait_ns = std::max<int64_t>(0, wait_ns);
  const timespec ts{static_cast<time_t>(wait_ns / 1'000'000'000),
                    static_cast<long>(wait_ns % 1'000'000'000)};
  ::ppoll(fds.data(), fds.size(), &ts, nullptr);
}

int64_t Ns(double seconds) { return static_cast<int64_t>(seconds * 1e9); }

// The TCP control connection: one line per message (selftest_wire.h).
class Control {
 public:
  explicit Control(net::Fd fd) : fd_(std::move(fd)) {}

  Status Send(const SelftestMsg& m, const Clock& clock, int64_t deadline) {
    const std::string line = EncodeSelftestMsg(m);
    size_t done = 0;
    while (done < line.size()) {
      const ssize_t n = ::send(fd_.get(), line.data() + done, line.size() - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return net::ErrnoStatus("send to the peer", errno);
      }
      const int64_t left = deadline - clock.MonotonicNanos();
      if (left <= 0) return Status::Unavailable("the peer does not take our message (timeout)");
      pollfd p{fd_.get(), POLLOUT, 0};
      ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left / 1'000'000 + 1, 1000)));
    }
    return Status::Ok();
  }

  // The next message, stepping `mesh` (when given) while waiting; nullopt when `deadline` passes
  // first. Unavailable when the peer closed the connection or it failed, InvalidArgument when the
  // peer sent something that is not a control message.
  StatusOr<std::optional<SelftestMsg>> Receive(UdMesh* mesh, const Clock& clock, int64_t deadline) {
    for (;;) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        auto m = ParseSelftestMsg(std::string_view(buf_).substr(0, nl));
        buf_.erase(0, nl + 1);
        if (!m.ok()) return m.status();
        return std::optional<SelftestMsg>(std::move(*m));
      }
      if (buf_.size() > kSelftestLineMax) {
        return Status::InvalidArgument("rdma-selftest control message: longer than 1024 bytes");
      }
      const int64_t left = deadline - clock.MonotonicNanos();
      if (left <= 0) return std::optional<SelftestMsg>();
      StepAndWait(mesh, fd_.get(), left);
      char tmp[2048];
      const ssize_t n = ::recv(fd_.get(), tmp, sizeof(tmp), MSG_DONTWAIT);
      if (n == 0) return Status::Unavailable("the peer closed the connection");
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        return net::ErrnoStatus("recv from the peer", errno);
      }
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }

  // Receive() for a message of `type`, which must come before `deadline`.
  StatusOr<SelftestMsg> Expect(SelftestMsgType type, const char* what, UdMesh* mesh,
                               const Clock& clock, int64_t deadline, double timeout_s) {
    auto m = Receive(mesh, clock, deadline);
    if (!m.ok()) return m.status();
    if (!m->has_value()) {
      return Status::Unavailable(std::string("no ") + what + " from the peer within " +
                                 Fmt("%.1f", timeout_s) + " s");
    }
    if ((*m)->type != type) {
      return Status::InvalidArgument(std::string("the peer sent another message than ") + what);
    }
    return std::move(**m);
  }

 private:
  net::Fd fd_;
  std::string buf_;
};

// Connects to host:port, retrying a refused connection until the deadline (the server may be
// starting). The socket is left nonblocking.
StatusOr<net::Fd> ConnectPeer(const std::string& host, uint16_t port, const Clock& clock,
                              int64_t deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) {
    return Status::Unavailable("cannot resolve " + host + ": " + ::gai_strerror(gai));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> hold(res, ::freeaddrinfo);
  Status last = Status::Unavailable("no address for " + host);
  for (;;) {
    for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
      net::Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!fd.valid()) {
        last = net::ErrnoStatus("socket", errno);
        continue;
      }
      if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
        last = net::ErrnoStatus("connect to " + host + ":" + std::to_string(port), errno);
        continue;
      }
      pollfd p{fd.get(), POLLOUT, 0};
      const int64_t left = deadline - clock.MonotonicNanos();
      if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left / 1'000'000))) <= 0) {
        last = Status::Unavailable("connect to " + host + ":" + std::to_string(port) + ": timeout");
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err == 0) return fd;
      last = net::ErrnoStatus("connect to " + host + ":" + std::to_string(port), err);
    }
    if (clock.MonotonicNanos() + 100'000'000 >= deadline) return last;
    ::usleep(100'000);
  }
}

// Listens on `port` (IPv6 and IPv4 where the host allows, else IPv4) and accepts one peer.
StatusOr<net::Fd> AcceptPeer(const SelftestOptions& o, const Clock& clock, int64_t deadline,
                             std::string* peer_host) {
  net::Fd ls(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  net::SocketAddress addr;
  if (ls.valid()) {
    int off = 0;
    ::setsockopt(ls.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    auto a = net::ParseAddress("::", o.tcp_port);
    if (a.ok()) addr = *a;
  } else {
    ls.Reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!ls.valid()) return net::ErrnoStatus("socket", errno);
    auto a = net::ParseAddress("0.0.0.0", o.tcp_port);
    if (a.ok()) addr = *a;
  }
  int one = 1;
  ::setsockopt(ls.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(ls.get(), addr.get(), addr.len) != 0) {
    return net::ErrnoStatus("bind tcp port " + std::to_string(o.tcp_port), errno);
  }
  if (::listen(ls.get(), 1) != 0) return net::ErrnoStatus("listen", errno);
  auto bound = net::LocalAddress(ls.get());
  if (!bound.ok()) return bound.status();
  if (o.progress != nullptr) {
    *o.progress << "rdma-selftest: waiting for a peer on tcp port " << bound->port() << " for "
                << Fmt("%.0f", o.timeout_s) << " s\n"
                << std::flush;
  }
  if (o.on_listening) o.on_listening(bound->port());
  pollfd p{ls.get(), POLLIN, 0};
  for (;;) {
    const int64_t left = deadline - clock.MonotonicNanos();
    if (left <= 0) {
      return Status::Unavailable("no peer connected within " + Fmt("%.1f", o.timeout_s) + " s");
    }
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left / 1'000'000 + 1, 1000)));
    if (n < 0 && errno != EINTR) return net::ErrnoStatus("poll", errno);
    if (n <= 0) continue;
    net::SocketAddress from;
    from.len = sizeof(from.storage);
    net::Fd fd(::accept4(ls.get(), from.get(), &from.len, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      return net::ErrnoStatus("accept", errno);
    }
    *peer_host = from.ToString();
    return fd;
  }
}

// The UD mesh on the device and the endpoint of the port asked for (the first usable one with
// port 0); null after printing why (exit 3).
std::unique_ptr<UdMesh> OpenPort(Verbs& verbs, const Clock& clock, const SelftestOptions& o,
                                 Keep& keep, UdEndpoint& ep, std::ostream& out) {
  UdMeshOptions mo;
  mo.devices = {o.device};
  mo.max_rate_hz = std::max(1.0, o.rate_hz);
  auto mesh = UdMesh::Create(verbs, clock, mo, &keep);
  if (!mesh.ok()) {
    out << "rdma: " << o.device << ": " << mesh.status().message() << "\n";
    return nullptr;
  }
  for (const UdEndpoint& e : (*mesh)->Endpoints()) {
    if (o.port == 0 || e.port == o.port) {
      ep = e;
      return std::move(*mesh);
    }
  }
  out << "rdma: " << o.device << " has no usable port " << o.port << "\n";
  return nullptr;
}

int Loopback(Verbs& verbs, const Clock& clock, const SelftestOptions& o, std::ostream& out) {
  // UD: the port probes its own endpoint; the NIC loops the packets back.
  Keep keep;
  UdEndpoint endpoint;
  std::unique_ptr<UdMesh> mesh = OpenPort(verbs, clock, o, keep, endpoint, out);
  if (!mesh) return 3;
  const UdEndpoint* ep = &endpoint;
  ReportHead head;
  head.local = *ep;
  UdTarget t;
  t.peer = "loopback";
  t.local_device = o.device;
  t.local_port = ep->port;
  t.remote = *ep;
  t.flows = std::clamp(o.flows, 1, 64);
  t.rate_hz = o.rate_hz;
  mesh->SetTargets({t});
  const int64_t end = clock.MonotonicNanos() + Ns(o.seconds);
  while (clock.MonotonicNanos() < end) {
    StepAndWait(mesh.get(), -1, end - clock.MonotonicNanos());
  }
  // Let the last answers come in.
  for (int i = 0; i < 100; ++i) StepAndWait(mesh.get(), -1, 1'000'000);
  SelftestFigures g = UdFigures(keep, mesh->stats());
  mesh.reset();

  RcWriteOptions ro;
  ro.burst_bytes = o.rc_burst_bytes;
  std::string rc_error;
  if (o.rc_bursts > 0) {
    auto ctx = verbs.Open(o.device);
    if (!ctx.ok()) {
      out << "rc: " << ctx.status().message() << "\n";
      return 3;
    }
    auto pd = (*ctx)->AllocPd();
    if (!pd.ok()) {
      out << "rc: " << pd.status().message() << "\n";
      return 3;
    }
    auto a = RcWriteBw::Create(**ctx, **pd, ep->port, ep->gid_index, ro, 1);
    auto b = a.ok() ? RcWriteBw::Create(**ctx, **pd, ep->port, ep->gid_index, ro, 2)
                    : StatusOr<std::unique_ptr<RcWriteBw>>(a.status());
    if (!a.ok() || !b.ok()) {
      out << "rc: " << (a.ok() ? b.status() : a.status()).message() << "\n";
      return 3;
    }
    Status ca = (*a)->Connect((*b)->local());
    Status cb = ca.ok() ? (*b)->Connect((*a)->local()) : ca;
    if (!cb.ok()) {
      out << "rc: connect: " << cb.message() << "\n";
      return 3;
    }
    RunBursts(**a, clock, o.rc_bursts, g, rc_error);
    b->reset();
    a->reset();
  }
  const int code = Verdict(g);
  PrintReport(out, o, head, g, ro, rc_error, code);
  return code;
}

// Both ends between two hosts. The client probes and writes; the server answers and is written
// into; the client's figures travel back in `done` so that both ends print them.
int Peer(Verbs& verbs, const Clock& clock, const SelftestOptions& o, std::ostream& out) {
  const char* me = o.server ? "server" : "client";
  // The device, the UD port and the RC QP first, so that a host without RDMA says so before
  // anything goes on the network.
  Keep keep;
  UdEndpoint endpoint;
  std::unique_ptr<UdMesh> mesh = OpenPort(verbs, clock, o, keep, endpoint, out);
  if (!mesh) return 3;
  const UdEndpoint* ep = &endpoint;
  // The RC QP lives on the same device and port as the UD one (its context and PD).
  Context* ctx = nullptr;
  Pd* pd = nullptr;
  uint8_t any_port = 0;
  int any_gid = 0;
  if (!mesh->PortFor(o.device, ep->link_layer, &ctx, &pd, &any_port, &any_gid)) {
    out << "rdma: " << o.device << " has no usable port " << o.port << "\n";
    return 3;
  }
  RcWriteOptions ro;
  ro.burst_bytes = o.rc_burst_bytes;
  auto rc = RcWriteBw::Create(*ctx, *pd, ep->port, ep->gid_index, ro,
                              static_cast<uint64_t>(clock.WallNanos()));
  if (!rc.ok()) {
    out << "rc: " << rc.status().message() << "\n";
    return 3;
  }
  ReportHead head;
  head.mode = me;
  head.local = *ep;

  // The control connection and the exchange of connection data.
  const int64_t timeout = Ns(o.timeout_s);
  auto fd = o.server ? AcceptPeer(o, clock, clock.MonotonicNanos() + timeout, &head.peer_host)
                     : ConnectPeer(o.peer, o.tcp_port, clock, clock.MonotonicNanos() + timeout);
  if (!fd.ok()) {
    out << "rdma-selftest: " << fd.status().message() << "\n";
    return 3;
  }
  if (!o.server) head.peer_host = o.peer;
  Control ctl(std::move(*fd));
  SelftestMsg mine;
  mine.type = SelftestMsgType::kHello;
  mine.ud = *ep;
  mine.rc = (*rc)->local();
  if (!o.server) {
    mine.ud_ms = static_cast<int64_t>(o.seconds * 1e3);
    mine.rc_bursts = o.rc_bursts;
  }
  auto fail = [&](const std::string& what, const Status& st, int code) {
    out << "rdma-selftest: " << me << ": " << what << ": " << st.message() << "\n";
    return code;
  };
  Status st;
  if (!o.server) st = ctl.Send(mine, clock, clock.MonotonicNanos() + timeout);
  if (!st.ok()) return fail("sending our connection data", st, 3);
  auto theirs = ctl.Expect(SelftestMsgType::kHello, "connection data", mesh.get(), clock,
                           clock.MonotonicNanos() + timeout, o.timeout_s);
  if (!theirs.ok()) return fail("waiting for the peer's connection data", theirs.status(), 3);
  head.peer = theirs->ud;
  if (theirs->ud.link_layer != ep->link_layer) {
    return fail("connection data",
                Status::InvalidArgument("the peer's port is " +
                                        std::string(LinkLayerName(theirs->ud.link_layer)) +
                                        ", ours is " + std::string(LinkLayerName(ep->link_layer))),
                3);
  }
  st = (*rc)->Connect(theirs->rc);
  if (!st.ok()) return fail("connecting the RC QP to the peer's", st, 3);
  if (o.server) st = ctl.Send(mine, clock, clock.MonotonicNanos() + timeout);
  if (!st.ok()) return fail("sending our connection data", st, 3);

  if (o.server) {
    // Answer the client's probes (the mesh answers any probe with our QKey) and keep the fabric
    // polled while it writes, until it reports.
    const int64_t client_time =
        theirs->ud_ms * 1'000'000 + theirs->rc_bursts * (ro.timeout_ns + 1'000'000'000);
    auto done = ctl.Expect(SelftestMsgType::kDone, "figures", mesh.get(), clock,
                           clock.MonotonicNanos() + client_time + timeout, o.timeout_s);
    if (!done.ok()) return fail("waiting for the client's figures", done.status(), 2);
    head.answered_for_peer = mesh->stats().responder_answers.load();
    SelftestMsg bye;
    bye.type = SelftestMsgType::kBye;
    st = ctl.Send(bye, clock, clock.MonotonicNanos() + timeout);
    if (!st.ok()) out << "rdma-selftest: server: sending bye: " << st.message() << "\n";
    const int code = Verdict(done->figures);
    PrintReport(out, o, head, done->figures, ro, "", code);
    return code;
  }

  // Client: UD probes to the server's port, then RC bursts into its buffer.
  UdTarget t;
  t.peer = o.peer;
  t.local_device = o.device;
  t.local_port = ep->port;
  t.remote = theirs->ud;
  t.peer_device = theirs->ud.device;
  t.flows = std::clamp(o.flows, 1, 64);
  t.rate_hz = o.rate_hz;
  if (mesh->SetTargets({t}) != 0) {
    return fail("target", Status::InvalidArgument("the peer's UD endpoint cannot be probed"), 3);
  }
  // Probing, then 100 ms more for the last answers (as in loopback); the peer must stay silent.
  for (int64_t until : {clock.MonotonicNanos() + Ns(o.seconds), int64_t{0}}) {
    if (until == 0) until = clock.MonotonicNanos() + 100'000'000;
    auto m = ctl.Receive(mesh.get(), clock, until);
    if (!m.ok() || m->has_value()) {
      SelftestFigures g = UdFigures(keep, mesh->stats());
      PrintReport(out, o, head, g, ro, "", 2);
      return fail(
          "during the latency run",
          m.ok() ? Status::InvalidArgument("the peer sent a message out of turn") : m.status(), 2);
    }
  }
  SelftestFigures g = UdFigures(keep, mesh->stats());
  std::string rc_error;
  if (o.rc_bursts > 0) RunBursts(**rc, clock, o.rc_bursts, g, rc_error);
  SelftestMsg done;
  done.type = SelftestMsgType::kDone;
  done.figures = g;
  int code = Verdict(g);
  st = ctl.Send(done, clock, clock.MonotonicNanos() + timeout);
  if (st.ok()) {
    auto bye = ctl.Expect(SelftestMsgType::kBye, "bye", mesh.get(), clock,
                          clock.MonotonicNanos() + timeout, o.timeout_s);
    st = bye.status();
  }
  if (!st.ok()) code = 2;
  PrintReport(out, o, head, g, ro, rc_error, code);
  if (!st.ok()) return fail("after measuring (the server did not confirm)", st, 2);
  return code;
}

}  // namespace

int RunSelftest(Verbs& verbs, const Clock& clock, const SelftestOptions& o, std::ostream& out) {
  if (int rc = CheckDevice(verbs, o.device, out); rc != 0) return rc;
  if (o.server || !o.peer.empty()) return Peer(verbs, clock, o, out);
  return Loopback(verbs, clock, o, out);
}

}  // namespace fw::rdma
