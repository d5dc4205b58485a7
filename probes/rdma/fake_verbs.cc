// The in-memory fake fabric: see fake_verbs.h for what it models and enforces.
#include "probes/rdma/fake_verbs.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <unordered_map>

#include "probes/rdma/fake_link.h"

namespace fw::rdma {

namespace {

struct Completion {
  WorkCompletion wc;
  int64_t visible_at = 0;
  bool counts_send = false;  // frees a send-queue slot when polled
  uint64_t qp_id = 0;
};

enum class PacketKind : uint8_t { kUd, kRcWrite };

struct Packet {
  int64_t at = 0;
  uint64_t order = 0;
  PacketKind kind = PacketKind::kUd;
  bool lost = false;
  size_t src_dev = 0;
  uint64_t src_qp_id = 0;
  uint32_t src_qpn = 0;
  uint32_t src_incarnation = 0;  // the sender QP's reset count when it posted
  size_t dst_dev = 0;
  uint8_t dst_port = 0;
  uint32_t dst_qpn = 0;
  uint32_t qkey = 0;
  bool grh = false;
  Gid sgid, dgid;
  uint8_t traffic_class = 0;
  uint32_t flow_label = 0;
  std::vector<uint8_t> data;
  // RC write.
  uint64_t wr_id = 0;
  bool signaled = false;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  int64_t ack_latency_ns = 0;
  // An RC write from another process (the loopback link): `link_length` bytes, no data; the
  // answer goes back as an ack datagram to `link_slid` with `link_token`.
  bool from_link = false;
  uint16_t link_slid = 0;
  uint64_t link_token = 0;
  uint32_t link_length = 0;
};

struct PacketLater {
  bool operator()(const Packet& a, const Packet& b) const {
    return a.at != b.at ? a.at > b.at : a.order > b.order;
  }
};

// Attribute masks per QP type and transition (ibv_modify_qp(3), IB spec table 91).
struct Transition {
  uint32_t required;
  uint32_t optional;
};

bool LookupTransition(QpType type, QpState from, QpState to, Transition& t) {
  if (to == QpState::kReset || to == QpState::kError) {
    t = {kQpState, 0};
    return true;
  }
  const bool ud = type == QpType::kUd;
  if (from == QpState::kReset && to == QpState::kInit) {
    t = ud ? Transition{kQpState | kQpPkeyIndex | kQpPort | kQpQkey, 0}
           : Transition{kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags, 0};
    return true;
  }
  if (from == QpState::kInit && to == QpState::kInit) {
    t = {kQpState, ud ? kQpPkeyIndex | kQpPort | kQpQkey : kQpPkeyIndex | kQpPort | kQpAccessFlags};
    return true;
  }
  if (from == QpState::kInit && to == QpState::kRtr) {
    t = ud ? Transition{kQpState, kQpPkeyIndex | kQpQkey}
           : Transition{kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                            kQpMinRnrTimer,
                        kQpAccessFlags | kQpPkeyIndex};
    return true;
  }
  if (from == QpState::kRtr && to == QpState::kRts) {
    t = ud ? Transition{kQpState | kQpSqPsn, kQpQkey}
           : Transition{
                 kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic,
                 kQpAccessFlags | kQpMinRnrTimer};
    return true;
  }
  if (from == QpState::kRts && to == QpState::kRts) {
    t = {kQpState, ud ? kQpQkey : kQpAccessFlags | kQpMinRnrTimer};
    return true;
  }
  return false;
}

}  // namespace

struct FakeFabric::State {
  explicit State(const Clock& c, uint64_t seed)
      : clock(c), wall_minus_mono_ns(c.WallNanos() - c.MonotonicNanos()), rng(seed) {}
  ~State() {
    for (const LinkSock& l : link_socks) ::close(l.fd);
  }

  struct Port {
    FakePortConfig cfg;
    double loss = 0;
    int64_t busy_until = 0;
  };
  struct Device {
    FakeDeviceConfig cfg;
    std::vector<Port> ports;
    bool removed = false;
    int64_t poll_delay_ns = 0;
    int fail_sends = 0;
    WcStatus fail_status = WcStatus::kGeneralErr;
    int fail_rc_writes = 0;
    WcStatus fail_rc_status = WcStatus::kGeneralErr;
    int64_t locked_bytes = 0;
    uint32_t next_qpn = 0x100;
    std::unordered_map<uint32_t, uint64_t> qp_by_qpn;
  };
  struct MrS {
    size_t dev;
    uint64_t pd;
    uint64_t addr;
    size_t len;
    uint32_t lkey, rkey, access;
  };
  struct CqS {
    size_t dev;
    uint64_t ctx;  // the context that created it
    int depth;
    CqTimestamps ts;
    std::deque<Completion> q;  // sorted by visible_at
    // With the loopback link: a completion channel. `epfd` (what event_fd() returns) watches a
    // timer, set once armed to the earliest time a completion of this CQ may become visible,
    // and the link sockets, where packets from other processes arrive.
    int tfd = -1, epfd = -1;
    bool armed = false;
    int64_t timer_at = 0;  // 0: no timer set
  };
  struct QpS {
    size_t dev;
    uint64_t pd;
    uint32_t qpn;
    QpType type;
    QpState state = QpState::kReset;
    uint64_t scq, rcq;
    QpAttr attr;
    QpCaps caps;
    std::deque<RecvWr> recvs;
    uint32_t sends_outstanding = 0;
    uint32_t incarnation = 0;  // RESET count: responses to an earlier incarnation are dropped
  };
  struct AhS {
    size_t dev;
    uint64_t pd;
    AhAttr attr;
  };
  struct CtxS {
    size_t dev;
    std::deque<AsyncEvent> events;
    int efd = -1;
  };

  const Clock& clock;
  // The NIC's wall clock runs at the monotonic clock's rate from one offset read at creation, as
  // a NIC clock does between syncs. Reading the offset per completion would add the preemption
  // between the two clock reads to each stamp, and spans between stamps could go negative.
  const int64_t wall_minus_mono_ns;
  FakeClock* auto_clock = nullptr;
  mutable std::mutex mu;
  std::mt19937_64 rng;
  uint64_t next_id = 1;
  uint64_t next_order = 0;
  std::vector<Device> devices;
  std::map<std::string, size_t, std::less<>> device_index;
  std::unordered_map<uint32_t, MrS> mrs;  // by lkey
  std::unordered_map<uint32_t, uint32_t> lkey_by_rkey;
  std::unordered_map<uint64_t, CqS> cqs;
  std::unordered_map<uint64_t, QpS> qps;
  std::unordered_map<uint64_t, AhS> ahs;
  std::unordered_map<uint64_t, CtxS> ctxs;
  std::unordered_map<uint64_t, uint64_t> pds;  // live PD id -> the context that allocated it
  std::vector<Packet> heap;
  std::vector<std::vector<uint8_t>> spare_buffers;
  FakeFabricStats stats;
  // What the fake did on each thread in place of a NIC (FakeFabric::HwCostOfThread), by tid.
  std::unordered_map<int, FakeHwCost> hw_cost;
  FakeHwCost& CostOfThisThread() {
    thread_local const int tid = static_cast<int>(::gettid());
    return hw_cost[tid];
  }
  // The loopback link (EnableLoopbackLink): one socket per local InfiniBand port with a LID.
  struct LinkSock {
    int fd;
    size_t dev;
    uint8_t port;
    uint16_t lid;
  };
  uint16_t link_base = 0;
  std::vector<LinkSock> link_socks;
  bool channels = false;  // CQs get a completion channel (EnableCompletionChannels, or the link)
  std::vector<uint8_t> link_buf;
  // RC writes sent over the link and not yet acknowledged, by token.
  struct LinkWrite {
    uint64_t qp_id;
    uint32_t incarnation;
    uint64_t wr_id;
    bool signaled;
  };
  std::unordered_map<uint64_t, LinkWrite> link_writes;
  uint64_t next_link_token = 1;

