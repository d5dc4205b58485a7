// UD port resources: setup, send slots, receives, address handles and QP recovery.
#include "probes/rdma/ud_port.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <tuple>

namespace fw::rdma {

bool AhKey::operator<(const AhKey& o) const {
  return std::tie(global, gid.raw, lid, flow_label, traffic_class, sl) <
         std::tie(o.global, o.gid.raw, o.lid, o.flow_label, o.traffic_class, o.sl);
}

StatusOr<std::unique_ptr<UdPort>> UdPort::Create(Context& ctx, Pd& pd, const DeviceAttr& dev,
                                                 uint8_t port, const UdPortOptions& opts) {
  if (opts.source_qps < 1 || opts.source_qps > 64 || opts.recv_depth < 1 ||
      opts.recv_depth > 4096 || opts.send_slots < 1 || opts.send_slots > 4096) {
    return Status::InvalidArgument("UD port options out of range");
  }
  std::unique_ptr<UdPort> p(new UdPort(ctx, pd, dev, port, opts));
  Status st = p->Refresh();
  if (!st.ok()) return st;

  // Completion timestamps, best first: the NIC's wall clock, raw NIC ticks, none (software).
  const int depth = opts.source_qps * opts.recv_depth + opts.send_slots + 16;
  std::vector<std::pair<CqTimestamps, TsSource>> tries;
  if (opts.best_timestamps == CqTimestamps::kWallclock) {
    tries.push_back({CqTimestamps::kWallclock, TsSource::kNicWallclock});
  }
  if (opts.best_timestamps != CqTimestamps::kNone && dev.hca_core_clock_khz > 0) {
    tries.push_back({CqTimestamps::kRaw, TsSource::kNicRaw});
  }
  tries.push_back({CqTimestamps::kNone, TsSource::kSoftware});
  for (const auto& [ts, source] : tries) {
    auto cq = ctx.CreateCq(depth, ts);
    if (cq.ok()) {
      p->cq_ = std::move(cq.value());
      p->ts_source_ = source;
      break;
    }
    spdlog::info(
        "msg=\"rdma: completion timestamps not available, trying the next source\" "
        "device={} port={} source={} error=\"{}\"",
        ctx.name(), port, TsSourceName(source), cq.status().message());
    if (ts == CqTimestamps::kNone) return cq.status();
  }

  // The send CQ has the receive CQ's timestamps: both are this NIC's clock.
  const CqTimestamps chosen = p->ts_source_ == TsSource::kNicWallclock ? CqTimestamps::kWallclock
                              : p->ts_source_ == TsSource::kNicRaw     ? CqTimestamps::kRaw
                                                                       : CqTimestamps::kNone;
  auto scq = ctx.CreateCq(opts.send_slots + 16, chosen);
  if (!scq.ok()) return scq.status();
  p->scq_ = std::move(scq.value());

  const size_t recv_slots = static_cast<size_t>(opts.source_qps) * opts.recv_depth;
  p->send_slot_count_ = static_cast<size_t>(opts.send_slots);
  p->mem_.assign(recv_slots * kRecvStride + p->send_slot_count_ * kUdMessageBytes, 0);
  p->recv_base_ = p->mem_.data();
  p->send_base_ = p->mem_.data() + recv_slots * kRecvStride;
  auto mr = ctx.RegMr(pd, p->mem_.data(), p->mem_.size(), kAccessLocalWrite);
  if (!mr.ok()) return mr.status();
  p->mr_ = std::move(mr.value());
  for (int i = opts.send_slots - 1; i >= 0; --i) p->free_slots_.push_back(static_cast<uint16_t>(i));
  p->slot_busy_.assign(p->send_slot_count_, false);

  QpCaps caps;
  caps.max_send_wr = static_cast<uint32_t>(opts.send_slots);
  caps.max_recv_wr = static_cast<uint32_t>(opts.recv_depth);
  for (int q = 0; q < opts.source_qps; ++q) {
    auto qp = ctx.CreateQp(pd, *p->scq_, *p->cq_, QpType::kUd, caps);
    if (!qp.ok()) return qp.status();
    p->qps_.push_back(std::move(qp.value()));
    st = p->BringUp(*p->qps_.back());
    if (!st.ok()) return st;
    st = p->PostAllRecvs(q);
    if (!st.ok()) return st;
  }
  p->endpoint_.qpn = p->qps_.front()->qp_num();
  return p;
}

UdPort::~UdPort() {
  ahs_.clear();
  qps_.clear();
}

Status UdPort::Refresh() {
  auto pa = ctx_.QueryPort(port_);
  if (!pa.ok()) return pa.status();
  up_ = pa->state == PortState::kActive;
  endpoint_.device = ctx_.name();
  endpoint_.port = port_;
  endpoint_.link_layer = pa->link_layer;
  endpoint_.lid = pa->link_layer == LinkLayer::kInfiniBand ? pa->lid : 0;
  endpoint_.qkey = kProbeQkey;
  auto table = ctx_.QueryGids(port_);
  if (!table.ok()) return table.status();
  auto gid = ChooseSourceGid(*table, pa->link_layer, opts_.netdev, opts_.allow_ipv6_gid);
  if (gid.ok()) {
    endpoint_.gid = gid->gid;
    endpoint_.gid_index = gid->index;
  } else if (pa->link_layer != LinkLayer::kInfiniBand) {
    return Status::NotFound(ctx_.name() + " port " + std::to_string(port_) + ": " +
                            gid.status().message());
  } else {
    endpoint_.gid = Gid{};  // IB routes by LID; a GID only matters across subnets
    endpoint_.gid_index = 0;
  }
  return Status::Ok();
}

Status UdPort::BringUp(Qp& qp) {
  QpAttr a;
  a.port = port_;
  a.qkey = kProbeQkey;
  a.state = QpState::kInit;
  Status st = qp.Modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpQkey);
  if (!st.ok()) return st;
  a.state = QpState::kRtr;
  st = qp.Modify(a, kQpState);
  if (!st.ok()) return st;
  a.state = QpState::kRts;
  a.sq_psn = 0;
  return qp.Modify(a, kQpState | kQpSqPsn);
}

