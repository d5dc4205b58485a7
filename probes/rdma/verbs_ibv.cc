// libibverbs behind the Verbs seam. Every verbs call's result is checked; a failure is logged
// with the call's name and errno and returned as a Status. This code cannot run on the build
// machines (no RDMA), so it keeps to the documented verbs contracts (man pages of rdma-core 44).
#include "probes/rdma/verbs_ibv.h"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

#include "probes/rdma/gid_table.h"

namespace fw::rdma {
namespace {

// Logs "verbs call failed" and returns a Status naming the call and the error. `err` is the
// errno (ibv_post_* and ibv_modify_qp return it instead of setting errno).
Status VerbsError(const char* call, int err, const std::string& what = {}) {
  const std::string detail = std::string(call) + (what.empty() ? "" : " " + what) + ": " +
                             std::strerror(err) + " (errno " + std::to_string(err) + ")";
  spdlog::warn("msg=\"verbs call failed\" call={} errno={} detail=\"{}\"", call, err, detail);
  switch (err) {
    case ENOSYS:
    case ENODEV:
    case ENXIO:
    case EAGAIN:
      return Status::Unavailable(detail);
    case ENOMEM:
      return Status::ResourceExhausted(detail);
    case EPERM:
    case EACCES:
      return Status::PermissionDenied(detail);
    case EOPNOTSUPP:
      return Status::Unimplemented(detail);
    default:
      return Status::Internal(detail);
  }
}

// A cleanup call in a destructor: log a failure, there is no one to return it to.
void CheckDestroy(const char* call, int rc) {
  if (rc != 0) {
    spdlog::warn("msg=\"verbs call failed\" call={} errno={} detail=\"{}\"", call, rc,
                 std::strerror(rc));
  }
}

ibv_mtu MtuEnum(uint32_t bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

ibv_qp_state StateEnum(QpState s) {
  switch (s) {
    case QpState::kReset:
      return IBV_QPS_RESET;
    case QpState::kInit:
      return IBV_QPS_INIT;
    case QpState::kRtr:
      return IBV_QPS_RTR;
    case QpState::kRts:
      return IBV_QPS_RTS;
    case QpState::kSqd:
      return IBV_QPS_SQD;
    case QpState::kSqe:
      return IBV_QPS_SQE;
    case QpState::kError:
      return IBV_QPS_ERR;
  }
  return IBV_QPS_ERR;
}

int AccessEnum(uint32_t a) {
  int out = 0;
  if (a & kAccessLocalWrite) out |= IBV_ACCESS_LOCAL_WRITE;
  if (a & kAccessRemoteWrite) out |= IBV_ACCESS_REMOTE_WRITE;
  if (a & kAccessRemoteRead) out |= IBV_ACCESS_REMOTE_READ;
  return out;
}

WcStatus StatusFrom(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS:
      return WcStatus::kSuccess;
    case IBV_WC_LOC_LEN_ERR:
      return WcStatus::kLocLenErr;
    case IBV_WC_LOC_QP_OP_ERR:
      return WcStatus::kLocQpOpErr;
    case IBV_WC_LOC_PROT_ERR:
      return WcStatus::kLocProtErr;
    case IBV_WC_WR_FLUSH_ERR:
      return WcStatus::kWrFlushErr;
    case IBV_WC_REM_ACCESS_ERR:
      return WcStatus::kRemAccessErr;
    case IBV_WC_REM_INV_REQ_ERR:
      return WcStatus::kRemInvReqErr;
    case IBV_WC_RETRY_EXC_ERR:
      return WcStatus::kRetryExcErr;
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return WcStatus::kRnrRetryExcErr;
    case IBV_WC_GENERAL_ERR:
      return WcStatus::kGeneralErr;
    default:
      return WcStatus::kOther;
  }
}

void ToIbvAh(const AhAttr& a, ibv_ah_attr& out) {
  std::memset(&out, 0, sizeof(out));
  out.dlid = a.dlid;
  out.sl = a.sl;
  out.port_num = a.port;
  out.is_global = a.is_global ? 1 : 0;
  if (a.is_global) {
    std::memcpy(out.grh.dgid.raw, a.dgid.raw.data(), 16);
    out.grh.sgid_index = a.sgid_index;
    out.grh.flow_label = a.flow_label & 0xfffff;
    out.grh.traffic_class = a.traffic_class;
    out.grh.hop_limit = a.hop_limit;
  }
}

class IbvPd final : public Pd {
 public:
  explicit IbvPd(ibv_pd* pd) : pd_(pd) {}
  ~IbvPd() override { CheckDestroy("ibv_dealloc_pd", ibv_dealloc_pd(pd_)); }
  ibv_pd* get() const { return pd_; }

