// RC write bandwidth sessions toward the plan's peers.
#include "probes/rdma/rc_peers.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace fw::rdma {

uint32_t RailFlowId(std::string_view local_device, std::string_view remote_device) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (std::string_view part : {local_device, std::string_view("\n"), remote_device}) {
    for (char c : part) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  }
  return h & 0xffff;
}

struct RcPeers::Session {
  enum class State : uint8_t { kIdle, kAwaitAnswer, kConnected };
  RcPeerPlan plan;
  State state = State::kIdle;
  std::string remote_device;  // the peer's NIC, from its answer
  std::unique_ptr<RcWriteBw> qp;
  int64_t due = 0;          // idle: start the exchange; waiting: give up; connected: next burst
  uint64_t round = 0;       // the round whose burst is owed (0: none)
  uint64_t last_round = 0;  // the latest round asked, run or owed
  Backoff backoff;
  Session(uint64_t seed, double base_s, double max_s) : backoff(base_s, max_s, seed) {}
};

RcPeers::RcPeers(const Clock& clock, RcPeersOptions opts, RcDeviceLookup lookup, SendFn send,
                 ResultSink* sink, net::ProbeBudget* budget)
    : clock_(clock),
      opts_(std::move(opts)),
      lookup_(std::move(lookup)),
      send_(std::move(send)),
      sink_(sink),
      budget_(budget),
      seed_(opts_.seed) {}

RcPeers::~RcPeers() = default;

size_t RcPeers::connected() const {
  return static_cast<size_t>(std::count_if(probing_.begin(), probing_.end(), [](const auto& kv) {
    return kv.second->state == Session::State::kConnected;
  }));
}

void RcPeers::SetPlan(std::vector<RcPeerPlan> peers, double interval_s, uint64_t bytes) {
  if (interval_s > 0) opts_.interval_s = interval_s;
  if (bytes > 0) opts_.write.burst_bytes = bytes;
  std::map<RailKey, std::unique_ptr<Session>> next;
  const int64_t now = clock_.MonotonicNanos();
  for (RcPeerPlan& p : peers) {
    RailKey key{p.peer, p.local_device, p.remote_device};
    if (p.peer.empty() || next.count(key) != 0) continue;
    auto it = probing_.find(key);
    std::unique_ptr<Session> s;
    if (it != probing_.end()) {
      s = std::move(it->second);
    } else {
      s = std::make_unique<Session>(seed_++, opts_.backoff_base_s, opts_.backoff_max_s);
      s->due = now;
    }
    if (p.round != 0 && p.round != s->last_round) {
      // A round's burst goes ahead of the interval: at once when connected, else right after
      // the exchange (which bursts at once too).
      s->last_round = s->round = p.round;
      if (s->state == Session::State::kConnected) s->due = now;
    }
    s->plan = std::move(p);
    next[std::move(key)] = std::move(s);
  }
  probing_ = std::move(next);
}

void RcPeers::DropAll() {
  answering_.clear();
  const int64_t now = clock_.MonotonicNanos();
  for (auto& kv : probing_) Restart(*kv.second, now, false);
}

void RcPeers::DropDevice(const std::string& device) {
  for (auto it = answering_.begin(); it != answering_.end();) {
    it = it->second->local().device == device ? answering_.erase(it) : std::next(it);
  }
  const int64_t now = clock_.MonotonicNanos();
  for (auto& kv : probing_) {
    if (kv.second->qp && kv.second->qp->local().device == device) Restart(*kv.second, now, false);
  }
}

void RcPeers::Restart(Session& s, int64_t now, bool count) {
  s.qp.reset();
  s.state = Session::State::kIdle;
  s.due = now + static_cast<int64_t>(s.backoff.Next() * 1e9);
  if (count) ++stats_.reconnects;
}

StatusOr<std::shared_ptr<RcBuffer>> RcPeers::BufferFor(const RcDeviceRef& ref) {
  for (auto it = buffers_.begin(); it != buffers_.end();) {
    it = it->second.expired() ? buffers_.erase(it) : std::next(it);
  }
  if (auto alive = buffers_[ref.pd].lock()) return alive;
  auto made = RcBuffer::Create(*ref.ctx, *ref.pd, opts_.write.buffer_bytes);
  if (!made.ok()) return made.status();
  buffers_[ref.pd] = made.value();
  return made;
}