  void LinkSendDatagram(const LinkDatagram& d) {
    EncodeLinkDatagram(d, link_buf);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(static_cast<uint16_t>(link_base + d.dlid));
    // Nobody listening, or a full socket buffer, is a datagram lost on the wire.
    (void)::sendto(link_socks.front().fd, link_buf.data(), link_buf.size(), MSG_DONTWAIT,
                   reinterpret_cast<const sockaddr*>(&to), sizeof(to));
    ++stats.link_sent;
  }

  // Sends an RC write to a LID of another process; false when there is no link. The write
  // completes when its ack comes back (LinkReceive); none comes when the peer is gone, and the
  // sender's burst times out as on a fabric whose retries ran out.
  bool LinkSendWrite(const Packet& p, uint16_t dlid, uint16_t slid, uint32_t length) {
    if (link_socks.empty() || dlid == 0 || uint32_t{link_base} + dlid > 65535) return false;
    if (link_writes.size() > 65536) link_writes.clear();  // acks that never came
    LinkDatagram d;
    d.kind = LinkKind::kRcWrite;
    d.dlid = dlid;
    d.slid = slid;
    d.dst_qpn = p.dst_qpn;
    d.src_qpn = p.src_qpn;
    d.arrive_at_ns = p.at;
    d.token = next_link_token++;
    d.remote_addr = p.remote_addr;
    d.rkey = p.rkey;
    d.length = length;
    link_writes[d.token] = {p.src_qp_id, p.src_incarnation, p.wr_id, p.signaled};
    LinkSendDatagram(d);
    return true;
  }

  // Sends a UD packet to a LID of another process; false when there is no link.
  bool LinkSend(const Packet& p, uint16_t dlid, uint16_t slid) {
    if (link_socks.empty() || dlid == 0 || uint32_t{link_base} + dlid > 65535) return false;
    LinkDatagram d;
    d.dlid = dlid;
    d.slid = slid;
    d.dst_qpn = p.dst_qpn;
    d.src_qpn = p.src_qpn;
    d.qkey = p.qkey;
    d.arrive_at_ns = p.at;
    d.flow_label = p.flow_label & 0xfffff;
    d.traffic_class = p.traffic_class;
    d.grh = p.grh;
    d.sgid = p.sgid;
    d.dgid = p.dgid;
    d.payload = p.data;
    LinkSendDatagram(d);
    return true;
  }

  void LinkRefused(LinkDrop why, size_t bytes) {
    // Counted always, logged the first time and every 1,000th: a peer gone wrong must not flood.
    if (stats.link_refused++ % 1000 == 0) {
      spdlog::warn("msg=\"fake rdma link: datagram refused\" reason={} bytes={} refused={}",
                   LinkDropName(why), bytes, stats.link_refused);
    }
  }

  // Takes what arrived on the link sockets into the packet heap.
  void LinkReceive() {
    uint8_t buf[kLinkHeaderBytes + kLinkMaxPayload + 1];
    for (const LinkSock& l : link_socks) {
      for (;;) {
        const ssize_t n = ::recv(l.fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0) break;  // EAGAIN: nothing more
        LinkDatagram d;
        LinkDrop why = LinkDrop::kTruncated;
        if (!ParseLinkDatagram(buf, static_cast<size_t>(n), d, why)) {
          LinkRefused(why, static_cast<size_t>(n));
          continue;
        }
        if (d.dlid != l.lid) {
          LinkRefused(LinkDrop::kBadField, static_cast<size_t>(n));
          continue;
        }
        ++stats.link_received;
        if (d.kind == LinkKind::kRcAck) {
          LinkAck(d);
          continue;
        }
        Packet p;
        p.at = d.arrive_at_ns;
        p.order = next_order++;
        p.src_qpn = d.src_qpn;
        p.dst_dev = l.dev;
        p.dst_port = l.port;
        p.dst_qpn = d.dst_qpn;
        if (d.kind == LinkKind::kRcWrite) {
          // RC retransmits: loss shows as delay, modelled as none (as between local devices).
          p.kind = PacketKind::kRcWrite;
          p.remote_addr = d.remote_addr;
          p.rkey = d.rkey;
          p.from_link = true;
          p.link_slid = d.slid;
          p.link_token = d.token;
          p.link_length = d.length;
          p.ack_latency_ns = devices[l.dev].ports[l.port - 1].cfg.latency_ns;
          heap.push_back(std::move(p));
          std::push_heap(heap.begin(), heap.end(), PacketLater());
          continue;
        }
        const double loss = devices[l.dev].ports[l.port - 1].loss;
        if (loss > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < loss) {
          ++stats.dropped_loss;
          continue;
        }
        p.kind = PacketKind::kUd;
        p.qkey = d.qkey;
        p.grh = d.grh;
        p.sgid = d.sgid;
        p.dgid = d.dgid;
        p.traffic_class = d.traffic_class;
        p.flow_label = d.flow_label;
        p.data = std::move(d.payload);
        heap.push_back(std::move(p));
        std::push_heap(heap.begin(), heap.end(), PacketLater());
      }
    }
  }

  // An ack for an RC write this process sent: the write's completion, at the ack's arrival.
  void LinkAck(const LinkDatagram& d) {
    auto it = link_writes.find(d.token);
    if (it == link_writes.end()) return;  // a write of a QP reset since, or a stale ack
    const LinkWrite w = it->second;
    link_writes.erase(it);
    auto qit = qps.find(w.qp_id);
    if (qit == qps.end() || qit->second.incarnation != w.incarnation) return;
    QpS& src = qit->second;
    WorkCompletion wc;
    wc.wr_id = w.wr_id;
    wc.opcode = WcOpcode::kRdmaWrite;
    wc.qp_num = src.qpn;
    wc.status = static_cast<WcStatus>(d.status);
    if (wc.status != WcStatus::kSuccess || w.signaled) {
      Complete(src.scq, wc, d.arrive_at_ns, w.signaled, w.qp_id);
    }
    if (wc.status != WcStatus::kSuccess) ToError(src, w.qp_id);
  }

  int64_t Now() const { return clock.MonotonicNanos(); }
  Device& Dev(const std::string& name) {
    auto it = device_index.find(name);
    if (it == device_index.end()) std::abort();  // a test named a device it never added
    return devices[it->second];
  }
  Port& PortOf(const std::string& name, uint8_t port) {
    Device& d = Dev(name);
    if (port < 1 || port > d.ports.size()) std::abort();
    return d.ports[port - 1];
  }

  void RaiseEvent(size_t dev, AsyncEvent ev) {
    for (auto& [id, c] : ctxs) {
      if (c.dev != dev) continue;
      c.events.push_back(ev);
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(c.efd, &one, sizeof(one));
    }
  }