 private:
  ibv_pd* pd_;
};

class IbvMr final : public Mr {
 public:
  explicit IbvMr(ibv_mr* mr) : mr_(mr) {}
  ~IbvMr() override { CheckDestroy("ibv_dereg_mr", ibv_dereg_mr(mr_)); }
  uint32_t lkey() const override { return mr_->lkey; }
  uint32_t rkey() const override { return mr_->rkey; }

 private:
  ibv_mr* mr_;
};

class IbvCq final : public Cq {
 public:
  IbvCq(ibv_cq_ex* cq, ibv_comp_channel* channel, CqTimestamps ts)
      : cq_(cq), channel_(channel), ts_(ts) {}
  ~IbvCq() override {
    // Events got but not acknowledged would make ibv_destroy_cq block.
    if (unacked_ > 0) ibv_ack_cq_events(get(), unacked_);
    CheckDestroy("ibv_destroy_cq", ibv_destroy_cq(get()));
    if (channel_ != nullptr) {
      CheckDestroy("ibv_destroy_comp_channel", ibv_destroy_comp_channel(channel_));
    }
  }
  ibv_cq* get() const { return ibv_cq_ex_to_cq(cq_); }
  CqTimestamps timestamps() const override { return ts_; }
  int event_fd() const override { return channel_ != nullptr ? channel_->fd : -1; }

  // The CQ stays armed until a completion raises its one event, and the mesh polls after every
  // Arm: while no completion was polled since the last arm, no event can be waiting unread (one
  // that fired is for a completion the next poll returns), so the arm stands and Arm makes no
  // syscall. Otherwise one ibv_get_cq_event reads the one event an arm can raise. So a wakeup
  // costs its ppoll and at most one read per CQ that had completions. Every 64th call arms in
  // full anyway, a bound on what an unexpected second event could cost (a readable fd with
  // nothing to poll).
  Status Arm() override {
    if (channel_ == nullptr) return Status::Ok();
    if (armed_ && !polled_since_arm_ && ++skipped_arms_ < 64) return Status::Ok();
    skipped_arms_ = 0;
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    if (ibv_get_cq_event(channel_, &ev_cq, &ev_ctx) == 0) {
      ++unacked_;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return VerbsError("ibv_get_cq_event", errno);
    }
    if (unacked_ > 0) {
      ibv_ack_cq_events(get(), unacked_);
      unacked_ = 0;
    }
    const int rc = ibv_req_notify_cq(get(), 0);
    if (rc != 0) {
      armed_ = false;
      return VerbsError("ibv_req_notify_cq", rc);
    }
    armed_ = true;
    polled_since_arm_ = false;
    return Status::Ok();
  }

  StatusOr<int> Poll(WorkCompletion* out, int max) override {
    if (max <= 0) return 0;
    ibv_poll_cq_attr attr{};
    int rc = ibv_start_poll(cq_, &attr);
    if (rc == ENOENT) return 0;
    if (rc != 0) return VerbsError("ibv_start_poll", rc);
    int n = 0;
    for (;;) {
      Read(out[n]);
      ++n;
      if (n == max) break;
      rc = ibv_next_poll(cq_);
      if (rc == ENOENT) break;
      if (rc != 0) {
        ibv_end_poll(cq_);
        return VerbsError("ibv_next_poll", rc);
      }
    }
    ibv_end_poll(cq_);
    polled_since_arm_ = true;
    return n;
  }

