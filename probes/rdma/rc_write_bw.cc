// RC write bursts (ib_write_bw style).
#include "probes/rdma/rc_write_bw.h"

#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>
#include <thread>

namespace fw::rdma {

StatusOr<std::shared_ptr<RcBuffer>> RcBuffer::Create(Context& ctx, Pd& pd, uint32_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("RC buffer of 0 bytes");
  auto b = std::make_shared<RcBuffer>();
  b->mem_.assign(bytes, 0);
  auto mr = ctx.RegMr(pd, b->mem_.data(), b->mem_.size(), kAccessLocalWrite | kAccessRemoteWrite);
  if (!mr.ok()) return mr.status();
  b->mr_ = std::move(mr.value());
  b->pd_ = &pd;
  return b;
}

StatusOr<std::unique_ptr<RcWriteBw>> RcWriteBw::Create(Context& ctx, Pd& pd, uint8_t port,
                                                       int gid_index, RcWriteOptions opts,
                                                       uint64_t seed,
                                                       std::shared_ptr<RcBuffer> buffer) {
  if (opts.message_bytes == 0 || opts.message_bytes > opts.buffer_bytes || opts.queue_depth < 1 ||
      opts.queue_depth > 1024 || opts.burst_bytes == 0) {
    return Status::InvalidArgument("RC write options out of range");
  }
  if (buffer && (buffer->pd() != &pd || buffer->size() < opts.message_bytes)) {
    return Status::InvalidArgument("RC buffer of another protection domain, or too small");
  }
  auto pa = ctx.QueryPort(port);
  if (!pa.ok()) return pa.status();
  std::unique_ptr<RcWriteBw> w(new RcWriteBw(ctx, pd, port, opts));
  w->opts_.path_mtu_bytes = std::min(opts.path_mtu_bytes, pa->active_mtu_bytes);
  if (!buffer) {
    auto own = RcBuffer::Create(ctx, pd, opts.buffer_bytes);
    if (!own.ok()) return own.status();
    buffer = std::move(own.value());
  }
  w->buffer_ = std::move(buffer);
  auto cq = ctx.CreateCq(opts.queue_depth * 2 + 4, CqTimestamps::kNone);
  if (!cq.ok()) return cq.status();
  w->cq_ = std::move(cq.value());
  QpCaps caps;
  caps.max_send_wr = static_cast<uint32_t>(opts.queue_depth);
  caps.max_recv_wr = 1;
  auto qp = ctx.CreateQp(pd, *w->cq_, *w->cq_, QpType::kRc, caps);
  if (!qp.ok()) return qp.status();
  w->qp_ = std::move(qp.value());
  w->next_psn_ = static_cast<uint32_t>(std::mt19937_64(seed)()) & 0xffffff;

  RcEndpoint& l = w->local_;
  l.device = ctx.name();
  l.port = port;
  l.link_layer = pa->link_layer;
  l.lid = pa->lid;
  l.gid_index = gid_index;
  auto gids = ctx.QueryGids(port);
  if (gids.ok()) {
    for (const GidEntry& g : *gids) {
      if (g.index == gid_index) l.gid = g.gid;
    }
  }
  l.qpn = w->qp_->qp_num();
  l.psn = w->next_psn_;
  l.rkey = w->buffer_->mr().rkey();
  l.addr = reinterpret_cast<uint64_t>(w->buffer_->data());
  l.length = static_cast<uint32_t>(w->buffer_->size());
  Status st = w->ToInit();
  if (!st.ok()) return st;
  return w;
}

RcWriteBw::~RcWriteBw() {
  qp_.reset();
  cq_.reset();
  buffer_.reset();
}

Status RcWriteBw::ToInit() {
  QpAttr a;
  a.state = QpState::kInit;
  a.port = port_;
  a.access_flags = kAccessRemoteWrite | kAccessLocalWrite;
  return qp_->Modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags);
}

Status RcWriteBw::Connect(const RcEndpoint& remote) {
  if (remote.qpn == 0 || remote.length < opts_.message_bytes || remote.rkey == 0) {
    return Status::InvalidArgument("RC peer endpoint incomplete (qpn, rkey, buffer)");
  }
  if (remote.link_layer != local_.link_layer) {
    return Status::InvalidArgument("RC peer on another link layer");
  }
  QpAttr a;
  a.state = QpState::kRtr;
  a.path_mtu_bytes = opts_.path_mtu_bytes;
  a.dest_qpn = remote.qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.av.port = port_;
  a.av.sl = opts_.service_level;
  a.av.dlid = remote.lid;
  if (local_.link_layer == LinkLayer::kEthernet || (!remote.gid.IsZero() && remote.lid == 0)) {
    a.av.is_global = true;
    a.av.dgid = remote.gid;
    a.av.sgid_index = static_cast<uint8_t>(local_.gid_index);
    a.av.traffic_class = opts_.traffic_class;
    a.av.hop_limit = 64;
  }
  Status st = qp_->Modify(a, kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                                 kQpMaxDestRdAtomic | kQpMinRnrTimer);
  if (!st.ok()) return st;
  a.state = QpState::kRts;
  a.sq_psn = local_.psn;
  a.timeout = 14;  // 4.096 us * 2^14 = 67 ms per retry
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  st = qp_->Modify(a,
                   kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic);
  if (!st.ok()) return st;
  remote_ = remote;
  connected_ = true;
  broken_ = false;
  return Status::Ok();
}

