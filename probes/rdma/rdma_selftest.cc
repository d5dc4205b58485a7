// rdma-selftest: loopback UD latency and RC write bandwidth on one port.
#include "probes/rdma/rdma_selftest.h"

#include <poll.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

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

double Quantile(std::vector<int64_t> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return static_cast<double>(v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))]);
}

std::string Fmt(const char* f, double a) {
  char b[64];
  std::snprintf(b, sizeof(b), f, a);
  return b;
}

}  // namespace

int RunSelftest(Verbs& verbs, const Clock& clock, const SelftestOptions& o, std::ostream& out) {
  auto list = verbs.ListDevices();
  if (!list.ok()) {
    out << "rdma: unavailable (" << list.status().message() << ")\n";
    return 3;
  }
  bool found = false;
  std::string have;
  for (const DeviceInfo& d : *list) {
    found = found || d.name == o.device;
    have += (have.empty() ? "" : ",") + d.name;
  }
  if (!found) {
    out << "rdma: no device " << o.device << " (have: " << (have.empty() ? "none" : have) << ")\n";
    return 3;
  }

  // UD: the port probes its own endpoint; the NIC loops the packets back.
  UdMeshOptions mo;
  mo.devices = {o.device};
  mo.max_rate_hz = std::max(1.0, o.rate_hz);
  Keep keep;
  auto mesh = UdMesh::Create(verbs, clock, mo, &keep);
  if (!mesh.ok()) {
    out << "rdma: " << o.device << ": " << mesh.status().message() << "\n";
    return 3;
  }
  std::vector<UdEndpoint> eps = (*mesh)->Endpoints();
  auto ep = std::find_if(eps.begin(), eps.end(),
                         [&](const UdEndpoint& e) { return o.port == 0 || e.port == o.port; });
  if (ep == eps.end()) {
    out << "rdma: " << o.device << " has no usable port " << o.port << "\n";
    return 3;
  }
  UdTarget t;
  t.peer = "loopback";
  t.local_device = o.device;
  t.local_port = ep->port;
  t.remote = *ep;
  t.flows = std::clamp(o.flows, 1, 64);
  t.rate_hz = o.rate_hz;
  (*mesh)->SetTargets({t});
  const int64_t end = clock.MonotonicNanos() + static_cast<int64_t>(o.seconds * 1e9);
  while (clock.MonotonicNanos() < end) {
    const int64_t wait = std::min<int64_t>((*mesh)->Step(), end - clock.MonotonicNanos());
    std::vector<pollfd> fds;
    for (int fd : (*mesh)->WaitFds()) fds.push_back({fd, POLLIN, 0});
    const timespec ts{static_cast<time_t>(std::max<int64_t>(0, wait) / 1'000'000'000),
                      static_cast<long>(std::max<int64_t>(0, wait) % 1'000'000'000)};
    ::ppoll(fds.data(), fds.size(), &ts, nullptr);
  }
  // Let the last answers come in.
  for (int i = 0; i < 100; ++i) {
    (*mesh)->Step();
    const timespec ts{0, 1'000'000};
    ::ppoll(nullptr, 0, &ts, nullptr);
  }
  const UdMeshStats& st = (*mesh)->stats();
  int rc = 0;
  out << "device " << o.device << " port " << int(ep->port) << " link_layer "
      << LinkLayerName(ep->link_layer) << " lid " << ep->lid << " gid_index " << ep->gid_index
      << " gid " << ep->gid.ToString() << " qpn " << ep->qpn << "\n";
  out << "ud: probes " << st.sent.load() << " answered " << keep.net.size() << " lost " << keep.lost
      << " invalid " << st.invalid_split.load() << " timestamps " << TsSourceName(keep.source)
      << "\n";
  out << "ud: network_rtt_us p50 " << Fmt("%.2f", Quantile(keep.net, 0.5) / 1e3) << " p99 "
      << Fmt("%.2f", Quantile(keep.net, 0.99) / 1e3) << "  prober_host_us p50 "
      << Fmt("%.2f", Quantile(keep.prober, 0.5) / 1e3) << "  responder_host_us p50 "
      << Fmt("%.2f", Quantile(keep.responder, 0.5) / 1e3) << "\n";
  if (keep.net.empty() || keep.lost > 0 || st.invalid_split.load() > 0) rc = 2;
  mesh->reset();

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
    RcWriteOptions ro;
    ro.burst_bytes = o.rc_burst_bytes;
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
    std::vector<int64_t> mbps;
    for (int i = 0; i < o.rc_bursts; ++i) {
      auto r = (*a)->RunBurst(clock);
      if (!r.ok()) {
        out << "rc: burst " << i << ": " << r.status().message() << "\n";
        rc = 2;
        break;
      }
      mbps.push_back(static_cast<int64_t>(r->gbps * 1000));
    }
    out << "rc: write " << ro.message_bytes << " B x " << ro.queue_depth << " in flight, "
        << mbps.size() << " bursts of " << o.rc_burst_bytes << " B: Gb/s median "
        << Fmt("%.2f", Quantile(mbps, 0.5) / 1e3) << " max "
        << Fmt("%.2f", mbps.empty()
                           ? NAN
                           : static_cast<double>(*std::max_element(mbps.begin(), mbps.end())) / 1e3)
        << "\n";
    b->reset();
    a->reset();
  }
  return rc;
}

}  // namespace fw::rdma