 private:
  void Read(WorkCompletion& wc) {
    wc = WorkCompletion{};
    wc.wr_id = cq_->wr_id;
    wc.status = StatusFrom(cq_->status);
    // For a failed completion only wr_id, status and vendor_err are defined.
    wc.vendor_err = ibv_wc_read_vendor_err(cq_);
    if (cq_->status != IBV_WC_SUCCESS) return;
    switch (ibv_wc_read_opcode(cq_)) {
      case IBV_WC_SEND:
        wc.opcode = WcOpcode::kSend;
        break;
      case IBV_WC_RDMA_WRITE:
        wc.opcode = WcOpcode::kRdmaWrite;
        break;
      case IBV_WC_RECV:
        wc.opcode = WcOpcode::kRecv;
        break;
      default:
        wc.opcode = WcOpcode::kOther;
        break;
    }
    wc.byte_len = ibv_wc_read_byte_len(cq_);
    wc.qp_num = ibv_wc_read_qp_num(cq_);
    if (wc.opcode == WcOpcode::kRecv) wc.src_qp = ibv_wc_read_src_qp(cq_);
    if (ts_ == CqTimestamps::kRaw) wc.ts_raw = ibv_wc_read_completion_ts(cq_);
    if (ts_ == CqTimestamps::kWallclock) wc.ts_wallclock = ibv_wc_read_completion_wallclock_ns(cq_);
  }

  ibv_cq_ex* cq_;
  ibv_comp_channel* channel_;
  CqTimestamps ts_;
  unsigned int unacked_ = 0;
  bool armed_ = false;             // a full Arm succeeded (the CQ is armed or its event waits)
  bool polled_since_arm_ = false;  // a Poll returned completions after the last full Arm
  int skipped_arms_ = 0;
};

class IbvAh final : public Ah {
 public:
  explicit IbvAh(ibv_ah* ah) : ah_(ah) {}
  ~IbvAh() override { CheckDestroy("ibv_destroy_ah", ibv_destroy_ah(ah_)); }
  ibv_ah* get() const { return ah_; }

 private:
  ibv_ah* ah_;
};

class IbvQp final : public Qp {
 public:
  IbvQp(ibv_qp* qp, QpType type) : qp_(qp), type_(type) {}
  ~IbvQp() override { CheckDestroy("ibv_destroy_qp", ibv_destroy_qp(qp_)); }
  uint32_t qp_num() const override { return qp_->qp_num; }
  QpType type() const override { return type_; }

