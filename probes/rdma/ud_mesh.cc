// The UD latency mesh: probing, answering, the six-timestamp exchange, recovery.
#include "probes/rdma/ud_mesh.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

namespace fw::rdma {
namespace {

constexpr size_t kOutstandingSlots = 4096;  // probes in flight per mesh (power of two)
constexpr size_t kPendingSlots = 1024;      // acks in flight on the responder side
constexpr int kPollBatch = 32;
// How long a wakeup that posted acks from a port with software stamps polls for their send
// completions (AwaitAckStamps), and when the next wakeup comes if some are still not in.
constexpr int64_t kAckStampSpinNs = 20'000;
constexpr int64_t kReportWaitNs = 20'000'000;
// An ack whose send completion is not in this long after its report's hold is given up (its
// port failed, or a completion was lost): no report goes for it.
constexpr int64_t kAckStampLimitNs = 1'000'000'000;

uint32_t GrhFlowLabel(const uint8_t* grh) {
  return static_cast<uint32_t>((grh[1] & 0xf) << 16 | grh[2] << 8 | grh[3]);
}

// A message sent from port p: the header every probe, ack and report carries.
UdMessage MessageFrom(const UdPort& p, UdType type, uint64_t seq, uint32_t flow) {
  UdMessage m;
  m.type = type;
  m.seq = seq;
  m.flow = flow;
  m.src_qpn = p.endpoint().qpn;
  m.src_lid = p.endpoint().lid;
  m.src_qkey = kProbeQkey;
  m.src_gid = p.endpoint().gid;
  return m;
}

// Truncates to the array, always NUL-terminated.
void CopyName(std::string_view name, std::array<char, 32>& out) {
  const size_t n = std::min(name.size(), out.size() - 1);
  std::copy_n(name.data(), n, out.data());
  out[n] = '\0';
}

}  // namespace

void RdmaProbeResult::SetLocalDevice(std::string_view name) { CopyName(name, local_device); }
void RdmaProbeResult::SetPeerDevice(std::string_view name) { CopyName(name, peer_device); }

struct UdMesh::Device {
  std::string name;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Pd> pd;
  DeviceAttr attr;
  // After ctx and pd: ports are destroyed first.
  std::vector<std::unique_ptr<UdPort>> ports;
  struct PortRuntime {
    bool broken = false;   // a completion error: the QPs wait for Reset()
    bool refresh = false;  // LID/GID changed: re-read and rebuild address handles
    int64_t recover_at = 0;
    Backoff backoff{0.1, 30, 1};
  };
  std::vector<PortRuntime> rt;
  bool dead = false;
  int64_t reopen_at = 0;
  Backoff reopen_backoff{1, 60, 1};
};

struct UdMesh::Flow {
  uint32_t target = 0;
  uint16_t index = 0;
  size_t dev = 0, port = 0;
  int qp = 0;
  uint32_t flow_label = 0;
  const Ah* ah = nullptr;
  int64_t period_ns = 0;
  int64_t next_send = 0;
};

struct UdMesh::Outstanding {
  bool in_use = false;
  bool sent = false, acked = false, reported = false;
  uint64_t seq = 0;
  uint32_t flow = 0;       // index into flows_
  uint32_t wire_flow = 0;  // generation << 16 | flow index
  size_t dev = 0, port = 0;
  uint8_t epoch = 0;
  int64_t t1 = 0, t6 = 0;
  uint64_t t2 = 0, t5 = 0;
  int64_t turnaround = 0;
  TsSource responder_source = TsSource::kSoftware;
  bool responder_busy = false;  // the report's turnaround holds a wait on the responder's work
  int64_t deadline = 0;
  int64_t wall = 0;
};

// A probe answered by this responder: its ack in flight, then its report held.
struct UdMesh::Pending {
  bool in_use = false;
  bool ready = false;  // the ack's send completion is in: turnaround holds the report's value
  bool software = false;  // answered from a port with software stamps
  uint64_t t3 = 0;
  const Ah* ah = nullptr;
  uint32_t remote_qpn = 0;
  uint16_t remote_lid = 0;
  Gid remote_gid;
  uint64_t seq = 0;
  uint32_t flow = 0;
  size_t dev = 0, port = 0;
  int qp = 0;
  int64_t answered = 0;  // monotonic; the hold counts from here
  int64_t turnaround = 0;
  bool busy = false;  // the turnaround holds a wait on this thread's other work
};

UdMesh::UdMesh(Verbs& verbs, const Clock& clock, UdMeshOptions opts, ResultSink* sink,
               net::ProbeBudget* budget)
    : verbs_(verbs), clock_(clock), opts_(std::move(opts)), sink_(sink), budget_(budget) {
  outstanding_.resize(kOutstandingSlots);
  timeout_ring_.resize(kOutstandingSlots);
  pending_.resize(kPendingSlots);
  for (uint32_t i = kPendingSlots; i > 0; --i) free_pending_.push_back(i - 1);
}

UdMesh::~UdMesh() = default;

StatusOr<std::unique_ptr<UdMesh>> UdMesh::Create(Verbs& verbs, const Clock& clock,
                                                 UdMeshOptions opts, ResultSink* sink,
                                                 net::ProbeBudget* budget) {
  auto list = verbs.ListDevices();
  if (!list.ok()) return list.status();
  std::unique_ptr<UdMesh> m(new UdMesh(verbs, clock, std::move(opts), sink, budget));
  std::string reasons;
  for (const DeviceInfo& info : *list) {
    if (!m->opts_.devices.empty() && std::find(m->opts_.devices.begin(), m->opts_.devices.end(),
                                               info.name) == m->opts_.devices.end()) {
      continue;
    }
    auto d = std::make_unique<Device>();
    d->name = info.name;
    d->reopen_backoff = Backoff(1, 60, m->opts_.seed ^ std::hash<std::string>()(info.name));
    Status st = m->OpenDevice(*d);
    if (!st.ok()) {
      reasons += (reasons.empty() ? "" : "; ") + st.message();
      continue;
    }
    m->devices_.push_back(std::move(d));
  }
  if (m->devices_.empty()) {
    return Status::NotFound("no usable RDMA port (" + std::to_string(list->size()) + " devices" +
                            (reasons.empty() ? "" : ": " + reasons) + ")");
  }
  return m;
}

Status UdMesh::OpenDevice(Device& d) {
  auto ctx = verbs_.Open(d.name);
  if (!ctx.ok()) return ctx.status();
  d.ctx = std::move(ctx.value());
  auto attr = d.ctx->QueryDevice();
  if (!attr.ok()) return attr.status();
  d.attr = *attr;
  auto pd = d.ctx->AllocPd();
  if (!pd.ok()) return pd.status();
  d.pd = std::move(pd.value());
  std::string reasons;
  for (int p = 1; p <= d.attr.phys_port_cnt && p <= 255; ++p) {
    auto port = UdPort::Create(*d.ctx, *d.pd, d.attr, static_cast<uint8_t>(p), opts_.port);
    if (!port.ok()) {
      spdlog::warn("msg=\"rdma: port left out of the UD mesh\" device={} port={} error=\"{}\"",
                   d.name, p, port.status().message());
      reasons += (reasons.empty() ? "" : "; ") + port.status().message();
      continue;
    }
    spdlog::info(
        "msg=\"rdma: UD probe port ready\" device={} port={} link_layer={} lid={} "
        "gid_index={} gid={} qpn={} timestamps={}",
        d.name, p, LinkLayerName((*port)->endpoint().link_layer), (*port)->endpoint().lid,
        (*port)->endpoint().gid_index, (*port)->endpoint().gid.ToString(), (*port)->endpoint().qpn,
        TsSourceName((*port)->ts_source()));
    d.ports.push_back(std::move(port.value()));
    Device::PortRuntime rt;
    rt.backoff = Backoff(opts_.recovery_backoff_base_s, opts_.recovery_backoff_max_s,
                         opts_.seed + d.rt.size());
    d.rt.push_back(rt);
  }
  if (d.ports.empty()) {
    d.pd.reset();
    d.ctx.reset();
    return Status::NotFound(d.name + ": no usable port" +
                            (reasons.empty() ? "" : " (" + reasons + ")"));
  }
  d.dead = false;
  return Status::Ok();
}

void UdMesh::CloseDevice(Device& d, const char* why) {
  if (before_close_) before_close_(d.name);
  const size_t di = static_cast<size_t>(
      std::find_if(devices_.begin(), devices_.end(), [&](auto& p) { return p.get() == &d; }) -
      devices_.begin());
  for (size_t p = 0; p < d.ports.size(); ++p) AbandonPort(di, p);
  for (Flow& f : flows_) {
    if (f.dev == di) f.ah = nullptr;
  }
  d.ports.clear();
  d.rt.clear();
  d.pd.reset();
  d.ctx.reset();
  d.dead = true;
  d.reopen_at = clock_.MonotonicNanos() + static_cast<int64_t>(d.reopen_backoff.Next() * 1e9);
  spdlog::warn("msg=\"rdma: device closed\" device={} reason=\"{}\"", d.name, why);
}

std::vector<UdEndpoint> UdMesh::Endpoints() const {
  std::vector<UdEndpoint> out;
  for (const auto& d : devices_) {
    for (const auto& p : d->ports) out.push_back(p->endpoint());
  }
  return out;
}

std::vector<TsSource> UdMesh::TimestampSources() const {
  std::vector<TsSource> out;
  for (const auto& d : devices_) {
    for (const auto& p : d->ports) out.push_back(p->ts_source());
  }
  return out;
}

std::vector<int> UdMesh::WaitFds() const {
  std::vector<pollfd> p;
  AppendWaitFds(p);
  std::vector<int> fds;
  for (const pollfd& f : p) fds.push_back(f.fd);
  return fds;
}

void UdMesh::AppendWaitFds(std::vector<pollfd>& fds) const {
  for (const auto& d : devices_) {
    if (d->ctx != nullptr && d->ctx->async_fd() >= 0) fds.push_back({d->ctx->async_fd(), POLLIN, 0});
    for (const auto& p : d->ports) {
      if (p->cq().event_fd() >= 0) fds.push_back({p->cq().event_fd(), POLLIN, 0});
    }
  }
}

bool UdMesh::SoftwareAcksUnstamped() const { return sw_unstamped_ > 0; }

void UdMesh::AwaitAckStamps() {
  // With software stamps an ack's T4 is the poll that sees its send completion: a NIC completes
  // a 64-byte UD send a few microseconds after the post, so polling the send CQs that long keeps
  // the turnaround a turnaround. With NIC stamps T4 is the NIC's, whenever it is polled: no wait.
  if (!SoftwareAcksUnstamped()) return;
  const int64_t start = clock_.MonotonicNanos();
  int64_t last = start;
  for (int round = 0; round < 256; ++round) {
    for (size_t di = 0; di < devices_.size(); ++di) {
      if (devices_[di]->dead) continue;
      for (size_t pi = 0; pi < devices_[di]->ports.size(); ++pi) {
        if (!PollCq(di, pi, /*send=*/true, start)) break;
      }
    }
    const int64_t t = clock_.MonotonicNanos();
    // A clock that did not move (a test's FakeClock) would make this spin for nothing.
    if (!SoftwareAcksUnstamped() || t - start >= kAckStampSpinNs || t == last) return;
    last = t;
  }
}

int UdMesh::SetTargets(std::vector<UdTarget> targets) {
  // What was in flight belongs to the old plan: abandoned (no result), not lost.
  for (Outstanding& o : outstanding_) {
    if (o.in_use) {
      o.in_use = false;
      stats_.abandoned++;
    }
  }
  timeout_count_ = 0;
  ++generation_;
  targets_.clear();
  flows_.clear();
  int skipped = 0;
  const int64_t now = clock_.MonotonicNanos();
  for (UdTarget& t : targets) {
    if (t.flows < 1 || t.flows > 64 || !(t.rate_hz > 0) || !std::isfinite(t.rate_hz) ||
        t.remote.qpn == 0 || t.remote.qpn > 0xffffff ||
        (t.remote.link_layer == LinkLayer::kInfiniBand && t.remote.lid == 0) ||
        (t.remote.link_layer == LinkLayer::kEthernet && t.remote.gid.IsZero())) {
      ++skipped;
      continue;
    }
    // The local port: the named one, else the first of the target's link layer.
    bool found = false;
    size_t dev = 0, port = 0;
    for (size_t di = 0; di < devices_.size() && !found; ++di) {
      const Device& d = *devices_[di];
      if (!t.local_device.empty() && d.name != t.local_device) continue;
      for (size_t pi = 0; pi < d.ports.size() && !found; ++pi) {
        const UdEndpoint& e = d.ports[pi]->endpoint();
        if (t.local_port != 0 && e.port != t.local_port) continue;
        if (e.link_layer != t.remote.link_layer) continue;
        dev = di, port = pi, found = true;
      }
    }
    if (!found || flows_.size() + static_cast<size_t>(t.flows) > 65535) {
      ++skipped;
      continue;
    }
    const double rate = std::min(t.rate_hz, opts_.max_rate_hz);
    const auto target = static_cast<uint32_t>(targets_.size());
    for (int j = 0; j < t.flows; ++j) {
      Flow f;
      f.target = target;
      f.index = static_cast<uint16_t>(j);
      f.dev = dev;
      f.port = port;
      f.qp = j % devices_[dev]->ports[port]->qp_count();
      f.flow_label = (opts_.flow_label_base + static_cast<uint32_t>(j)) & 0xfffff;
      f.period_ns = std::max<int64_t>(1, static_cast<int64_t>(1e9 / rate));
      // A target's flows go out together, so that one wakeup at each end (the responder's for
      // the probes, ours for the acks) serves all of them; the targets' first sends spread over
      // one period (below, on the send windows when they are on).
      f.next_send = now + f.period_ns * static_cast<int64_t>(target % 16) / 16;
      flows_.push_back(f);
    }
    targets_.push_back(std::move(t));
  }
  window_ns_ = 0;
  if (opts_.send_window_ns > 0 && !flows_.empty()) {
    window_ns_ = opts_.send_window_ns;
    for (const Flow& f : flows_) window_ns_ = std::min(window_ns_, kMaxSendsPerWindow * f.period_ns);
    // The grid is the wall clock's (every host of an NTP-synced fleet has the same window
    // starts), kept in monotonic time from here on: a wall clock step moves it at the next plan.
    const int64_t wall = clock_.WallNanos();
    window_origin_ = now - ((wall % window_ns_) + window_ns_) % window_ns_;
    const int64_t first = WindowStart(now);
    for (Flow& f : flows_) {
      // The targets spread over the windows of a period: each window carries about as many
      // sends. The first window is the current one, so target 0 goes at the first Step.
      const int64_t slots = std::max<int64_t>(1, f.period_ns / window_ns_);
      f.next_send = first + window_ns_ * static_cast<int64_t>(f.target % slots);
    }
  }
  RebuildFlowAhs();
  if (skipped > 0) {
    spdlog::warn("msg=\"rdma: UD targets skipped\" skipped={} kept={}", skipped, targets_.size());
  }
  return skipped;
}

void UdMesh::RebuildFlowAhs() {
  for (Flow& f : flows_) {
    f.ah = nullptr;
    Device& d = *devices_[f.dev];
    if (d.dead || f.port >= d.ports.size()) continue;
    const UdTarget& t = targets_[f.target];
    AhKey k;
    k.global = t.remote.link_layer == LinkLayer::kEthernet;
    k.gid = t.remote.gid;
    k.lid = t.remote.lid;
    k.flow_label = k.global ? f.flow_label : 0;
    k.traffic_class = opts_.traffic_class;
    k.sl = opts_.service_level;
    Status err;
    f.ah = d.ports[f.port]->GetAh(k, &err);
    if (f.ah == nullptr) {
      stats_.ah_failures++;
      spdlog::warn("msg=\"rdma: no address handle for a target\" peer={} error=\"{}\"", t.peer,
                   err.message());
    }
  }
}

uint64_t UdMesh::Stamp(const UdPort& p, const WorkCompletion& wc, int64_t now) const {
  switch (p.ts_source()) {
    case TsSource::kNicWallclock:
      return wc.ts_wallclock;
    case TsSource::kNicRaw:
      return wc.ts_raw;
    case TsSource::kSoftware:
      break;
  }
  return static_cast<uint64_t>(now);
}

int64_t UdMesh::SpanNs(const UdPort& p, uint64_t start, uint64_t end) const {
  if (p.ts_source() == TsSource::kNicRaw) {
    return RawTicksToNs(start, end, p.device_attr().completion_timestamp_mask,
                        p.device_attr().hca_core_clock_khz);
  }
  return static_cast<int64_t>(end - start);
}

int64_t UdMesh::Step() {
  const int64_t now = clock_.MonotonicNanos();
  bool any_unchanneled = false;
  for (size_t di = 0; di < devices_.size(); ++di) {
    Device& d = *devices_[di];
    if (d.dead) {
      if (now >= d.reopen_at) {
        stats_.device_reopens++;
        Status st = OpenDevice(d);
        if (st.ok()) {
          ++endpoints_version_;
          spdlog::info("msg=\"rdma: device reopened\" device={}", d.name);
          RebuildFlowAhs();
        } else {
          d.ports.clear();
          d.rt.clear();
          d.pd.reset();
          d.ctx.reset();
          d.dead = true;
          d.reopen_at = now + static_cast<int64_t>(d.reopen_backoff.Next() * 1e9);
        }
      }
      continue;
    }
    HandleAsyncEvents(d, now);
    if (d.dead) continue;
    RecoverPorts(d, now);
    for (size_t pi = 0; pi < d.ports.size(); ++pi) {
      PollPort(di, pi, now);
      if (d.dead || pi >= d.ports.size()) break;
      Cq& cq = d.ports[pi]->cq();
      if (cq.event_fd() < 0) {
        any_unchanneled = true;  // polled on a timer (the fake)
        continue;
      }
      // Only receives wake the mesh: send CQs are never armed (see AwaitAckStamps).
      Status st = cq.Arm();
      if (!st.ok()) {
        any_unchanneled = true;
        continue;
      }
      PollPort(di, pi, now);  // what arrived before the arm raised no event
    }
  }
  AwaitAckStamps();
  FlushReports(now, /*all=*/false);
  SendDue(now);
  ExpireTimeouts(now);

  int64_t next = now + 1'000'000'000;
  for (const Flow& f : flows_) next = std::min(next, f.next_send);
  // With send windows the next send is at the start of the window that holds it (after
  // SendDue every flow is due in a later window than now's, so that start is still ahead).
  if (window_ns_ > 0 && !flows_.empty()) next = std::max(now, WindowStart(next));
  if (timeout_count_ > 0) {
    const Outstanding& o = outstanding_[timeout_ring_[timeout_head_] & (kOutstandingSlots - 1)];
    next = std::min(next, o.deadline);
  }
  for (const auto& d : devices_) {
    if (d->dead) next = std::min(next, d->reopen_at);
    for (const auto& rt : d->rt) {
      if (rt.broken) next = std::min(next, rt.recover_at);
    }
  }
  if (any_unchanneled) next = std::min(next, now + std::max<int64_t>(1, opts_.unchanneled_poll_ns));
  // A held report is due when its hold ends; an ack whose send completion is not in by then is
  // polled again every kReportWaitNs (never in a loop), and given up after kAckStampLimitNs.
  // live_pending_ is in answer order: the first entry's hold ends first.
  if (!live_pending_.empty()) {
    const Pending& pe = pending_[live_pending_.front()];
    const int64_t end = HoldEnd(pe.answered);
    next = std::min(next, pe.ready ? end : std::max(end, now + kReportWaitNs));
  }
  if (SoftwareAcksUnstamped()) next = std::min(next, now + kReportWaitNs);
  return std::max<int64_t>(0, next - now);
}

void UdMesh::HandleAsyncEvents(Device& d, int64_t now) {
  for (int guard = 0; guard < 64; ++guard) {
    auto ev = d.ctx->GetAsyncEvent();
    if (!ev.ok()) {
      if (ev.status().code() != StatusCode::kNotFound) {
        spdlog::warn("msg=\"rdma: async event read failed\" device={} error=\"{}\"", d.name,
                     ev.status().message());
      }
      return;
    }
    spdlog::info("msg=\"rdma: async event\" device={} event={} port={} qpn={}", d.name,
                 AsyncEventName(ev->type), ev->port, ev->qp_num);
    switch (ev->type) {
      case AsyncEventType::kDeviceFatal:
        stats_.device_fatal_events++;
        CloseDevice(d, "DEVICE_FATAL");
        return;
      case AsyncEventType::kPortError:
      case AsyncEventType::kPortActive:
      case AsyncEventType::kLidChange:
      case AsyncEventType::kGidChange:
        for (size_t pi = 0; pi < d.ports.size(); ++pi) {
          if (d.ports[pi]->endpoint().port != ev->port) continue;
          if (ev->type == AsyncEventType::kPortError) {
            stats_.port_down_events++;
            d.ports[pi]->set_up(false);
          } else {
            if (ev->type == AsyncEventType::kPortActive) {
              stats_.port_up_events++;
            } else {
              stats_.addr_change_events++;
            }
            d.rt[pi].refresh = true;
            d.rt[pi].recover_at = now;
          }
        }
        break;
      case AsyncEventType::kQpFatal:
      case AsyncEventType::kCqError:
        for (size_t pi = 0; pi < d.ports.size(); ++pi) {
          if (ev->type == AsyncEventType::kCqError || d.ports[pi]->QpIndex(ev->qp_num) >= 0) {
            if (!d.rt[pi].broken) {
              d.rt[pi].broken = true;
              d.rt[pi].recover_at = now + static_cast<int64_t>(d.rt[pi].backoff.Next() * 1e9);
            }
          }
        }
        break;
      case AsyncEventType::kOther:
        break;
    }
  }
}

void UdMesh::RecoverPorts(Device& d, int64_t now) {
  const size_t di = static_cast<size_t>(
      std::find_if(devices_.begin(), devices_.end(), [&](auto& p) { return p.get() == &d; }) -
      devices_.begin());
  bool rebuilt = false;
  for (size_t pi = 0; pi < d.ports.size(); ++pi) {
    Device::PortRuntime& rt = d.rt[pi];
    if (!(rt.broken || rt.refresh) || now < rt.recover_at) continue;
    UdPort& p = *d.ports[pi];
    AbandonPort(di, pi);
    Status st = rt.refresh ? p.Refresh() : Status::Ok();
    if (st.ok()) st = p.Reset();
    if (!st.ok()) {
      stats_.recovery_failures++;
      rt.recover_at = now + static_cast<int64_t>(rt.backoff.Next() * 1e9);
      spdlog::warn(
          "msg=\"rdma: UD port recovery failed\" device={} port={} retry_in_s={:.1f} "
          "error=\"{}\"",
          d.name, p.endpoint().port, (rt.recover_at - now) * 1e-9, st.message());
      continue;
    }
    if (rt.broken) stats_.qp_recoveries++;
    spdlog::info("msg=\"rdma: UD port reset\" device={} port={} reason={} up={}", d.name,
                 p.endpoint().port, rt.broken ? "qp_error" : "port_event", p.up());
    rt.broken = false;
    rt.refresh = false;
    rebuilt = true;
  }
  if (rebuilt) RebuildFlowAhs();
}

void UdMesh::AbandonPort(size_t dev, size_t port) {
  for (Outstanding& o : outstanding_) {
    if (o.in_use && o.dev == dev && o.port == port) {
      o.in_use = false;
      stats_.abandoned++;
    }
  }
  for (size_t i = live_pending_.size(); i > 0; --i) {
    const uint32_t pi = live_pending_[i - 1];
    if (pending_[pi].dev == dev && pending_[pi].port == port) ReleasePending(pi);
  }
}

void UdMesh::PortFailed(size_t dev, size_t port, int64_t now, const char* why) {
  Device::PortRuntime& rt = devices_[dev]->rt[port];
  if (rt.broken) return;
  rt.broken = true;
  rt.recover_at = now + static_cast<int64_t>(rt.backoff.Next() * 1e9);
  spdlog::warn(
      "msg=\"rdma: UD port failed, resetting its QPs after a backoff\" device={} "
      "port={} reason={} retry_in_s={:.2f}",
      devices_[dev]->name, devices_[dev]->ports[port]->endpoint().port, why,
      (rt.recover_at - now) * 1e-9);
}

void UdMesh::PollPort(size_t dev, size_t port, int64_t now) {
  // Sends first: a probe's send stamp is usually there before its ack (either order finishes).
  if (!PollCq(dev, port, /*send=*/true, now)) return;
  PollCq(dev, port, /*send=*/false, now);
}

bool UdMesh::PollCq(size_t dev, size_t port, bool send, int64_t now) {
  WorkCompletion wcs[kPollBatch];
  for (int rounds = 0; rounds < 64; ++rounds) {
    UdPort& p = *devices_[dev]->ports[port];
    auto n = (send ? p.send_cq() : p.cq()).Poll(wcs, kPollBatch);
    if (!n.ok()) {
      PortFailed(dev, port, now, "poll_failed");
      return false;
    }
    // The software stamp of this batch: when the poll returned it (T6 / T3 without NIC stamps).
    const int64_t polled = *n > 0 ? clock_.MonotonicNanos() : now;
    for (int i = 0; i < *n; ++i) HandleCompletion(dev, port, wcs[i], polled);
    if (dev >= devices_.size() || devices_[dev]->dead || port >= devices_[dev]->ports.size()) {
      return false;
    }
    if (*n < kPollBatch) return true;
  }
  return true;
}

void UdMesh::HandleCompletion(size_t dev, size_t port, const WorkCompletion& wc, int64_t now) {
  Device& d = *devices_[dev];
  UdPort& p = *d.ports[port];
  if (WrIdEpoch(wc.wr_id) != p.epoch()) return;  // from before the last reset
  const WrKind kind = WrIdKind(wc.wr_id);
  if (wc.status != WcStatus::kSuccess) {
    if (kind != WrKind::kRecv) p.ReleaseSendSlot(WrIdSlot(wc.wr_id));
    if (wc.status == WcStatus::kWrFlushErr) return;  // a consequence, counted by its cause
    stats_.completion_errors[static_cast<size_t>(wc.status)]++;
    spdlog::warn(
        "msg=\"rdma: completion error\" device={} port={} status={} vendor_err={:#x} "
        "kind={}",
        d.name, p.endpoint().port, WcStatusName(wc.status), wc.vendor_err, static_cast<int>(kind));
    PortFailed(dev, port, now, "completion_error");
    return;
  }
  switch (kind) {
    case WrKind::kRecv: {
      const uint16_t slot = WrIdSlot(wc.wr_id);
      UdMessage m;
      UdDrop why;
      const uint32_t len = wc.byte_len >= kGrhBytes ? wc.byte_len - kGrhBytes : 0;
      const bool ok = wc.byte_len >= kGrhBytes && ParseUdMessage(p.RecvPayload(slot), len, m, why);
      const uint32_t grh_flow = GrhFlowLabel(p.RecvGrh(slot));
      const uint64_t stamp = Stamp(p, wc, now);
      if (!ok) {
        stats_.dropped[static_cast<size_t>(wc.byte_len >= kGrhBytes ? why : UdDrop::kTruncated)]++;
      }
      // Repost first: the buffer is parsed; keep the receive queue full.
      Status st = p.Repost(slot);
      if (!st.ok()) {
        stats_.repost_failures++;
        PortFailed(dev, port, now, "repost_failed");
      }
      if (!ok) return;
      if (m.type == UdType::kProbe) {
        const int qp = p.QpIndex(wc.qp_num);
        OnProbe(dev, port, p, qp < 0 ? 0 : qp, m, stamp, grh_flow);
      } else if (m.type == UdType::kAck) {
        OnAck(dev, port, m, stamp, now);
      } else {
        OnReport(m, now);
      }
      return;
    }
    case WrKind::kProbe: {
      Outstanding& o = outstanding_[WrIdAux(wc.wr_id) & (kOutstandingSlots - 1)];
      p.ReleaseSendSlot(WrIdSlot(wc.wr_id));
      if (!o.in_use || o.dev != dev || o.port != port) return;
      o.sent = true;
      o.t2 = p.ts_source() == TsSource::kSoftware ? static_cast<uint64_t>(o.t1) : Stamp(p, wc, now);
      MaybeFinish(o, now);
      return;
    }
    case WrKind::kAck:
      OnAckSent(dev, port, p, wc, now);
      return;
    case WrKind::kReport:
      p.ReleaseSendSlot(WrIdSlot(wc.wr_id));
      return;
  }
}

void UdMesh::OnProbe(size_t dev, size_t port, UdPort& p, int qp, const UdMessage& m, uint64_t t3,
                     uint32_t grh_flow) {
  // Answer only probes addressed to our QKey family, from an address we can reach back.
  if (m.src_qkey != kProbeQkey || m.src_qpn == 0) {
    stats_.stray++;
    return;
  }
  // Held reports take answer slots: send them early rather than refuse a probe.
  if (free_pending_.size() < kPendingSlots / 4) FlushReports(0, /*all=*/true);
  if (free_pending_.empty()) {
    stats_.responder_busy++;
    return;
  }
  AhKey k;
  k.global = p.endpoint().link_layer == LinkLayer::kEthernet;
  k.gid = m.src_gid;
  k.lid = m.src_lid;
  k.flow_label = k.global ? grh_flow : 0;  // answer on the probe's own flow label
  k.traffic_class = opts_.traffic_class;
  k.sl = opts_.service_level;
  if (!k.global && k.lid == 0) {
    stats_.stray++;
    return;
  }
  Status err;
  const Ah* ah = p.GetAh(k, &err);
  if (ah == nullptr) {
    stats_.ah_failures++;
    return;
  }
  const int slot = p.AcquireSendSlot();
  if (slot < 0) {
    stats_.no_send_slot++;
    return;
  }
  const uint32_t pi = free_pending_.back();
  free_pending_.pop_back();
  live_pending_.push_back(pi);
  Pending& pe = pending_[pi];
  pe = Pending{};
  pe.in_use = true;
  pe.t3 = t3;
  pe.ah = ah;
  pe.remote_qpn = m.src_qpn;
  pe.remote_lid = m.src_lid;
  pe.remote_gid = m.src_gid;
  pe.seq = m.seq;
  pe.flow = m.flow;
  pe.dev = dev;
  pe.port = port;
  pe.qp = qp;
  pe.answered = clock_.MonotonicNanos();
  pe.software = p.ts_source() == TsSource::kSoftware;
  if (pe.software) ++sw_unstamped_;
  UdMessage ack = MessageFrom(p, UdType::kAck, m.seq, m.flow);
  WriteUdMessage(ack, p.SendBuffer(slot));
  Status st = p.PostSend(qp, slot, *ah, m.src_qpn, kProbeQkey,
                         MakeWrId(WrKind::kAck, p.epoch(), pi, static_cast<uint16_t>(slot)));
  if (!st.ok()) {
    stats_.post_failures++;
    p.ReleaseSendSlot(slot);
    ReleasePending(pi);
    return;
  }
  stats_.responder_answers++;
  SendReportsWithAck(pi);
}

int64_t UdMesh::HoldEnd(int64_t answered) const {
  const int64_t hold =
      std::clamp<int64_t>(opts_.report_hold_ns, 0, std::max<int64_t>(0, opts_.timeout_ns / 4));
  // With send windows the probers' next probes arrive just after the next window start, so the
  // hold runs until a quarter window past it (the fleet's clock offsets and wakeups) for their
  // acks to carry the report; never past half the timeout, by when the prober must have it.
  if (window_ns_ <= 0 || hold == 0) return answered + hold;
  const int64_t next_window = WindowStart(answered) + window_ns_ + window_ns_ / 4;
  return std::min(std::max(answered + hold, next_window), answered + opts_.timeout_ns / 2);
}

void UdMesh::ReleasePending(uint32_t pi) {
  Pending& pe = pending_[pi];
  if (pe.ready) {
    --ready_count_;
  } else if (pe.software) {
    --sw_unstamped_;
  }
  pe.in_use = false;
  pe.ready = false;
  free_pending_.push_back(pi);
  const auto it = std::find(live_pending_.begin(), live_pending_.end(), pi);
  if (it != live_pending_.end()) live_pending_.erase(it);
}

void UdMesh::SendReport(uint32_t pi) {
  Pending& pe = pending_[pi];
  Device& d = *devices_[pe.dev];
  if (d.dead || pe.port >= d.ports.size() || d.rt[pe.port].broken) {
    ReleasePending(pi);
    return;
  }
  UdPort& p = *d.ports[pe.port];
  const int slot = p.AcquireSendSlot();
  if (slot < 0) {
    stats_.no_send_slot++;
    ReleasePending(pi);
    return;
  }
  UdMessage rep = MessageFrom(p, UdType::kReport, pe.seq, pe.flow);
  rep.ts_source = p.ts_source();
  rep.turnaround_ns = std::clamp<int64_t>(pe.turnaround, 0, 10'000'000'000);
  rep.turnaround_busy = pe.busy;
  WriteUdMessage(rep, p.SendBuffer(slot));
  Status st = p.PostSend(pe.qp, slot, *pe.ah, pe.remote_qpn, kProbeQkey,
                         MakeWrId(WrKind::kReport, p.epoch(), 0, static_cast<uint16_t>(slot)));
  if (!st.ok()) {
    stats_.post_failures++;
    p.ReleaseSendSlot(slot);
  }
  ReleasePending(pi);
}

void UdMesh::SendReportsWithAck(uint32_t ack) {
  if (ready_count_ == 0) return;
  const Pending a = pending_[ack];
  for (size_t i = 0; i < live_pending_.size();) {
    const uint32_t pi = live_pending_[i];
    const Pending& pe = pending_[pi];
    if (pi != ack && pe.ready && pe.dev == a.dev && pe.port == a.port &&
        pe.remote_qpn == a.remote_qpn && pe.remote_lid == a.remote_lid &&
        pe.remote_gid == a.remote_gid) {
      stats_.reports_with_ack++;
      SendReport(pi);  // erases live_pending_[i]
      continue;
    }
    ++i;
  }
}

void UdMesh::FlushReports(int64_t now, bool all) {
  // In answer order: when the oldest's hold has not ended, no other's has.
  if (live_pending_.empty() || (!all && now < HoldEnd(pending_[live_pending_.front()].answered))) {
    return;
  }
  for (size_t i = 0; i < live_pending_.size();) {
    const uint32_t pi = live_pending_[i];
    const Pending& pe = pending_[pi];
    const int64_t end = HoldEnd(pe.answered);
    if (pe.ready && (all || now >= end)) {
      stats_.reports_after_hold++;
      SendReport(pi);  // erases live_pending_[i]
      continue;
    }
    if (!pe.ready && !all && now >= end + kAckStampLimitNs) {
      ReleasePending(pi);
      continue;
    }
    ++i;
  }
}

void UdMesh::OnAckSent(size_t dev, size_t port, UdPort& p, const WorkCompletion& wc, int64_t now) {
  const uint32_t pi = WrIdAux(wc.wr_id);
  const int slot = WrIdSlot(wc.wr_id);
  if (pi >= pending_.size() || !pending_[pi].in_use || pending_[pi].dev != dev ||
      pending_[pi].port != port) {
    p.ReleaseSendSlot(slot);
    return;
  }
  Pending& pe = pending_[pi];
  p.ReleaseSendSlot(slot);
  if (pe.ready) return;
  // The turnaround on this NIC's clock (T4 - T3); the report carrying it waits in the hold.
  pe.turnaround = SpanNs(p, pe.t3, Stamp(p, wc, now));
  // The probe arrived about a turnaround before it was answered (the ack leaves the NIC within
  // microseconds of its post). When this thread was busy with other work in between, the
  // turnaround holds that wait: not the host's delay. The report says so (the prober keeps the
  // network RTT and leaves the responder's host delay out).
  pe.busy = WaitedOnBusy(pe.answered - pe.turnaround, pe.answered);
  if (pe.busy) stats_.busy_turnarounds++;
  pe.ready = true;
  ++ready_count_;
  if (pe.software) --sw_unstamped_;
}

void UdMesh::OnAck(size_t dev, size_t port, const UdMessage& m, uint64_t t5, int64_t now) {
  Outstanding& o = outstanding_[m.seq & (kOutstandingSlots - 1)];
  if (!o.in_use || o.seq != m.seq || o.wire_flow != m.flow) {
    // Answered after its timeout, or not ours.
    if (m.seq < next_seq_ && (m.flow >> 16) == generation_) {
      stats_.late++;
    } else {
      stats_.stray++;
    }
    return;
  }
  if (o.dev != dev || o.port != port || o.acked) {
    stats_.stray++;
    return;
  }
  o.acked = true;
  o.t6 = now;
  o.t5 = devices_[dev]->ports[port]->ts_source() == TsSource::kSoftware ? static_cast<uint64_t>(now)
                                                                        : t5;
  devices_[dev]->rt[port].backoff.Reset();
  stats_.acked++;
  MaybeFinish(o, now);
}

void UdMesh::OnReport(const UdMessage& m, int64_t now) {
  Outstanding& o = outstanding_[m.seq & (kOutstandingSlots - 1)];
  if (!o.in_use || o.seq != m.seq || o.wire_flow != m.flow || o.reported) {
    stats_.late++;
    return;
  }
  o.reported = true;
  o.turnaround = m.turnaround_ns;
  o.responder_source = m.ts_source;
  o.responder_busy = m.turnaround_busy;
  MaybeFinish(o, now);
}

void UdMesh::MaybeFinish(Outstanding& o, int64_t) {
  if (!(o.sent && o.acked && o.reported)) return;
  o.in_use = false;
  const UdPort& p = *devices_[o.dev]->ports[o.port];
  ProberStamps s;
  s.t1_sw_ns = o.t1;
  s.t6_sw_ns = o.t6;
  s.nic_span_ns = SpanNs(p, o.t2, o.t5);
  s.turnaround_ns = o.turnaround;
  const RttSplit split = SplitRtt(s);
  if (!split.valid) {
    stats_.invalid_split++;
    return;
  }
  // The ack arrived a prober host delay before it was polled (T6). When this thread was busy
  // with other work in between, that delay is this process's, not the host's: left out (0, "not
  // measured"). With software stamps the wait is in the network RTT itself: no result.
  int64_t prober_host_ns = split.prober_host_ns;
  if (p.ts_source() == TsSource::kSoftware) {
    if (WaitedOnBusy(o.t1, o.t6)) {
      stats_.busy_software_results++;
      return;
    }
  } else if (WaitedOnBusy(o.t6 - prober_host_ns, o.t6)) {
    stats_.busy_prober_delays++;
    prober_host_ns = 0;
  }
  const Flow& f = flows_[o.flow];
  RdmaProbeResult r = ResultFor(o);
  r.base.rtt_ns = split.network_rtt_ns;
  r.network_rtt_ns = split.network_rtt_ns;
  r.prober_host_ns = prober_host_ns;
  r.responder_host_ns = split.responder_host_ns;
  if (o.responder_busy) {
    stats_.peer_busy_turnarounds++;
    r.responder_host_ns = 0;  // not measured: the responder's wait on its own work
  }
  r.prober_span_ns = s.nic_span_ns;
  r.source = p.ts_source();
  r.responder_source = o.responder_source;
  r.src_qpn = p.QpNum(f.qp);
  stats_.results++;
  if (sink_ != nullptr) sink_->OnResult(r);
}

RdmaProbeResult UdMesh::ResultFor(const Outstanding& o) const {
  const Flow& f = flows_[o.flow];
  RdmaProbeResult r;
  r.base.SetPeer(targets_[f.target].peer);
  r.base.transport = net::Transport::kRdmaUd;
  r.base.flow_id = f.index;
  r.base.src_port = static_cast<uint16_t>(f.flow_label);
  r.base.seq = o.seq;
  r.base.bytes = kUdMessageBytes;
  r.base.timestamp_ns = o.wall;
  r.flow_label = f.flow_label;
  r.SetLocalDevice(devices_[o.dev]->name);
  r.SetPeerDevice(targets_[f.target].peer_device);
  return r;
}

void UdMesh::NoteBusy(int64_t start_ns, int64_t end_ns) {
  if (end_ns - start_ns < kMinBusyNs) return;
  if (busy_count_ == busy_.size()) {
    busy_evicted_end_ = std::max(busy_evicted_end_, busy_[busy_next_].second);
  } else {
    ++busy_count_;
  }
  busy_[busy_next_] = {start_ns, end_ns};
  busy_next_ = (busy_next_ + 1) % busy_.size();
}

bool UdMesh::WaitedOnBusy(int64_t from, int64_t to) const {
  if (from >= to) return false;
  if (from < busy_evicted_end_) return true;  // a span no longer kept may have overlapped
  for (size_t i = 0; i < busy_count_; ++i) {
    if (busy_[i].first < to && busy_[i].second > from) return true;
  }
  return false;
}

int64_t UdMesh::WindowStart(int64_t t) const {
  const int64_t d = t - window_origin_;
  const int64_t q = d >= 0 ? d / window_ns_ : -((-d + window_ns_ - 1) / window_ns_);
  return window_origin_ + q * window_ns_;
}

void UdMesh::SendDue(int64_t now) {
  // With send windows, every probe due before the current window ends goes now; the Step that
  // runs at a window's start is the one that sends (wakeups for answers and acks within the
  // window send nothing new). Each wakeup is most of what the mesh costs.
  const int64_t window_end = window_ns_ > 0 ? WindowStart(now) + window_ns_ : 0;
  const uint64_t sent_before = stats_.sent.load(std::memory_order_relaxed);
  for (uint32_t fi = 0; fi < flows_.size(); ++fi) {
    Flow& f = flows_[fi];
    // Without windows, a flow due within a quarter of its period goes out with this wakeup,
    // early, rather than costing a wakeup of its own. Either way the schedule stays anchored
    // (next_send advances by whole periods), so the rate holds; one interval shortens by at most
    // a window (a quarter period). After a stall the schedule re-anchors instead of bursting.
    auto advance = [&f, now] {
      f.next_send += f.period_ns;
      if (f.next_send <= now) f.next_send = now + f.period_ns;
    };
    if (window_ns_ == 0) {
      if (now + f.period_ns / 4 < f.next_send) continue;
      advance();
      SendProbe(fi, now);
      continue;
    }
    for (int k = 0; k < kMaxSendsPerWindow && f.next_send < window_end; ++k) {
      advance();
      SendProbe(fi, now);
    }
  }
  if (stats_.sent.load(std::memory_order_relaxed) != sent_before) stats_.send_rounds++;
}

void UdMesh::SendProbe(uint32_t fi, int64_t now) {
  const Flow& f = flows_[fi];
  Device& d = *devices_[f.dev];
  if (d.dead || f.port >= d.ports.size() || f.ah == nullptr) {
    stats_.skipped_port_down++;
    return;
  }
  UdPort& p = *d.ports[f.port];
  if (!p.up() || d.rt[f.port].broken || d.rt[f.port].refresh) {
    stats_.skipped_port_down++;
    return;
  }
  if (budget_ != nullptr && !budget_->TryConsume(1, kUdMessageBytes + 58)) {
    stats_.budget_skipped++;
    return;
  }
  const int slot = p.AcquireSendSlot();
  if (slot < 0) {
    stats_.no_send_slot++;
    return;
  }
  const uint64_t seq = next_seq_++;
  Outstanding& o = outstanding_[seq & (kOutstandingSlots - 1)];
  if (o.in_use) {
    // The table wrapped before this probe timed out: more in flight than it holds.
    o.in_use = false;
    stats_.abandoned++;
  }
  const UdTarget& t = targets_[f.target];
  o = Outstanding{};
  o.in_use = true;
  o.seq = seq;
  o.flow = fi;
  o.wire_flow = static_cast<uint32_t>(generation_) << 16 | f.index;
  o.dev = f.dev;
  o.port = f.port;
  o.epoch = p.epoch();
  o.wall = clock_.WallNanos();
  const UdMessage m = MessageFrom(p, UdType::kProbe, seq, o.wire_flow);
  WriteUdMessage(m, p.SendBuffer(slot));
  o.t1 = clock_.MonotonicNanos();
  o.deadline = o.t1 + opts_.timeout_ns;
  Status st = p.PostSend(f.qp, slot, *f.ah, t.remote.qpn, t.remote.qkey,
                         MakeWrId(WrKind::kProbe, p.epoch(), static_cast<uint32_t>(seq),
                                  static_cast<uint16_t>(slot)));
  if (!st.ok()) {
    stats_.post_failures++;
    p.ReleaseSendSlot(slot);
    o.in_use = false;
    PortFailed(f.dev, f.port, now, "post_failed");
    return;
  }
  stats_.sent++;
  timeout_ring_[(timeout_head_ + timeout_count_) & (kOutstandingSlots - 1)] = seq;
  if (timeout_count_ < kOutstandingSlots) {
    ++timeout_count_;
  } else {
    timeout_head_ = (timeout_head_ + 1) & (kOutstandingSlots - 1);
  }
}

void UdMesh::ExpireTimeouts(int64_t now) {
  while (timeout_count_ > 0) {
    const uint64_t seq = timeout_ring_[timeout_head_];
    Outstanding& o = outstanding_[seq & (kOutstandingSlots - 1)];
    if (o.in_use && o.seq == seq && o.deadline > now) return;
    timeout_head_ = (timeout_head_ + 1) & (kOutstandingSlots - 1);
    --timeout_count_;
    if (!o.in_use || o.seq != seq) continue;  // answered, abandoned or replaced
    o.in_use = false;
    if (o.acked) {
      stats_.reports_missing++;  // answered: not a loss, but no split without the report
      continue;
    }
    RdmaProbeResult r = ResultFor(o);
    r.base.lost = true;
    r.source = devices_[o.dev]->dead || o.port >= devices_[o.dev]->ports.size()
                   ? TsSource::kSoftware
                   : devices_[o.dev]->ports[o.port]->ts_source();
    stats_.lost++;
    stats_.results++;
    if (sink_ != nullptr) sink_->OnResult(r);
  }
}

bool UdMesh::PortFor(const std::string& device, LinkLayer want, Context** ctx, Pd** pd,
                     uint8_t* port, int* gid_index) const {
  for (const auto& d : devices_) {
    if (d->dead || d->ctx == nullptr || d->pd == nullptr) continue;
    if (!device.empty() && d->name != device) continue;
    for (size_t i = 0; i < d->ports.size(); ++i) {
      const UdPort& p = *d->ports[i];
      if (!p.up() || d->rt[i].broken) continue;
      if (want != LinkLayer::kUnknown && p.endpoint().link_layer != want) continue;
      *ctx = d->ctx.get();
      *pd = d->pd.get();
      *port = p.endpoint().port;
      *gid_index = p.endpoint().gid_index;
      return true;
    }
  }
  return false;
}

}  // namespace fw::rdma