Status RcWriteBw::Reconnect(const RcEndpoint* remote) {
  if (remote == nullptr && remote_.qpn == 0) {
    return Status::FailedPrecondition("RC QP was never connected");
  }
  const RcEndpoint target = remote != nullptr ? *remote : remote_;
  QpAttr a;
  a.state = QpState::kReset;
  Status st = qp_->Modify(a, kQpState);
  if (!st.ok()) return st;
  // Drain what the error flushed.
  WorkCompletion wcs[32];
  for (int i = 0; i < 64; ++i) {
    auto n = cq_->Poll(wcs, 32);
    if (!n.ok() || *n == 0) break;
  }
  next_psn_ = (next_psn_ + 0x1000) & 0xffffff;
  local_.psn = next_psn_;
  st = ToInit();
  if (!st.ok()) return st;
  ++stats_.reconnects;
  connected_ = false;
  return Connect(target);
}

Status RcWriteBw::WaitForCompletion(int64_t deadline_ns, const Clock& clock) {
  const int64_t left = deadline_ns - clock.MonotonicNanos();
  if (left <= 0) return Status::Unavailable("RC write burst timed out");
  if (cq_->event_fd() >= 0) {  // armed by the caller, which polled once more since
    pollfd p{cq_->event_fd(), POLLIN, 0};
    const int ms = static_cast<int>(std::min<int64_t>(left / 1'000'000 + 1, 1000));
    if (::poll(&p, 1, ms) < 0 && errno != EINTR) {
      return Status::Internal("poll on the completion channel failed");
    }
    return Status::Ok();
  }
  // No completion channel (the fake): a short sleep, never a spin.
  std::this_thread::sleep_for(std::chrono::microseconds(50));
  return Status::Ok();
}

StatusOr<RcBurstResult> RcWriteBw::RunBurst(const Clock& clock, net::ProbeBudget* budget) {
  if (!connected_) return Status::FailedPrecondition("RC QP not connected");
  if (broken_) return Status::FailedPrecondition("RC QP broken: Reconnect() first");
  const uint64_t writes_total = (opts_.burst_bytes + opts_.message_bytes - 1) / opts_.message_bytes;
  const uint64_t bytes_total = writes_total * opts_.message_bytes;
  if (budget != nullptr) {
    // Bytes only, as the TCP bursts pay: the packet budget is the latency probes' rate, and one
    // burst's MTU packets (16 per 64 KiB write) would exceed a whole second of it.
    if (!budget->TryConsume(0, static_cast<double>(bytes_total))) {
      ++stats_.budget_refused;
      return Status::ResourceExhausted("probe budget refused an RC burst of " +
                                       std::to_string(bytes_total) + " bytes");
    }
  }
  const uint32_t slots = remote_.length / opts_.message_bytes;
  uint64_t posted = 0, done = 0;
  const int64_t start = clock.MonotonicNanos();
  const int64_t deadline = start + opts_.timeout_ns;
  WorkCompletion wcs[32];
  bool armed = false;  // armed since the last empty poll: wait on the channel
  while (done < writes_total) {
    while (posted < writes_total && posted - done < static_cast<uint64_t>(opts_.queue_depth)) {
      SendWr w;
      w.wr_id = posted;
      w.opcode = SendOpcode::kRdmaWrite;
      const uint64_t off = (posted % slots) * opts_.message_bytes;
      w.sge = {
          reinterpret_cast<uint64_t>(buffer_->data()) +
              (off % (buffer_->size() - opts_.message_bytes + 1)),
          opts_.message_bytes, buffer_->mr().lkey()};
      w.remote_addr = remote_.addr + off;
      w.rkey = remote_.rkey;
      w.signaled = true;
      Status st = qp_->PostSend(w);
      if (!st.ok()) {
        broken_ = true;
        return st;
      }
      ++posted;
    }
    auto n = cq_->Poll(wcs, 32);
    if (!n.ok()) {
      broken_ = true;
      return n.status();
    }
    for (int i = 0; i < *n; ++i) {
      if (wcs[i].status != WcStatus::kSuccess) {
        ++stats_.completion_errors;
        broken_ = true;
        spdlog::warn("msg=\"rdma: RC write failed\" device={} status={} vendor_err={:#x}",
                     local_.device, WcStatusName(wcs[i].status), wcs[i].vendor_err);
        return Status::Unavailable("RC write completion " +
                                   std::string(WcStatusName(wcs[i].status)));
      }
      ++done;
    }
    if (*n == 0 && cq_->event_fd() >= 0 && !armed) {
      // Arm, then poll once more: a completion that came before the arm raises no event.
      Status st = cq_->Arm();
      if (!st.ok()) {
        broken_ = true;
        return st;
      }
      armed = true;
      continue;
    }
    if (*n == 0) {
      Status st = WaitForCompletion(deadline, clock);
      if (!st.ok()) {
        broken_ = true;  // writes still in flight: only a reset makes the QP reusable
        return st;
      }
    }
    armed = false;
  }
  RcBurstResult r;
  r.bytes = bytes_total;
  r.writes = static_cast<int>(writes_total);
  r.elapsed_ns = std::max<int64_t>(1, clock.MonotonicNanos() - start);
  r.gbps = static_cast<double>(bytes_total) * 8.0 / static_cast<double>(r.elapsed_ns);
  ++stats_.bursts;
  stats_.bytes += bytes_total;
  return r;
}

}  // namespace fw::rdma