  Status Modify(const QpAttr& a, uint32_t mask) override {
    ibv_qp_attr attr{};
    int m = 0;
    if (mask & kQpState) attr.qp_state = StateEnum(a.state), m |= IBV_QP_STATE;
    if (mask & kQpPkeyIndex) attr.pkey_index = a.pkey_index, m |= IBV_QP_PKEY_INDEX;
    if (mask & kQpPort) attr.port_num = a.port, m |= IBV_QP_PORT;
    if (mask & kQpQkey) attr.qkey = a.qkey, m |= IBV_QP_QKEY;
    if (mask & kQpAccessFlags) {
      attr.qp_access_flags = static_cast<unsigned>(AccessEnum(a.access_flags));
      m |= IBV_QP_ACCESS_FLAGS;
    }
    if (mask & kQpAv) ToIbvAh(a.av, attr.ah_attr), m |= IBV_QP_AV;
    if (mask & kQpPathMtu) attr.path_mtu = MtuEnum(a.path_mtu_bytes), m |= IBV_QP_PATH_MTU;
    if (mask & kQpDestQpn) attr.dest_qp_num = a.dest_qpn, m |= IBV_QP_DEST_QPN;
    if (mask & kQpRqPsn) attr.rq_psn = a.rq_psn & 0xffffff, m |= IBV_QP_RQ_PSN;
    if (mask & kQpMaxDestRdAtomic) {
      attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
      m |= IBV_QP_MAX_DEST_RD_ATOMIC;
    }
    if (mask & kQpMinRnrTimer) attr.min_rnr_timer = a.min_rnr_timer, m |= IBV_QP_MIN_RNR_TIMER;
    if (mask & kQpSqPsn) attr.sq_psn = a.sq_psn & 0xffffff, m |= IBV_QP_SQ_PSN;
    if (mask & kQpTimeout) attr.timeout = a.timeout, m |= IBV_QP_TIMEOUT;
    if (mask & kQpRetryCnt) attr.retry_cnt = a.retry_cnt, m |= IBV_QP_RETRY_CNT;
    if (mask & kQpRnrRetry) attr.rnr_retry = a.rnr_retry, m |= IBV_QP_RNR_RETRY;
    if (mask & kQpMaxQpRdAtomic) attr.max_rd_atomic = a.max_rd_atomic, m |= IBV_QP_MAX_QP_RD_ATOMIC;
    const int rc = ibv_modify_qp(qp_, &attr, m);
    if (rc != 0) {
      return VerbsError("ibv_modify_qp", rc, "to " + std::string(QpStateName(a.state)));
    }
    return Status::Ok();
  }

  Status PostSend(const SendWr& w) override {
    ibv_sge sge{w.sge.addr, w.sge.length, w.sge.lkey};
    ibv_send_wr wr{};
    wr.wr_id = w.wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = w.signaled ? IBV_SEND_SIGNALED : 0;
    if (w.opcode == SendOpcode::kSend) {
      wr.opcode = IBV_WR_SEND;
      if (type_ == QpType::kUd) {
        if (w.ah == nullptr) return Status::InvalidArgument("UD send without an address handle");
        wr.wr.ud.ah = static_cast<const IbvAh*>(w.ah)->get();
        wr.wr.ud.remote_qpn = w.remote_qpn;
        wr.wr.ud.remote_qkey = w.remote_qkey;
      }
    } else {
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.wr.rdma.remote_addr = w.remote_addr;
      wr.wr.rdma.rkey = w.rkey;
    }
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(qp_, &wr, &bad);
    if (rc != 0) return VerbsError("ibv_post_send", rc);
    return Status::Ok();
  }

  Status PostRecv(const RecvWr& w) override {
    ibv_sge sge{w.sge.addr, w.sge.length, w.sge.lkey};
    ibv_recv_wr wr{};
    wr.wr_id = w.wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    const int rc = ibv_post_recv(qp_, &wr, &bad);
    if (rc != 0) return VerbsError("ibv_post_recv", rc);
    return Status::Ok();
  }

 private:
  ibv_qp* qp_;
  QpType type_;
};

class IbvContext final : public Context {
 public:
  IbvContext(ibv_context* ctx, std::string name, std::string sysfs_root)
      : ctx_(ctx), name_(std::move(name)), sysfs_root_(std::move(sysfs_root)) {}
  ~IbvContext() override {
    CheckDestroy("ibv_close_device", ibv_close_device(ctx_) == 0 ? 0 : errno);
  }

  const std::string& name() const override { return name_; }

  StatusOr<DeviceAttr> QueryDevice() override {
    ibv_device_attr_ex attr{};
    const int rc = ibv_query_device_ex(ctx_, nullptr, &attr);
    if (rc != 0) return VerbsError("ibv_query_device_ex", rc, name_);
    DeviceAttr out;
    out.phys_port_cnt = attr.orig_attr.phys_port_cnt;
    out.max_qp_wr = static_cast<uint32_t>(attr.orig_attr.max_qp_wr);
    out.hca_core_clock_khz = attr.hca_core_clock;
    out.completion_timestamp_mask = attr.completion_timestamp_mask;
    return out;
  }