  // Makes an armed CQ's channel readable by time `at` (at once when `at` has passed).
  void WakeBy(CqS& cq, int64_t at) {
    if (cq.tfd < 0 || !cq.armed || (cq.timer_at != 0 && cq.timer_at <= at)) return;
    cq.timer_at = at;
    itimerspec t{};
    const int64_t when = std::max<int64_t>(at, 1);
    t.it_value.tv_sec = static_cast<time_t>(when / 1'000'000'000);
    t.it_value.tv_nsec = static_cast<long>(when % 1'000'000'000);
    ++CostOfThisThread().timer_sets;
    if (::timerfd_settime(cq.tfd, TFD_TIMER_ABSTIME, &t, nullptr) != 0) {
      spdlog::warn("msg=\"fake rdma: timerfd_settime failed\" errno={}", errno);
    }
  }
  // The CQs a packet in flight completes on: its sender QP's send CQ and, for a UD datagram,
  // the receiving QP's receive CQ (0 where there is none). Only they wake for it: a NIC raises
  // an event on the CQ that gets the completion, not on every CQ of the device.
  std::pair<uint64_t, uint64_t> CompletionCqs(const Packet& p) const {
    uint64_t send = 0, recv = 0;
    auto s = qps.find(p.src_qp_id);
    if (s != qps.end()) send = s->second.scq;
    if (p.kind == PacketKind::kUd && p.dst_dev < devices.size()) {
      auto q = devices[p.dst_dev].qp_by_qpn.find(p.dst_qpn);
      if (q != devices[p.dst_dev].qp_by_qpn.end()) {
        auto d = qps.find(q->second);
        if (d != qps.end()) recv = d->second.rcq;
      }
    }
    return {send, recv};
  }
  // Armed CQs wake by a packet's arrival when it completes on them.
  void WakeArmedBy(int64_t at, std::pair<uint64_t, uint64_t> cq_ids) {
    for (uint64_t id : {cq_ids.first, cq_ids.second}) {
      auto it = cqs.find(id);
      if (id != 0 && it != cqs.end()) WakeBy(it->second, at);
    }
  }

  void Complete(uint64_t cq_id, const WorkCompletion& wc, int64_t stamped_at, bool counts_send,
                uint64_t qp_id) {
    auto it = cqs.find(cq_id);
    if (it == cqs.end()) return;
    CqS& cq = it->second;
    Device& d = devices[cq.dev];
    Completion c;
    c.wc = wc;
    if (cq.ts != CqTimestamps::kNone) {
      const uint64_t nic_ns = static_cast<uint64_t>(stamped_at + d.cfg.clock_offset_ns);
      c.wc.ts_raw = static_cast<uint64_t>(static_cast<unsigned __int128>(nic_ns) *
                                          d.cfg.hca_core_clock_khz / 1'000'000) &
                    d.cfg.completion_timestamp_mask;
      if (cq.ts == CqTimestamps::kWallclock) {
        c.wc.ts_wallclock = static_cast<uint64_t>(stamped_at + wall_minus_mono_ns);
      }
    }
    c.visible_at = stamped_at + d.poll_delay_ns;
    c.counts_send = counts_send;
    c.qp_id = qp_id;
    if (static_cast<int>(cq.q.size()) >= cq.depth) {
      RaiseEvent(cq.dev, {AsyncEventType::kCqError, 0, 0});
      return;  // overrun: the completion is lost, as on hardware
    }
    auto pos = cq.q.end();
    while (pos != cq.q.begin() && std::prev(pos)->visible_at > c.visible_at) --pos;
    cq.q.insert(pos, c);
    WakeBy(cq, c.visible_at);
  }

  // Moves a QP to ERR and flushes its posted receives.
  void ToError(QpS& qp, uint64_t qp_id) {
    qp.state = QpState::kError;
    while (!qp.recvs.empty()) {
      WorkCompletion wc;
      wc.wr_id = qp.recvs.front().wr_id;
      wc.status = WcStatus::kWrFlushErr;
      wc.opcode = WcOpcode::kRecv;
      wc.qp_num = qp.qpn;
      qp.recvs.pop_front();
      Complete(qp.rcq, wc, Now(), false, qp_id);
    }
  }

  // The MR that covers [addr, addr+len) on (dev, pd) with this lkey, or null.
  const MrS* CheckLocal(size_t dev, uint64_t pd, const Sge& sge) const {
    auto it = mrs.find(sge.lkey);
    if (it == mrs.end()) return nullptr;
    const MrS& mr = it->second;
    if (mr.dev != dev || mr.pd != pd) return nullptr;
    if (sge.addr < mr.addr || sge.addr + sge.length > mr.addr + mr.len) return nullptr;
    return &mr;
  }

  // Finds the port a LID or GID belongs to.
  bool Route(const AhAttr& av, size_t& dev, uint8_t& port) const {
    for (size_t i = 0; i < devices.size(); ++i) {
      if (devices[i].removed) continue;
      for (size_t p = 0; p < devices[i].ports.size(); ++p) {
        const FakePortConfig& cfg = devices[i].ports[p].cfg;
        bool match = false;
        if (av.is_global) {
          for (const GidEntry& g : cfg.gids) match = match || g.gid == av.dgid;
        } else {
          match = cfg.link_layer == LinkLayer::kInfiniBand && cfg.lid == av.dlid;
        }
        if (match) {
          dev = i;
          port = static_cast<uint8_t>(p + 1);
          return true;
        }
      }
    }
    return false;
  }

  std::vector<uint8_t> TakeBuffer() {
    if (spare_buffers.empty()) return {};
    std::vector<uint8_t> b = std::move(spare_buffers.back());
    spare_buffers.pop_back();
    return b;
  }

  void Deliver(Packet& p);
  void Pump() {
    if (!link_socks.empty()) LinkReceive();
    const int64_t now = Now();
    while (!heap.empty() && heap.front().at <= now) {
      std::pop_heap(heap.begin(), heap.end(), PacketLater());
      Packet p = std::move(heap.back());
      heap.pop_back();
      if (!p.lost) Deliver(p);
      p.data.clear();
      if (spare_buffers.size() < 1024) spare_buffers.push_back(std::move(p.data));
    }
  }
};

namespace {
// The fabric's one mutex; a thread that finds it held counts a lock wait (FakeHwCost): a NIC's
// queues take no lock shared with other hosts.
class StateLock {
 public:
  explicit StateLock(FakeFabric::State& s) : s_(s) {
    if (!s.mu.try_lock()) {
      s.mu.lock();
      ++s.CostOfThisThread().lock_waits;
    }
  }
  ~StateLock() { s_.mu.unlock(); }
  StateLock(const StateLock&) = delete;
  StateLock& operator=(const StateLock&) = delete;

 private:
  FakeFabric::State& s_;
};
}  // namespace

void FakeFabric::State::Deliver(Packet& p) {
  Device& dst = devices[p.dst_dev];
  if (dst.removed) {
    ++stats.dropped_no_route;
    return;
  }
  if (dst.ports[p.dst_port - 1].cfg.state != PortState::kActive) {
    ++stats.dropped_port_down;
    return;
  }
  auto qit = dst.qp_by_qpn.find(p.dst_qpn);
  QpS* qp = qit == dst.qp_by_qpn.end() ? nullptr : &qps.at(qit->second);
  if (p.kind == PacketKind::kRcWrite) {
    auto sit = qps.find(p.src_qp_id);
    WorkCompletion wc;
    wc.wr_id = p.wr_id;
    wc.opcode = WcOpcode::kRdmaWrite;
    const size_t len = p.from_link ? p.link_length : p.data.size();
    wc.byte_len = static_cast<uint32_t>(len);
    wc.status = WcStatus::kSuccess;
    const MrS* mr = nullptr;
    auto lk = lkey_by_rkey.find(p.rkey);
    if (lk != lkey_by_rkey.end()) mr = &mrs.at(lk->second);
    if (qp == nullptr || qp->type != QpType::kRc ||
        (qp->state != QpState::kRtr && qp->state != QpState::kRts) ||
        qp->attr.dest_qpn != p.src_qpn) {
      wc.status = WcStatus::kRemInvReqErr;
    } else if (mr == nullptr || mr->dev != p.dst_dev || mr->pd != qp->pd ||
               !(mr->access & kAccessRemoteWrite) ||
               !(qp->attr.access_flags & kAccessRemoteWrite) || p.remote_addr < mr->addr ||
               p.remote_addr + len > mr->addr + mr->len) {
      wc.status = WcStatus::kRemAccessErr;
    } else {
      if (!p.from_link) {
        std::memcpy(reinterpret_cast<void*>(p.remote_addr), p.data.data(), p.data.size());
      }
      ++stats.rdma_writes;
      ++stats.delivered;
    }
    if (p.from_link) {
      LinkDatagram ack;
      ack.kind = LinkKind::kRcAck;
      ack.dlid = p.link_slid;
      ack.slid = dst.ports[p.dst_port - 1].cfg.lid;
      ack.dst_qpn = p.src_qpn;
      ack.src_qpn = p.dst_qpn;
      ack.arrive_at_ns = p.at + p.ack_latency_ns;
      ack.token = p.link_token;
      ack.status = static_cast<uint8_t>(wc.status);
      if (uint32_t{link_base} + ack.dlid <= 65535) LinkSendDatagram(ack);
      return;
    }
    if (sit == qps.end() || sit->second.incarnation != p.src_incarnation) return;
    QpS& src = sit->second;
    wc.qp_num = src.qpn;
    if (wc.status != WcStatus::kSuccess || p.signaled) {
      Complete(src.scq, wc, p.at + p.ack_latency_ns, p.signaled, p.src_qp_id);
    }
    if (wc.status != WcStatus::kSuccess) ToError(src, p.src_qp_id);
    return;
  }
  if (qp == nullptr || qp->type != QpType::kUd) {
    ++stats.dropped_no_route;
    return;
  }
  if (qp->state != QpState::kRtr && qp->state != QpState::kRts) {
    ++stats.dropped_qp_state;
    return;
  }
  if (qp->attr.qkey != p.qkey) {
    ++stats.dropped_qkey;
    return;
  }
  if (qp->recvs.empty()) {
    ++stats.dropped_no_recv;
    return;
  }
  const RecvWr r = qp->recvs.front();
  qp->recvs.pop_front();
  const uint64_t qp_id = qit->second;
  WorkCompletion wc;
  wc.wr_id = r.wr_id;
  wc.opcode = WcOpcode::kRecv;
  wc.qp_num = qp->qpn;
  const MrS* mr = CheckLocal(qp->dev, qp->pd, r.sge);
  if (mr == nullptr || !(mr->access & kAccessLocalWrite)) {
    wc.status = WcStatus::kLocProtErr;
    Complete(qp->rcq, wc, p.at, false, qp_id);
    ToError(*qp, qp_id);
    return;
  }
  if (r.sge.length < kGrhBytes + p.data.size()) {
    wc.status = WcStatus::kLocLenErr;
    Complete(qp->rcq, wc, p.at, false, qp_id);
    ToError(*qp, qp_id);
    return;
  }
  uint8_t grh[kGrhBytes];
  if (p.grh) {
    // An IPv6-shaped GRH: version 6, traffic class, flow label, payload length, next header
    // 0x1b, hop limit, SGID, DGID.
    grh[0] = static_cast<uint8_t>(0x60 | (p.traffic_class >> 4));
    grh[1] = static_cast<uint8_t>((p.traffic_class << 4) | ((p.flow_label >> 16) & 0xf));
    grh[2] = static_cast<uint8_t>(p.flow_label >> 8);
    grh[3] = static_cast<uint8_t>(p.flow_label);
    grh[4] = static_cast<uint8_t>(p.data.size() >> 8);
    grh[5] = static_cast<uint8_t>(p.data.size());
    grh[6] = 0x1b;
    grh[7] = 64;
    std::memcpy(grh + 8, p.sgid.raw.data(), 16);
    std::memcpy(grh + 24, p.dgid.raw.data(), 16);
  } else {
    std::memset(grh, 0xa5, sizeof(grh));  // undefined without a GRH: never rely on it
  }
  auto* buf = reinterpret_cast<uint8_t*>(r.sge.addr);
  std::memcpy(buf, grh, kGrhBytes);
  if (!p.data.empty()) std::memcpy(buf + kGrhBytes, p.data.data(), p.data.size());
  wc.status = WcStatus::kSuccess;
  wc.byte_len = static_cast<uint32_t>(kGrhBytes + p.data.size());
  wc.src_qp = p.src_qpn;
  Complete(qp->rcq, wc, p.at, false, qp_id);
  ++stats.delivered;
}

namespace {

using StateP = std::shared_ptr<FakeFabric::State>;

Status Gone(const std::string& name) {
  return Status::Unavailable(name + ": device removed (DEVICE_FATAL)");
}

class FakePd final : public Pd {
 public:
  FakePd(StateP s, uint64_t id) : s_(std::move(s)), id_(id) {}
  // Hardware refuses to free a PD that MRs, QPs or AHs still use (ibv_dealloc_pd: EBUSY, the PD
  // leaks): counted in busy_destroys.
  ~FakePd() override {
    StateLock l(*s_);
    auto uses = [this](const auto& table) {
      return std::any_of(table.begin(), table.end(),
                         [this](const auto& kv) { return kv.second.pd == id_; });
    };
    if (uses(s_->mrs) || uses(s_->qps) || uses(s_->ahs)) ++s_->stats.busy_destroys;
    s_->pds.erase(id_);
  }
  uint64_t id() const { return id_; }

 private:
  StateP s_;
  uint64_t id_;
};

class FakeMr final : public Mr {
 public:
  FakeMr(StateP s, uint32_t lkey, uint32_t rkey) : s_(std::move(s)), lkey_(lkey), rkey_(rkey) {}
  ~FakeMr() override {
    StateLock l(*s_);
    auto it = s_->mrs.find(lkey_);
    if (it != s_->mrs.end()) {
      s_->devices[it->second.dev].locked_bytes -= static_cast<int64_t>(it->second.len);
      s_->mrs.erase(it);
    }
    s_->lkey_by_rkey.erase(rkey_);
  }
  uint32_t lkey() const override { return lkey_; }
  uint32_t rkey() const override { return rkey_; }

 private:
  StateP s_;
  uint32_t lkey_, rkey_;
};

class FakeCq final : public Cq {
 public:
  FakeCq(StateP s, uint64_t id, CqTimestamps ts) : s_(std::move(s)), id_(id), ts_(ts) {}
  ~FakeCq() override {
    StateLock l(*s_);
    auto it = s_->cqs.find(id_);
    if (it == s_->cqs.end()) return;
    if (it->second.epfd >= 0) ::close(it->second.epfd);
    if (it->second.tfd >= 0) ::close(it->second.tfd);
    s_->cqs.erase(it);
  }
  uint64_t id() const { return id_; }
  CqTimestamps timestamps() const override { return ts_; }
  // The fake delivers packets when a CQ is polled. In one process there is no channel to wait
  // on; with the loopback link each CQ has one (CqS::epfd).
  int event_fd() const override {
    StateLock l(*s_);
    return s_->cqs.at(id_).epfd;
  }
  // As a NIC's channel: a fired timer is the one event an arm can raise, read here as
  // ibv_get_cq_event reads it (one read, only once it is due); a timer not yet due stays set, as
  // it is already for the earliest completion this CQ may see (WakeBy only moves it earlier).
  // The only other syscall is the timer set for what is pending, which stands for the NIC's
  // interrupt and counts in FakeHwCost::timer_sets.
  Status Arm() override {
    StateLock l(*s_);
    auto& cq = s_->cqs.at(id_);
    if (cq.tfd < 0) return Status::Ok();
    cq.armed = true;
    if (cq.timer_at != 0) {
      if (cq.timer_at > s_->Now()) return Status::Ok();
      uint64_t expirations;
      if (::read(cq.tfd, &expirations, sizeof(expirations)) != sizeof(expirations)) {
        return Status::Ok();  // due but not fired yet: it fires, and the next Arm reads it
      }
      cq.timer_at = 0;
    }
    if (!cq.q.empty()) s_->WakeBy(cq, cq.q.front().visible_at);
    // The earliest packet in flight that completes on this CQ (sent or received).
    int64_t next = 0;
    for (const Packet& p : s_->heap) {
      if (next != 0 && p.at >= next) continue;
      // An RC write from the link completes nowhere here, but only a poll on its device carries
      // it out (a NIC would on its own): any CQ of that device wakes for it.
      const auto ids = s_->CompletionCqs(p);
      if (ids.first == id_ || ids.second == id_ || (p.from_link && p.dst_dev == cq.dev)) {
        next = p.at;
      }
    }
    if (next != 0) s_->WakeBy(cq, next);
    return Status::Ok();
  }

  StatusOr<int> Poll(WorkCompletion* out, int max) override {
    StateLock l(*s_);
    auto& cq = s_->cqs.at(id_);
    if (s_->devices[cq.dev].removed) return Gone(s_->devices[cq.dev].cfg.name);
    s_->Pump();
    int n = Take(cq, out, max);
    if (n == 0 && s_->auto_clock != nullptr) {
      int64_t next = INT64_MAX;
      if (!s_->heap.empty()) next = s_->heap.front().at;
      if (!cq.q.empty()) next = std::min(next, cq.q.front().visible_at);
      const int64_t now = s_->Now();
      if (next != INT64_MAX && next > now) {
        s_->auto_clock->Advance(std::chrono::nanoseconds(next - now));
        s_->Pump();
        n = Take(cq, out, max);
      }
    }
    return n;
  }

 private:
  int Take(FakeFabric::State::CqS& cq, WorkCompletion* out, int max) {
    const int64_t now = s_->Now();
    int n = 0;
    while (n < max && !cq.q.empty() && cq.q.front().visible_at <= now) {
      const Completion& c = cq.q.front();
      out[n++] = c.wc;
      if (c.counts_send) {
        auto it = s_->qps.find(c.qp_id);
        if (it != s_->qps.end() && it->second.sends_outstanding > 0) {
          --it->second.sends_outstanding;
        }
      }
      cq.q.pop_front();
    }
    return n;
  }

  StateP s_;
  uint64_t id_;
  CqTimestamps ts_;
};

class FakeAh final : public Ah {
 public:
  FakeAh(StateP s, uint64_t id) : s_(std::move(s)), id_(id) {}
  ~FakeAh() override {
    StateLock l(*s_);
    s_->ahs.erase(id_);
  }
  uint64_t id() const { return id_; }

 private:
  StateP s_;
  uint64_t id_;
};

Status CheckAv(const FakeFabric::State::Device& d, const AhAttr& a) {
  if (a.port < 1 || a.port > d.ports.size()) {
    return Status::InvalidArgument("address handle: no port " + std::to_string(a.port));
  }
  const FakePortConfig& p = d.ports[a.port - 1].cfg;
  if (p.link_layer == LinkLayer::kEthernet && !a.is_global) {
    return Status::InvalidArgument("address handle: RoCE needs a GRH (is_global)");
  }
  if (a.is_global) {
    bool found = false;
    for (const GidEntry& g : p.gids) found = found || g.index == a.sgid_index;
    if (!found) {
      return Status::InvalidArgument("address handle: no source GID at index " +
                                     std::to_string(a.sgid_index));
    }
  } else if (a.dlid == 0) {
    return Status::InvalidArgument("address handle: IB without a GRH needs a LID");
  }
  return Status::Ok();
}

class FakeQp final : public Qp {
 public:
  FakeQp(StateP s, uint64_t id, uint32_t qpn, QpType type)
      : s_(std::move(s)), id_(id), qpn_(qpn), type_(type) {}
  ~FakeQp() override {
    StateLock l(*s_);
    auto it = s_->qps.find(id_);
    if (it == s_->qps.end()) return;
    s_->devices[it->second.dev].qp_by_qpn.erase(qpn_);
    s_->qps.erase(it);
  }
  uint32_t qp_num() const override { return qpn_; }
  QpType type() const override { return type_; }

  Status Modify(const QpAttr& a, uint32_t mask) override {
    StateLock l(*s_);
    auto& qp = s_->qps.at(id_);
    auto& d = s_->devices[qp.dev];
    if (d.removed) return Gone(d.cfg.name);
    if (!(mask & kQpState)) return Status::InvalidArgument("ibv_modify_qp: no state in the mask");
    Transition t;
    if (!LookupTransition(type_, qp.state, a.state, t)) {
      return Status::InvalidArgument("ibv_modify_qp: no transition " +
                                     std::string(QpStateName(qp.state)) + " -> " +
                                     std::string(QpStateName(a.state)));
    }
    if ((mask & t.required) != t.required) {
      return Status::InvalidArgument("ibv_modify_qp " + std::string(QpStateName(qp.state)) +
                                     " -> " + std::string(QpStateName(a.state)) +
                                     ": missing required attributes (mask 0x" +
                                     Hex(t.required & ~mask) + ")");
    }
    if (mask & ~(t.required | t.optional)) {
      return Status::InvalidArgument("ibv_modify_qp " + std::string(QpStateName(qp.state)) +
                                     " -> " + std::string(QpStateName(a.state)) +
                                     ": attributes not allowed here (mask 0x" +
                                     Hex(mask & ~(t.required | t.optional)) + ")");
    }
    const uint8_t port = (mask & kQpPort) ? a.port : qp.attr.port;
    if ((mask & kQpPort) && (a.port < 1 || a.port > d.ports.size())) {
      return Status::InvalidArgument("ibv_modify_qp: no port " + std::to_string(a.port));
    }
    if ((mask & kQpPkeyIndex) && a.pkey_index != 0) {
      return Status::InvalidArgument("ibv_modify_qp: pkey index out of the table");
    }
    if (mask & kQpAv) {
      AhAttr av = a.av;
      av.port = port;
      Status st = CheckAv(d, av);
      if (!st.ok()) return st;
    }
    if ((mask & kQpPathMtu) && a.path_mtu_bytes > d.ports[port - 1].cfg.mtu_bytes) {
      return Status::InvalidArgument("ibv_modify_qp: path MTU above the port's active MTU");
    }
    QpAttr& cur = qp.attr;
    if (mask & kQpPkeyIndex) cur.pkey_index = a.pkey_index;
    if (mask & kQpPort) cur.port = a.port;
    if (mask & kQpQkey) cur.qkey = a.qkey;
    if (mask & kQpAccessFlags) cur.access_flags = a.access_flags;
    if (mask & kQpAv) cur.av = a.av, cur.av.port = port;
    if (mask & kQpPathMtu) cur.path_mtu_bytes = a.path_mtu_bytes;
    if (mask & kQpDestQpn) cur.dest_qpn = a.dest_qpn;
    if (mask & kQpRqPsn) cur.rq_psn = a.rq_psn;
    if (mask & kQpSqPsn) cur.sq_psn = a.sq_psn;
    if (a.state == QpState::kError) {
      s_->ToError(qp, id_);
      return Status::Ok();
    }
    if (a.state == QpState::kReset) {
      qp.recvs.clear();
      qp.sends_outstanding = 0;
      ++qp.incarnation;
    }
    qp.state = a.state;
    return Status::Ok();
  }

  Status PostSend(const SendWr& w) override {
    StateLock l(*s_);
    auto& qp = s_->qps.at(id_);
    auto& d = s_->devices[qp.dev];
    if (d.removed) return Gone(d.cfg.name);
    if (qp.state != QpState::kRts && qp.state != QpState::kError) {
      return Status::FailedPrecondition("ibv_post_send: QP " + std::to_string(qpn_) + " in " +
                                        std::string(QpStateName(qp.state)) + ", not RTS");
    }
    if (w.signaled && qp.sends_outstanding >= qp.caps.max_send_wr) {
      return Status::ResourceExhausted("ibv_post_send: send queue full (ENOMEM)");
    }
    const int64_t now = s_->Now();
    WorkCompletion wc;
    wc.wr_id = w.wr_id;
    wc.qp_num = qpn_;
    wc.opcode = w.opcode == SendOpcode::kSend ? WcOpcode::kSend : WcOpcode::kRdmaWrite;
    auto fail = [&](WcStatus st) {
      wc.status = st;
      if (w.signaled) ++qp.sends_outstanding;
      s_->Complete(qp.scq, wc, now, w.signaled, id_);
      if (st != WcStatus::kWrFlushErr) s_->ToError(qp, id_);
      return Status::Ok();
    };
    if (qp.state == QpState::kError) return fail(WcStatus::kWrFlushErr);
    if (d.fail_sends > 0) {
      --d.fail_sends;
      return fail(d.fail_status);
    }
    if (type_ == QpType::kRc && d.fail_rc_writes > 0) {
      --d.fail_rc_writes;
      return fail(d.fail_rc_status);
    }
    if (type_ == QpType::kUd && w.opcode != SendOpcode::kSend) return fail(WcStatus::kLocQpOpErr);
    if (s_->CheckLocal(qp.dev, qp.pd, w.sge) == nullptr) return fail(WcStatus::kLocProtErr);

    Packet p;
    p.src_dev = qp.dev;
    p.src_qp_id = id_;
    p.src_qpn = qpn_;
    p.src_incarnation = qp.incarnation;
    AhAttr av;
    if (type_ == QpType::kUd) {
      if (w.ah == nullptr) return Status::InvalidArgument("ibv_post_send: UD send without an AH");
      auto ah = s_->ahs.find(static_cast<const FakeAh*>(w.ah)->id());
      if (ah == s_->ahs.end() || ah->second.dev != qp.dev) {
        return Status::InvalidArgument("ibv_post_send: AH of another device");
      }
      av = ah->second.attr;
      if (av.port != qp.attr.port) return fail(WcStatus::kLocQpOpErr);
      if (w.sge.length > d.ports[av.port - 1].cfg.mtu_bytes) return fail(WcStatus::kLocLenErr);
      p.kind = PacketKind::kUd;
      p.dst_qpn = w.remote_qpn;
      p.qkey = w.remote_qkey;
    } else {
      av = qp.attr.av;
      p.kind = PacketKind::kRcWrite;
      p.dst_qpn = qp.attr.dest_qpn;
      p.remote_addr = w.remote_addr;
      p.rkey = w.rkey;
      p.wr_id = w.wr_id;
      p.signaled = w.signaled;
    }
    FakeFabric::State::Port& sport = d.ports[qp.attr.port - 1];
    p.grh = av.is_global;
    p.dgid = av.dgid;
    for (const GidEntry& g : sport.cfg.gids) {
      if (g.index == av.sgid_index) p.sgid = g.gid;
    }
    p.traffic_class = av.traffic_class;
    p.flow_label = av.flow_label;
    p.data = s_->TakeBuffer();
    p.data.assign(reinterpret_cast<const uint8_t*>(w.sge.addr),
                  reinterpret_cast<const uint8_t*>(w.sge.addr) + w.sge.length);

    // Serialization at the port's rate, then the wire.
    const int64_t ser_ns =
        static_cast<int64_t>(static_cast<double>(w.sge.length) * 8.0 / sport.cfg.rate_gbps);
    const int64_t tx_end = std::max(now, sport.busy_until) + ser_ns;
    sport.busy_until = tx_end;
    p.at = tx_end + sport.cfg.latency_ns;
    p.order = s_->next_order++;
    if (w.signaled) ++qp.sends_outstanding;

    const bool port_up = sport.cfg.state == PortState::kActive;
    const bool routed = port_up && s_->Route(av, p.dst_dev, p.dst_port);
    if (!port_up) ++s_->stats.dropped_port_down;
    // A LID of another process's fabric: out over the loopback link, after the sender's loss.
    if (port_up && !routed && type_ == QpType::kUd && !av.is_global && !s_->link_socks.empty()) {
      wc.status = WcStatus::kSuccess;
      wc.byte_len = w.sge.length;
      if (w.signaled) s_->Complete(qp.scq, wc, tx_end, true, id_);
      if (sport.loss > 0 && std::uniform_real_distribution<double>(0, 1)(s_->rng) < sport.loss) {
        ++s_->stats.dropped_loss;
      } else if (!s_->LinkSend(p, av.dlid, sport.cfg.lid)) {
        ++s_->stats.dropped_no_route;
      }
      return Status::Ok();
    }
    if (port_up && !routed) ++s_->stats.dropped_no_route;
    double loss = sport.loss;
    if (routed) loss = 1 - (1 - loss) * (1 - s_->devices[p.dst_dev].ports[p.dst_port - 1].loss);
    p.lost = routed && loss > 0 && std::uniform_real_distribution<double>(0, 1)(s_->rng) < loss;
    if (p.lost) ++s_->stats.dropped_loss;

    if (type_ == QpType::kUd) {
      // A UD send completes when the packet has left, whatever becomes of it.
      wc.status = WcStatus::kSuccess;
      wc.byte_len = w.sge.length;
      if (w.signaled) s_->Complete(qp.scq, wc, tx_end, true, id_);
      if (!routed) return Status::Ok();
    } else {
      if (port_up && !routed && !av.is_global && !s_->link_socks.empty()) {
        // A LID of another process's fabric: the write goes over the loopback link and completes
        // when its ack comes back.
        if (s_->LinkSendWrite(p, av.dlid, sport.cfg.lid, w.sge.length)) return Status::Ok();
      }
      if (!routed) {
        // RC: no acknowledgement ever comes; the retries run out.
        wc.status = WcStatus::kRetryExcErr;
        s_->Complete(qp.scq, wc, p.at, w.signaled, id_);
        s_->ToError(qp, id_);
        return Status::Ok();
      }
      p.ack_latency_ns = s_->devices[p.dst_dev].ports[p.dst_port - 1].cfg.latency_ns;
      p.lost = false;  // RC retransmits: loss shows as delay, modelled as none here
    }
    const int64_t arrives = p.at;
    const auto cq_ids = s_->CompletionCqs(p);
    s_->heap.push_back(std::move(p));
    std::push_heap(s_->heap.begin(), s_->heap.end(), PacketLater());
    s_->WakeArmedBy(arrives, cq_ids);
    return Status::Ok();
  }

  Status PostRecv(const RecvWr& w) override {
    StateLock l(*s_);
    auto& qp = s_->qps.at(id_);
    auto& d = s_->devices[qp.dev];
    if (d.removed) return Gone(d.cfg.name);
    if (qp.state == QpState::kReset) {
      return Status::FailedPrecondition("ibv_post_recv: QP in RESET");
    }
    if (qp.recvs.size() >= qp.caps.max_recv_wr) {
      return Status::ResourceExhausted("ibv_post_recv: receive queue full (ENOMEM)");
    }
    qp.recvs.push_back(w);
    if (qp.state == QpState::kError) s_->ToError(qp, id_);
    return Status::Ok();
  }

 private:
  static std::string Hex(uint32_t v) {
    char b[16];
    std::snprintf(b, sizeof(b), "%x", v);
    return b;
  }

  StateP s_;
  uint64_t id_;
  uint32_t qpn_;
  QpType type_;
};

class FakeContext final : public Context {
 public:
  FakeContext(StateP s, size_t dev, uint64_t id, int efd)
      : s_(std::move(s)), dev_(dev), id_(id), efd_(efd), name_(s_->devices[dev].cfg.name) {}
  // Closing a device whose PDs or CQs are still allocated leaves them dangling (their later
  // destroy calls touch a freed context): counted in busy_destroys.
  ~FakeContext() override {
    StateLock l(*s_);
    const bool pds = std::any_of(s_->pds.begin(), s_->pds.end(),
                                 [this](const auto& kv) { return kv.second == id_; });
    const bool cqs = std::any_of(s_->cqs.begin(), s_->cqs.end(),
                                 [this](const auto& kv) { return kv.second.ctx == id_; });
    if (pds || cqs) ++s_->stats.busy_destroys;
    s_->ctxs.erase(id_);
    ::close(efd_);
  }
  const std::string& name() const override { return name_; }

  StatusOr<DeviceAttr> QueryDevice() override {
    StateLock l(*s_);
    const auto& d = s_->devices[dev_];
    if (d.removed) return Gone(name_);
    DeviceAttr a;
    a.phys_port_cnt = static_cast<int>(d.ports.size());
    a.max_qp_wr = 8192;
    const bool ts = d.cfg.timestamps != CqTimestamps::kNone;
    a.hca_core_clock_khz = ts ? d.cfg.hca_core_clock_khz : 0;
    a.completion_timestamp_mask = ts ? d.cfg.completion_timestamp_mask : 0;
    return a;
  }

  StatusOr<PortAttr> QueryPort(uint8_t port) override {
    StateLock l(*s_);
    const auto& d = s_->devices[dev_];
    if (d.removed) return Gone(name_);
    if (port < 1 || port > d.ports.size()) {
      return Status::InvalidArgument("ibv_query_port: no port " + std::to_string(port));
    }
    const FakePortConfig& c = d.ports[port - 1].cfg;
    PortAttr a;
    a.state = c.state;
    a.link_layer = c.link_layer;
    a.lid = c.link_layer == LinkLayer::kInfiniBand ? c.lid : 0;
    a.active_mtu_bytes = c.mtu_bytes;
    a.gid_table_len = 256;
    return a;
  }

  StatusOr<std::vector<GidEntry>> QueryGids(uint8_t port) override {
    StateLock l(*s_);
    const auto& d = s_->devices[dev_];
    if (d.removed) return Gone(name_);
    if (port < 1 || port > d.ports.size()) {
      return Status::InvalidArgument("no port " + std::to_string(port));
    }
    return d.ports[port - 1].cfg.gids;
  }

  StatusOr<uint64_t> QueryRawClock() override {
    StateLock l(*s_);
    const auto& d = s_->devices[dev_];
    if (d.removed) return Gone(name_);
    if (d.cfg.timestamps == CqTimestamps::kNone) {
      return Status::Unimplemented("ibv_query_rt_values_ex: not supported");
    }
    const uint64_t nic_ns = static_cast<uint64_t>(s_->Now() + d.cfg.clock_offset_ns);
    return static_cast<uint64_t>(static_cast<unsigned __int128>(nic_ns) * d.cfg.hca_core_clock_khz /
                                 1'000'000) &
           d.cfg.completion_timestamp_mask;
  }

  StatusOr<std::unique_ptr<Pd>> AllocPd() override {
    StateLock l(*s_);
    if (s_->devices[dev_].removed) return Gone(name_);
    const uint64_t id = s_->next_id++;
    s_->pds[id] = id_;
    return std::unique_ptr<Pd>(std::make_unique<FakePd>(s_, id));
  }

  StatusOr<std::unique_ptr<Mr>> RegMr(Pd& pd, void* addr, size_t len, uint32_t access) override {
    StateLock l(*s_);
    auto& d = s_->devices[dev_];
    if (d.removed) return Gone(name_);
    if (addr == nullptr || len == 0) return Status::InvalidArgument("ibv_reg_mr: empty range");
    if ((access & kAccessRemoteWrite) && !(access & kAccessLocalWrite)) {
      return Status::InvalidArgument("ibv_reg_mr: REMOTE_WRITE needs LOCAL_WRITE (EINVAL)");
    }
    if (d.locked_bytes + static_cast<int64_t>(len) > d.cfg.memlock_limit_bytes) {
      return Status::ResourceExhausted(
          "ibv_reg_mr " + std::to_string(len) +
          " bytes: Cannot allocate memory (errno 12) (check the locked-memory limit: ulimit -l / "
          "LimitMEMLOCK)");
    }
    d.locked_bytes += static_cast<int64_t>(len);
    const uint32_t lkey = static_cast<uint32_t>(s_->next_id++);
    const uint32_t rkey = lkey ^ 0x5a000000u;
    s_->mrs[lkey] = {
        dev_,  static_cast<FakePd&>(pd).id(), reinterpret_cast<uint64_t>(addr), len, lkey, rkey,
        access};
    s_->lkey_by_rkey[rkey] = lkey;
    return std::unique_ptr<Mr>(std::make_unique<FakeMr>(s_, lkey, rkey));
  }

  StatusOr<std::unique_ptr<Cq>> CreateCq(int depth, CqTimestamps ts) override {
    StateLock l(*s_);
    const auto& d = s_->devices[dev_];
    if (d.removed) return Gone(name_);
    if (depth <= 0) return Status::InvalidArgument("ibv_create_cq_ex: cqe must be > 0");
    const bool ok =
        ts == CqTimestamps::kNone ||
        (ts == CqTimestamps::kRaw && d.cfg.timestamps != CqTimestamps::kNone) ||
        (ts == CqTimestamps::kWallclock && d.cfg.timestamps == CqTimestamps::kWallclock);
    if (!ok) {
      return Status::Unimplemented("ibv_create_cq_ex: Operation not supported (errno 95): " +
                                   name_ + " has no such completion timestamps");
    }
    const uint64_t id = s_->next_id++;
    FakeFabric::State::CqS& cq = s_->cqs[id] = {dev_, id_, depth, ts, {}};
    if (!s_->link_socks.empty() || s_->channels) {
      cq.tfd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
      cq.epfd = ::epoll_create1(EPOLL_CLOEXEC);
      bool ok = cq.tfd >= 0 && cq.epfd >= 0;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ok = ok && ::epoll_ctl(cq.epfd, EPOLL_CTL_ADD, cq.tfd, &ev) == 0;
      for (const auto& l : s_->link_socks) {
        ok = ok && ::epoll_ctl(cq.epfd, EPOLL_CTL_ADD, l.fd, &ev) == 0;
      }
      if (!ok) {
        const int err = errno;
        if (cq.epfd >= 0) ::close(cq.epfd);
        if (cq.tfd >= 0) ::close(cq.tfd);
        s_->cqs.erase(id);
        return Status::Internal("fake rdma: completion channel: " +
                                std::string(std::strerror(err)));
      }
    }
    return std::unique_ptr<Cq>(std::make_unique<FakeCq>(s_, id, ts));
  }

  StatusOr<std::unique_ptr<Qp>> CreateQp(Pd& pd, Cq& send_cq, Cq& recv_cq, QpType type,
                                         const QpCaps& caps) override {
    StateLock l(*s_);
    auto& d = s_->devices[dev_];
    if (d.removed) return Gone(name_);
    if (caps.max_send_wr == 0 || caps.max_recv_wr == 0 || caps.max_send_wr > 8192 ||
        caps.max_recv_wr > 8192) {
      return Status::InvalidArgument("ibv_create_qp: queue sizes out of range");
    }
    const uint64_t id = s_->next_id++;
    FakeFabric::State::QpS q;
    q.dev = dev_;
    q.pd = static_cast<FakePd&>(pd).id();
    q.qpn = d.next_qpn++;
    q.type = type;
    q.scq = static_cast<FakeCq&>(send_cq).id();
    q.rcq = static_cast<FakeCq&>(recv_cq).id();
    q.caps = caps;
    d.qp_by_qpn[q.qpn] = id;
    const uint32_t qpn = q.qpn;
    s_->qps.emplace(id, std::move(q));
    return std::unique_ptr<Qp>(std::make_unique<FakeQp>(s_, id, qpn, type));
  }

  StatusOr<std::unique_ptr<Ah>> CreateAh(Pd& pd, const AhAttr& attr) override {
    StateLock l(*s_);
    const auto& d = s_->devices[dev_];
    if (d.removed) return Gone(name_);
    Status st = CheckAv(d, attr);
    if (!st.ok()) return st;
    const uint64_t id = s_->next_id++;
    s_->ahs[id] = {dev_, static_cast<FakePd&>(pd).id(), attr};
    return std::unique_ptr<Ah>(std::make_unique<FakeAh>(s_, id));
  }

  int async_fd() const override { return efd_; }

  StatusOr<AsyncEvent> GetAsyncEvent() override {
    StateLock l(*s_);
    auto& c = s_->ctxs.at(id_);
    if (c.events.empty()) return Status::NotFound("no async event");
    AsyncEvent ev = c.events.front();
    c.events.pop_front();
    if (c.events.empty()) {
      uint64_t v;
      [[maybe_unused]] ssize_t n = ::read(efd_, &v, sizeof(v));
    }
    return ev;
  }

 private:
  StateP s_;
  size_t dev_;
  uint64_t id_;
  int efd_;
  std::string name_;
};

class FakeVerbsImpl final : public Verbs {
 public:
  FakeVerbsImpl(StateP s, std::vector<std::string> devices)
      : s_(std::move(s)), devices_(std::move(devices)) {}

  StatusOr<std::vector<DeviceInfo>> ListDevices() override {
    if (s_ == nullptr) {
      return Status::Unavailable("ibv_get_device_list: Function not implemented (errno 38)");
    }
    StateLock l(*s_);
    std::vector<DeviceInfo> out;
    for (const std::string& n : devices_) {
      auto it = s_->device_index.find(n);
      if (it == s_->device_index.end() || s_->devices[it->second].removed) continue;
      out.push_back({n, s_->devices[it->second].cfg.node_guid});
    }
    return out;
  }

  StatusOr<std::unique_ptr<Context>> Open(std::string_view device) override {
    if (s_ == nullptr) {
      return Status::Unavailable("ibv_get_device_list: Function not implemented (errno 38)");
    }
    StateLock l(*s_);
    if (std::find(devices_.begin(), devices_.end(), device) == devices_.end()) {
      return Status::NotFound("no RDMA device named " + std::string(device));
    }
    auto it = s_->device_index.find(device);
    if (it == s_->device_index.end() || s_->devices[it->second].removed) {
      return Status::NotFound("no RDMA device named " + std::string(device));
    }
    const int efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd < 0) return Status::Internal("eventfd: " + std::string(std::strerror(errno)));
    const uint64_t id = s_->next_id++;
    s_->ctxs[id] = {it->second, {}, efd};
    return std::unique_ptr<Context>(std::make_unique<FakeContext>(s_, it->second, id, efd));
  }

 private:
  StateP s_;
  std::vector<std::string> devices_;
};

}  // namespace

FakeFabric::FakeFabric(const Clock& clock, uint64_t seed)
    : state_(std::make_shared<State>(clock, seed)) {}
FakeFabric::~FakeFabric() = default;

void FakeFabric::AddDevice(FakeDeviceConfig config) {
  StateLock l(*state_);
  State::Device d;
  for (const FakePortConfig& p : config.ports) d.ports.push_back({p, 0.0, 0});
  d.cfg = std::move(config);
  state_->device_index[d.cfg.name] = state_->devices.size();
  state_->devices.push_back(std::move(d));
}

std::unique_ptr<Verbs> FakeFabric::MakeVerbs(std::vector<std::string> devices) {
  return std::make_unique<FakeVerbsImpl>(state_, std::move(devices));
}

std::unique_ptr<Verbs> FakeFabric::MakeNoRdmaStack() {
  return std::make_unique<FakeVerbsImpl>(nullptr, std::vector<std::string>{});
}

void FakeFabric::SetAutoAdvance(FakeClock* clock) {
  StateLock l(*state_);
  state_->auto_clock = clock;
}

FakeHwCost FakeFabric::HwCostOfThread(int tid) const {
  StateLock l(*state_);
  auto it = state_->hw_cost.find(tid);
  return it == state_->hw_cost.end() ? FakeHwCost{} : it->second;
}

void FakeFabric::EnableCompletionChannels() {
  StateLock l(*state_);
  state_->channels = true;
}

Status FakeFabric::EnableLoopbackLink(uint16_t udp_base) {
  StateLock l(*state_);
  State& s = *state_;
  if (!s.link_socks.empty()) return Status::FailedPrecondition("the loopback link is already on");
  std::vector<State::LinkSock> socks;
  auto fail = [&](const std::string& what) {
    for (const State::LinkSock& k : socks) ::close(k.fd);
    return Status::Internal("fake rdma link: " + what + ": " + std::strerror(errno));
  };
  for (size_t d = 0; d < s.devices.size(); ++d) {
    for (size_t p = 0; p < s.devices[d].ports.size(); ++p) {
      const FakePortConfig& c = s.devices[d].ports[p].cfg;
      if (c.link_layer != LinkLayer::kInfiniBand || c.lid == 0) continue;
      if (uint32_t{udp_base} + c.lid > 65535) {
        return Status::InvalidArgument("fake rdma link: UDP base + LID above 65535");
      }
      const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) return fail("socket");
      socks.push_back({fd, d, static_cast<uint8_t>(p + 1), c.lid});
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(udp_base + c.lid));
      if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0) {
        return fail("bind 127.0.0.1:" + std::to_string(udp_base + c.lid));
      }
    }
  }
  if (socks.empty()) return Status::FailedPrecondition("fake rdma link: no InfiniBand port");
  s.link_base = udp_base;
  s.link_socks = std::move(socks);
  return Status::Ok();
}