void RcPeers::StartExchange(Session& s, int64_t now) {
  // The link layer of the peer is not known here: the lookup takes the named device, else the
  // first usable port.
  RcDeviceRef ref;
  if (!lookup_(s.plan.local_device, LinkLayer::kUnknown, ref)) {
    s.due = now + static_cast<int64_t>(opts_.connect_timeout_s * 1e9);
    return;
  }
  auto buffer = BufferFor(ref);
  auto qp = buffer.ok() ? RcWriteBw::Create(*ref.ctx, *ref.pd, ref.port, ref.gid_index,
                                            opts_.write, seed_++, std::move(buffer.value()))
                        : StatusOr<std::unique_ptr<RcWriteBw>>(buffer.status());
  if (!qp.ok()) {
    ++stats_.setup_failures;
    spdlog::warn("msg=\"rdma rc: QP setup failed\" peer={} error=\"{}\"", s.plan.peer,
                 qp.status().ToString());
    Restart(s, now, false);
    return;
  }
  s.qp = std::move(qp.value());
  s.state = Session::State::kAwaitAnswer;
  s.due = now + static_cast<int64_t>(opts_.connect_timeout_s * 1e9);
  ++stats_.connects_sent;
  send_({s.plan.peer, s.qp->local(), false, s.plan.remote_device});
}

void RcPeers::OnMessage(const RcConnectMsg& m) {
  const int64_t now = clock_.MonotonicNanos();
  if (m.reply) {
    // The session waiting on this rail: our NIC is the answer's peer_device (any, from an older
    // agent), the peer's the answering endpoint's device (any when the plan named none).
    Session* found = nullptr;
    for (auto& [key, session] : probing_) {
      Session& c = *session;
      if (c.plan.peer != m.peer || c.state != Session::State::kAwaitAnswer) continue;
      if (!m.peer_device.empty() && c.qp->local().device != m.peer_device) continue;
      if (!c.plan.remote_device.empty() && c.plan.remote_device != m.endpoint.device) continue;
      found = &c;
      break;
    }
    if (found == nullptr) {
      ++stats_.refused;
      spdlog::info("msg=\"rdma rc: answer without a request\" peer={} device={} peer_device={}",
                   m.peer, m.peer_device, m.endpoint.device);
      return;
    }
    Session& s = *found;
    Status st = s.qp->Connect(m.endpoint);
    if (!st.ok()) {
      ++stats_.refused;
      spdlog::warn("msg=\"rdma rc: connect failed\" peer={} error=\"{}\"", m.peer, st.ToString());
      Restart(s, now, false);
      return;
    }
    s.state = Session::State::kConnected;
    s.remote_device = m.endpoint.device;
    s.due = now;  // the first burst at once
    return;
  }
  // A request: a new answering QP replaces the earlier one of the same rail, whose prober has
  // started over.
  const RailKey key{m.peer, m.endpoint.device, m.peer_device};
  answering_.erase(key);
  if (answering_.size() >= opts_.max_answering) {
    ++stats_.refused;
    spdlog::warn("msg=\"rdma rc: too many answering QPs\" peer={} max={}", m.peer,
                 opts_.max_answering);
    return;
  }
  RcDeviceRef ref;
  if (!lookup_(m.peer_device, m.endpoint.link_layer, ref)) {
    ++stats_.refused;
    spdlog::info("msg=\"rdma rc: no port for a request\" peer={} device={} link_layer={}", m.peer,
                 m.peer_device, LinkLayerName(m.endpoint.link_layer));
    return;
  }
  RcWriteOptions wo = opts_.write;
  wo.message_bytes = std::min(wo.message_bytes, wo.buffer_bytes);
  auto buffer = BufferFor(ref);
  auto qp = buffer.ok() ? RcWriteBw::Create(*ref.ctx, *ref.pd, ref.port, ref.gid_index, wo,
                                            seed_++, std::move(buffer.value()))
                        : StatusOr<std::unique_ptr<RcWriteBw>>(buffer.status());
  if (!qp.ok()) {
    ++stats_.setup_failures;
    spdlog::warn("msg=\"rdma rc: answering QP setup failed\" peer={} error=\"{}\"", m.peer,
                 qp.status().ToString());
    return;
  }
  Status st = qp.value()->Connect(m.endpoint);
  if (!st.ok()) {
    ++stats_.refused;
    spdlog::warn("msg=\"rdma rc: request refused\" peer={} error=\"{}\"", m.peer, st.ToString());
    return;
  }
  ++stats_.answers_sent;
  send_({m.peer, qp.value()->local(), true, m.endpoint.device});
  answering_[key] = std::move(qp.value());
}