  StatusOr<PortAttr> QueryPort(uint8_t port) override {
    ibv_port_attr pa{};
    const int rc = ibv_query_port(ctx_, port, &pa);
    if (rc != 0) return VerbsError("ibv_query_port", rc, name_ + " port " + std::to_string(port));
    PortAttr out;
    out.state = static_cast<PortState>(pa.state <= IBV_PORT_ACTIVE_DEFER ? pa.state : 0);
    out.link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET      ? LinkLayer::kEthernet
                     : pa.link_layer == IBV_LINK_LAYER_INFINIBAND  ? LinkLayer::kInfiniBand
                     : pa.link_layer == IBV_LINK_LAYER_UNSPECIFIED ? LinkLayer::kInfiniBand
                                                                   : LinkLayer::kUnknown;
    out.lid = pa.lid;
    out.active_mtu_bytes = 128u << pa.active_mtu;
    out.gid_table_len = pa.gid_tbl_len;
    return out;
  }

  StatusOr<std::vector<GidEntry>> QueryGids(uint8_t port) override {
    auto pa = QueryPort(port);
    if (!pa.ok()) return pa.status();
    auto table = ReadSysfsGidTable(sysfs_root_, name_, port, pa->link_layer,
                                   pa->gid_table_len > 0 ? pa->gid_table_len : 256);
    if (table.ok()) return table;
    // No sysfs GID table (a container without /sys/class/infiniband): ask the device.
    std::vector<GidEntry> out;
    for (int i = 0; i < pa->gid_table_len; ++i) {
      ibv_gid_entry e{};
      const int rc = ibv_query_gid_ex(ctx_, port, static_cast<uint32_t>(i), &e, 0);
      if (rc == ENODATA || rc == EINVAL) continue;  // an empty slot
      if (rc != 0) return VerbsError("ibv_query_gid_ex", rc, name_ + " index " + std::to_string(i));
      GidEntry g;
      g.index = i;
      std::memcpy(g.gid.raw.data(), e.gid.raw, 16);
      if (g.gid.IsZero()) continue;
      g.type = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? GidType::kRoceV2
               : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? GidType::kRoceV1
               : e.gid_type == IBV_GID_TYPE_IB      ? GidType::kIb
                                                    : GidType::kUnknown;
      char ifname[IF_NAMESIZE] = {};
      if (e.ndev_ifindex != 0 && if_indextoname(e.ndev_ifindex, ifname) != nullptr) {
        g.netdev = ifname;
      }
      out.push_back(std::move(g));
    }
    return out;
  }

  StatusOr<uint64_t> QueryRawClock() override {
    ibv_values_ex v{};
    v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
    const int rc = ibv_query_rt_values_ex(ctx_, &v);
    if (rc != 0) return VerbsError("ibv_query_rt_values_ex", rc, name_);
    if (!(v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK)) {
      return Status::Unimplemented(name_ + ": no raw clock in ibv_query_rt_values_ex");
    }
    // Providers put the tick count in the timespec (mlx5: tv_sec 0, tv_nsec the ticks).
    return static_cast<uint64_t>(v.raw_clock.tv_sec) * 1'000'000'000ull +
           static_cast<uint64_t>(v.raw_clock.tv_nsec);
  }

  StatusOr<std::unique_ptr<Pd>> AllocPd() override {
    ibv_pd* pd = ibv_alloc_pd(ctx_);
    if (pd == nullptr) return VerbsError("ibv_alloc_pd", errno, name_);
    return std::unique_ptr<Pd>(std::make_unique<IbvPd>(pd));
  }

  StatusOr<std::unique_ptr<Mr>> RegMr(Pd& pd, void* addr, size_t len, uint32_t access) override {
    ibv_mr* mr = ibv_reg_mr(static_cast<IbvPd&>(pd).get(), addr, len, AccessEnum(access));
    if (mr == nullptr) {
      const int err = errno;
      // ENOMEM here is nearly always RLIMIT_MEMLOCK: say so (docs/rdma.md, "Limits").
      return VerbsError("ibv_reg_mr", err,
                        std::to_string(len) + " bytes" +
                            (err == ENOMEM || err == EPERM
                                 ? " (check the locked-memory limit: ulimit -l / LimitMEMLOCK)"
                                 : ""));
    }
    return std::unique_ptr<Mr>(std::make_unique<IbvMr>(mr));
  }