void FakeFabric::SetLoss(const std::string& device, uint8_t port, double probability) {
  StateLock l(*state_);
  state_->PortOf(device, port).loss = probability;
}

void FakeFabric::SetLatency(const std::string& device, uint8_t port, int64_t one_way_ns) {
  StateLock l(*state_);
  state_->PortOf(device, port).cfg.latency_ns = one_way_ns;
}

void FakeFabric::SetRate(const std::string& device, uint8_t port, double gbps) {
  StateLock l(*state_);
  state_->PortOf(device, port).cfg.rate_gbps = gbps;
}

void FakeFabric::SetPollDelay(const std::string& device, int64_t ns) {
  StateLock l(*state_);
  state_->Dev(device).poll_delay_ns = ns;
}

void FakeFabric::FailNextSends(const std::string& device, int count, WcStatus status) {
  StateLock l(*state_);
  State::Device& d = state_->Dev(device);
  d.fail_sends = count;
  d.fail_status = status;
}

void FakeFabric::FailNextRcWrites(const std::string& device, int count, WcStatus status) {
  StateLock l(*state_);
  State::Device& d = state_->Dev(device);
  d.fail_rc_writes = count;
  d.fail_rc_status = status;
}

void FakeFabric::SetPortState(const std::string& device, uint8_t port, PortState st) {
  StateLock l(*state_);
  state_->PortOf(device, port).cfg.state = st;
  state_->RaiseEvent(
      state_->device_index.at(device),
      {st == PortState::kActive ? AsyncEventType::kPortActive : AsyncEventType::kPortError, port,
       0});
}

void FakeFabric::RemoveDevice(const std::string& device) {
  StateLock l(*state_);
  const size_t i = state_->device_index.at(device);
  state_->devices[i].removed = true;
  for (auto& [id, qp] : state_->qps) {
    if (qp.dev == i) state_->ToError(qp, id);
  }
  state_->RaiseEvent(i, {AsyncEventType::kDeviceFatal, 0, 0});
}

void FakeFabric::SetGids(const std::string& device, uint8_t port, std::vector<GidEntry> gids) {
  StateLock l(*state_);
  state_->PortOf(device, port).cfg.gids = std::move(gids);
  state_->RaiseEvent(state_->device_index.at(device), {AsyncEventType::kGidChange, port, 0});
}

FakeFabricStats FakeFabric::stats() const {
  StateLock l(*state_);
  return state_->stats;
}

size_t FakeFabric::pending() const {
  StateLock l(*state_);
  size_t n = state_->heap.size();
  for (const auto& [id, cq] : state_->cqs) n += cq.q.size();
  return n;
}

}  // namespace fw::rdma