void RcPeers::RunBurst(Session& s, int64_t now) {
  RdmaProbeResult r;
  r.base.SetPeer(s.plan.peer);
  r.base.transport = net::Transport::kRdmaRc;
  r.base.seq = s.round != 0 ? s.round : seq_++;
  s.round = 0;
  r.base.timestamp_ns = clock_.WallNanos();
  r.SetLocalDevice(s.qp->local().device);
  r.SetPeerDevice(s.remote_device);
  r.base.flow_id = RailFlowId(s.qp->local().device, s.remote_device);
  // The host's CPU over the burst: a saturated host posts and polls late, and its low goodput is
  // the host's (docs/analysis.md). No lead as for tcp_bw (the UD mesh shares this thread): on a
  // small host a short burst stays under the counters' resolution and reads "not measured".
  // CPU pressure (PSI, microseconds) measures such a burst on any host.
  const bool cpu = cpu_.Start().ok();
  pressure_.Start(clock_.MonotonicNanos());
  auto b = s.qp->RunBurst(clock_, budget_);
  const int64_t end = clock_.MonotonicNanos();
  if (b.ok()) {
    ++stats_.bursts;
    r.base.cpu_pressure_permille = static_cast<uint16_t>(BusyPermille(pressure_.Stop(end).some));
    if (cpu) {
      const CpuBusy busy = cpu_.Stop();
      r.base.cpu_busy_permille = static_cast<uint16_t>(BusyPermille(busy.all));
      r.base.cpu_peak_permille = static_cast<uint16_t>(BusyPermille(busy.busiest));
    }
    s.backoff.Reset();
    r.base.bytes = b->bytes;
    r.base.goodput_bps = b->gbps * 1e9;
    r.base.rtt_ns = b->elapsed_ns;
    s.due = now + static_cast<int64_t>(opts_.interval_s * 1e9);
    if (sink_ != nullptr) sink_->OnResult(r);
    return;
  }
  if (b.status().code() == StatusCode::kResourceExhausted) {
    ++stats_.budget_refused;  // nothing sent: try at the next interval
    s.due = now + static_cast<int64_t>(opts_.interval_s * 1e9);
    return;
  }
  ++stats_.burst_failures;
  if (s.qp->broken()) ++stats_.qp_errors;
  spdlog::warn("msg=\"rdma rc: burst failed, reconnecting\" peer={} device={} error=\"{}\"",
               s.plan.peer, s.qp->local().device, b.status().ToString());
  // No result: RC retransmits, so a failed burst says nothing about packet loss on the path; it
  // is a broken connection (the peer restarted, a QP error), counted and logged above.
  Restart(s, end, true);
}

int64_t RcPeers::Step() {
  int64_t now = clock_.MonotonicNanos();
  // One burst per step (the UD mesh waits meanwhile): the connected session due longest ago, so
  // that a session whose interval is shorter than the caller's step period cannot starve the
  // sessions after it in the map (a rail reconnected behind a rail bursting every 0.1 s).
  Session* burst = nullptr;
  for (auto& kv : probing_) {
    Session& s = *kv.second;
    if (s.due > now) continue;
    switch (s.state) {
      case Session::State::kIdle:
        StartExchange(s, now);
        break;
      case Session::State::kAwaitAnswer:
        ++stats_.connect_timeouts;
        spdlog::info("msg=\"rdma rc: no answer, starting over\" peer={} device={}", s.plan.peer,
                     s.plan.local_device);
        Restart(s, now, false);
        break;
      case Session::State::kConnected:
        if (burst == nullptr || s.due < burst->due) burst = &s;
        break;
    }
  }
  if (burst != nullptr) {
    RunBurst(*burst, now);
    now = clock_.MonotonicNanos();
  }
  int64_t next = 1'000'000'000;
  for (const auto& kv : probing_) next = std::min(next, std::max<int64_t>(0, kv.second->due - now));
  return next;
}

}  // namespace fw::rdma