  StatusOr<std::unique_ptr<Cq>> CreateCq(int depth, CqTimestamps ts) override {
    ibv_cq_init_attr_ex a{};
    a.cqe = static_cast<uint32_t>(depth);
    a.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP;
    if (ts == CqTimestamps::kRaw) a.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
    if (ts == CqTimestamps::kWallclock) {
      a.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
    }
    a.comp_mask = 0;
    // One completion channel per CQ, nonblocking: the probe loop waits on its fd.
    ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
    if (ch == nullptr) return VerbsError("ibv_create_comp_channel", errno, name_);
    const int flags = fcntl(ch->fd, F_GETFL);
    if (flags < 0 || fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
      const int err = errno;
      CheckDestroy("ibv_destroy_comp_channel", ibv_destroy_comp_channel(ch));
      return VerbsError("fcntl(comp_channel, O_NONBLOCK)", err, name_);
    }
    a.channel = ch;
    ibv_cq_ex* cq = ibv_create_cq_ex(ctx_, &a);
    if (cq == nullptr) {
      const int err = errno;
      CheckDestroy("ibv_destroy_comp_channel", ibv_destroy_comp_channel(ch));
      return VerbsError("ibv_create_cq_ex", err, name_);
    }
    return std::unique_ptr<Cq>(std::make_unique<IbvCq>(cq, ch, ts));
  }

  StatusOr<std::unique_ptr<Qp>> CreateQp(Pd& pd, Cq& send_cq, Cq& recv_cq, QpType type,
                                         const QpCaps& caps) override {
    ibv_qp_init_attr a{};
    a.send_cq = static_cast<IbvCq&>(send_cq).get();
    a.recv_cq = static_cast<IbvCq&>(recv_cq).get();
    a.cap.max_send_wr = caps.max_send_wr;
    a.cap.max_recv_wr = caps.max_recv_wr;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = caps.max_inline_data;
    a.qp_type = type == QpType::kUd ? IBV_QPT_UD : IBV_QPT_RC;
    a.sq_sig_all = 0;
    ibv_qp* qp = ibv_create_qp(static_cast<IbvPd&>(pd).get(), &a);
    if (qp == nullptr) return VerbsError("ibv_create_qp", errno, name_);
    return std::unique_ptr<Qp>(std::make_unique<IbvQp>(qp, type));
  }

  StatusOr<std::unique_ptr<Ah>> CreateAh(Pd& pd, const AhAttr& attr) override {
    ibv_ah_attr a;
    ToIbvAh(attr, a);
    ibv_ah* ah = ibv_create_ah(static_cast<IbvPd&>(pd).get(), &a);
    if (ah == nullptr) return VerbsError("ibv_create_ah", errno, name_);
    return std::unique_ptr<Ah>(std::make_unique<IbvAh>(ah));
  }

  int async_fd() const override { return ctx_->async_fd; }