Status UdPort::PostAllRecvs(int qp) {
  for (int i = 0; i < opts_.recv_depth; ++i) {
    Status st = Repost(static_cast<uint16_t>(qp * opts_.recv_depth + i));
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

int UdPort::QpIndex(uint32_t qpn) const {
  for (size_t i = 0; i < qps_.size(); ++i) {
    if (qps_[i]->qp_num() == qpn) return static_cast<int>(i);
  }
  return -1;
}

int UdPort::AcquireSendSlot() {
  if (free_slots_.empty()) return -1;
  const int s = free_slots_.back();
  free_slots_.pop_back();
  slot_busy_[static_cast<size_t>(s)] = true;
  return s;
}

void UdPort::ReleaseSendSlot(int slot) {
  if (slot < 0 || static_cast<size_t>(slot) >= send_slot_count_ ||
      !slot_busy_[static_cast<size_t>(slot)]) {
    return;  // not taken: a stale or duplicate completion
  }
  slot_busy_[static_cast<size_t>(slot)] = false;
  free_slots_.push_back(static_cast<uint16_t>(slot));
}

Status UdPort::PostSend(int qp, int slot, const Ah& ah, uint32_t remote_qpn, uint32_t remote_qkey,
                        uint64_t wr_id) {
  SendWr w;
  w.wr_id = wr_id;
  w.sge = {reinterpret_cast<uint64_t>(SendBuffer(slot)), static_cast<uint32_t>(kUdMessageBytes),
           mr_->lkey()};
  w.ah = &ah;
  w.remote_qpn = remote_qpn;
  w.remote_qkey = remote_qkey;
  return qps_[static_cast<size_t>(qp)]->PostSend(w);
}

const uint8_t* UdPort::RecvPayload(uint16_t slot) const {
  return recv_base_ + static_cast<size_t>(slot) * kRecvStride + kGrhBytes;
}

Status UdPort::Repost(uint16_t slot) {
  const int qp = slot / opts_.recv_depth;
  if (qp >= static_cast<int>(qps_.size())) return Status::Internal("receive slot out of range");
  RecvWr r;
  r.wr_id = MakeWrId(WrKind::kRecv, epoch_, 0, slot);
  r.sge = {reinterpret_cast<uint64_t>(RecvGrh(slot)), static_cast<uint32_t>(kRecvStride),
           mr_->lkey()};
  return qps_[static_cast<size_t>(qp)]->PostRecv(r);
}

const Ah* UdPort::GetAh(const AhKey& key, Status* error) {
  auto it = ahs_.find(key);
  if (it != ahs_.end()) return it->second.get();
  if (ahs_.size() >= opts_.max_ahs) {
    if (send_slots_in_use() > 0) {
      *error = Status::ResourceExhausted("address handle cache full with sends in flight");
      return nullptr;
    }
    ahs_.clear();
  }
  AhAttr a;
  a.port = port_;
  a.sl = key.sl;
  a.dlid = key.lid;
  a.is_global = key.global;
  if (key.global) {
    a.dgid = key.gid;
    a.sgid_index = static_cast<uint8_t>(endpoint_.gid_index);
    a.flow_label = key.flow_label;
    a.traffic_class = key.traffic_class;
    a.hop_limit = 64;
  }
  auto ah = ctx_.CreateAh(pd_, a);
  if (!ah.ok()) {
    *error = ah.status();
    return nullptr;
  }
  const Ah* raw = ah->get();
  ahs_.emplace(key, std::move(ah.value()));
  return raw;
}

Status UdPort::Reset() {
  QpAttr a;
  a.state = QpState::kReset;
  for (size_t q = 0; q < qps_.size(); ++q) {
    Status st = qps_[q]->Modify(a, kQpState);
    if (!st.ok()) return st;
  }
  // Nothing is in flight after RESET: every slot and every AH is free again, and completions
  // still queued from before are stale (a new epoch).
  ++epoch_;
  slot_busy_.assign(send_slot_count_, false);
  free_slots_.clear();
  for (int i = static_cast<int>(send_slot_count_) - 1; i >= 0; --i) {
    free_slots_.push_back(static_cast<uint16_t>(i));
  }
  ahs_.clear();
  for (size_t q = 0; q < qps_.size(); ++q) {
    Status st = BringUp(*qps_[q]);
    if (!st.ok()) return st;
    st = PostAllRecvs(static_cast<int>(q));
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

}  // namespace fw::rdma