  StatusOr<AsyncEvent> GetAsyncEvent() override {
    ibv_async_event ev{};
    if (ibv_get_async_event(ctx_, &ev) != 0) {
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK) return Status::NotFound("no async event");
      return VerbsError("ibv_get_async_event", err, name_);
    }
    AsyncEvent out;
    switch (ev.event_type) {
      case IBV_EVENT_PORT_ACTIVE:
        out.type = AsyncEventType::kPortActive;
        break;
      case IBV_EVENT_PORT_ERR:
        out.type = AsyncEventType::kPortError;
        break;
      case IBV_EVENT_LID_CHANGE:
        out.type = AsyncEventType::kLidChange;
        break;
      case IBV_EVENT_GID_CHANGE:
        out.type = AsyncEventType::kGidChange;
        break;
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
        out.type = AsyncEventType::kQpFatal;
        break;
      case IBV_EVENT_CQ_ERR:
        out.type = AsyncEventType::kCqError;
        break;
      case IBV_EVENT_DEVICE_FATAL:
        out.type = AsyncEventType::kDeviceFatal;
        break;
      default:
        out.type = AsyncEventType::kOther;
        break;
    }
    switch (ev.event_type) {
      case IBV_EVENT_PORT_ACTIVE:
      case IBV_EVENT_PORT_ERR:
      case IBV_EVENT_LID_CHANGE:
      case IBV_EVENT_GID_CHANGE:
      case IBV_EVENT_PKEY_CHANGE:
      case IBV_EVENT_SM_CHANGE:
      case IBV_EVENT_CLIENT_REREGISTER:
        out.port = static_cast<uint8_t>(ev.element.port_num);
        break;
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_COMM_EST:
      case IBV_EVENT_SQ_DRAINED:
      case IBV_EVENT_PATH_MIG:
      case IBV_EVENT_PATH_MIG_ERR:
      case IBV_EVENT_QP_LAST_WQE_REACHED:
        out.qp_num = ev.element.qp != nullptr ? ev.element.qp->qp_num : 0;
        break;
      default:
        break;
    }
    ibv_ack_async_event(&ev);
    return out;
  }

 private:
  ibv_context* ctx_;
  std::string name_;
  std::string sysfs_root_;
};

class Ibverbs final : public Verbs {
 public:
  explicit Ibverbs(std::string sysfs_root) : sysfs_root_(std::move(sysfs_root)) {}

  StatusOr<std::vector<DeviceInfo>> ListDevices() override {
    int n = 0;
    errno = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) {
      // ENOSYS: the kernel has no RDMA support (PLATFORM-NOTES); nothing to probe.
      const int err = errno != 0 ? errno : ENODEV;
      return VerbsError("ibv_get_device_list", err);
    }
    std::vector<DeviceInfo> out;
    for (int i = 0; i < n; ++i) {
      const char* name = ibv_get_device_name(list[i]);
      if (name == nullptr) continue;
      out.push_back({name, be64toh(ibv_get_device_guid(list[i]))});
    }
    ibv_free_device_list(list);
    return out;
  }

  StatusOr<std::unique_ptr<Context>> Open(std::string_view device) override {
    int n = 0;
    errno = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) return VerbsError("ibv_get_device_list", errno != 0 ? errno : ENODEV);
    ibv_context* ctx = nullptr;
    bool found = false;
    int err = 0;
    for (int i = 0; i < n; ++i) {
      const char* name = ibv_get_device_name(list[i]);
      if (name == nullptr || device != name) continue;
      found = true;
      ctx = ibv_open_device(list[i]);
      if (ctx == nullptr) err = errno;
      break;
    }
    ibv_free_device_list(list);
    if (!found) return Status::NotFound("no RDMA device named " + std::string(device));
    if (ctx == nullptr) return VerbsError("ibv_open_device", err, std::string(device));
    // Async events are polled from the probe loop: the fd must not block.
    const int flags = fcntl(ctx->async_fd, F_GETFL);
    if (flags < 0 || fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK) < 0) {
      const int e = errno;
      CheckDestroy("ibv_close_device", ibv_close_device(ctx) == 0 ? 0 : errno);
      return VerbsError("fcntl(async_fd, O_NONBLOCK)", e, std::string(device));
    }
    return std::unique_ptr<Context>(
        std::make_unique<IbvContext>(ctx, std::string(device), sysfs_root_));
  }

 private:
  std::string sysfs_root_;
};

}  // namespace

std::unique_ptr<Verbs> MakeIbverbs(std::string sysfs_root) {
  return std::make_unique<Ibverbs>(std::move(sysfs_root));
}

}  // namespace fw::rdma
