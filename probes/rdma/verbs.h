// The thin seam over exactly the ibverbs calls the RDMA probes use. Abstract so that the probes
// run against an in-memory fake (fake_verbs.h) where no RDMA hardware exists; the one real
// implementation (verbs_ibv.h) calls libibverbs. Types mirror the verbs ones the probes need and
// nothing more.
//
// Ownership: a Context owns nothing the caller created through it; the caller destroys objects
// in reverse order of creation (AH, QP, CQ, MR, PD) and all of them before the Context. Threading:
// one thread per Context, except Context::GetAsyncEvent, which may run on another thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fw::rdma {

// ---- identities -----------------------------------------------------------------------------

struct Gid {
  std::array<uint8_t, 16> raw{};

  bool IsZero() const;
  // ::ffff:a.b.c.d, the form RoCE v2 GIDs of IPv4 addresses take.
  bool IsIpv4Mapped() const;
  // fe80::/10.
  bool IsLinkLocal() const;
  // "0000:0000:0000:0000:0000:ffff:c612:0102", the sysfs `gids/<idx>` form.
  std::string ToString() const;
  // Parses the sysfs form (eight groups of four hex digits, optional trailing newline).
  static StatusOr<Gid> Parse(std::string_view text);
  bool operator==(const Gid&) const = default;
};

// gid_attrs/types/<idx>: "IB/RoCE v1" is IB on an InfiniBand port and RoCE v1 on Ethernet.
enum class GidType : uint8_t { kIb, kRoceV1, kRoceV2, kUnknown };
std::string_view GidTypeName(GidType t);

struct GidEntry {
  int index = 0;
  Gid gid;
  GidType type = GidType::kUnknown;
  std::string netdev;  // gid_attrs/ndevs/<idx>; empty on InfiniBand
};

enum class LinkLayer : uint8_t { kInfiniBand, kEthernet, kUnknown };
std::string_view LinkLayerName(LinkLayer l);

enum class PortState : uint8_t { kNop, kDown, kInit, kArmed, kActive, kActiveDefer };

struct DeviceAttr {
  int phys_port_cnt = 0;
  uint32_t max_qp_wr = 0;
  // Frequency of the NIC's free-running clock in kHz (ibv_device_attr_ex::hca_core_clock); 0 when
  // the device reports none.
  uint64_t hca_core_clock_khz = 0;
  // Which bits of a raw completion timestamp are valid; 0 when the device has no such stamps.
  uint64_t completion_timestamp_mask = 0;
};

struct PortAttr {
  PortState state = PortState::kNop;
  LinkLayer link_layer = LinkLayer::kUnknown;
  uint16_t lid = 0;
  uint32_t active_mtu_bytes = 0;  // 256..4096
  int gid_table_len = 0;
};

// ---- work requests and completions ----------------------------------------------------------

enum class QpType : uint8_t { kUd, kRc };
enum class QpState : uint8_t { kReset, kInit, kRtr, kRts, kSqd, kSqe, kError };
std::string_view QpStateName(QpState s);

// Bits of QpAttr that a ModifyQp call sets (the IBV_QP_* masks the probes use).
enum QpAttrMask : uint32_t {
  kQpState = 1u << 0,
  kQpPkeyIndex = 1u << 1,
  kQpPort = 1u << 2,
  kQpQkey = 1u << 3,
  kQpAccessFlags = 1u << 4,
  kQpAv = 1u << 5,  // address vector (RC)
  kQpPathMtu = 1u << 6,
  kQpDestQpn = 1u << 7,
  kQpRqPsn = 1u << 8,
  kQpMaxDestRdAtomic = 1u << 9,
  kQpMinRnrTimer = 1u << 10,
  kQpSqPsn = 1u << 11,
  kQpTimeout = 1u << 12,
  kQpRetryCnt = 1u << 13,
  kQpRnrRetry = 1u << 14,
  kQpMaxQpRdAtomic = 1u << 15,
};

enum AccessFlags : uint32_t {
  kAccessLocalWrite = 1u << 0,
  kAccessRemoteWrite = 1u << 1,
  kAccessRemoteRead = 1u << 2,
};

// An address vector: the route to a remote port. `is_global` adds a GRH (always on RoCE).
struct AhAttr {
  uint8_t port = 1;
  uint16_t dlid = 0;
  uint8_t sl = 0;
  bool is_global = false;
  Gid dgid;
  uint8_t sgid_index = 0;
  uint32_t flow_label = 0;  // 20 bits; RoCE v2 hashes it into the UDP source port
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 64;
};

struct QpAttr {
  QpState state = QpState::kReset;
  uint16_t pkey_index = 0;
  uint8_t port = 1;
  uint32_t qkey = 0;
  uint32_t access_flags = 0;
  AhAttr av;
  uint32_t path_mtu_bytes = 1024;
  uint32_t dest_qpn = 0;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  uint8_t max_dest_rd_atomic = 1;
  uint8_t min_rnr_timer = 12;
  uint8_t timeout = 14;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t max_rd_atomic = 1;
};

struct QpCaps {
  uint32_t max_send_wr = 64;
  uint32_t max_recv_wr = 64;
  uint32_t max_inline_data = 0;
};

// One scatter/gather element: bytes [addr, addr+length) inside the MR whose lkey this is.
struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

class Ah;

enum class SendOpcode : uint8_t { kSend, kRdmaWrite };

struct SendWr {
  uint64_t wr_id = 0;
  SendOpcode opcode = SendOpcode::kSend;
  Sge sge;
  bool signaled = true;
  // UD only.
  const Ah* ah = nullptr;
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  // RDMA write only.
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
};

struct RecvWr {
  uint64_t wr_id = 0;
  Sge sge;
};

// A subset of ibv_wc_status; anything else maps to kOther.
enum class WcStatus : uint8_t {
  kSuccess,
  kLocLenErr,
  kLocQpOpErr,
  kLocProtErr,
  kWrFlushErr,
  kRemAccessErr,
  kRemInvReqErr,
  kRetryExcErr,
  kRnrRetryExcErr,
  kGeneralErr,
  kOther,
};
inline constexpr int kWcStatusCount = 11;
std::string_view WcStatusName(WcStatus s);

enum class WcOpcode : uint8_t { kSend, kRdmaWrite, kRecv, kOther };

// Which NIC timestamps a completion queue delivers (ibv_create_cq_ex wc_flags).
enum class CqTimestamps : uint8_t {
  kNone,
  kRaw,        // IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: free-running ticks at hca_core_clock
  kWallclock,  // IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK: ns, converted by the NIC/driver
};

struct WorkCompletion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kOther;
  uint32_t byte_len = 0;
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;  // UD receives: the sender's QPN
  uint32_t vendor_err = 0;
  uint64_t ts_raw = 0;        // valid when the CQ was created with kRaw
  uint64_t ts_wallclock = 0;  // valid when the CQ was created with kWallclock
};

enum class AsyncEventType : uint8_t {
  kPortActive,
  kPortError,  // the port went down
  kLidChange,
  kGidChange,
  kQpFatal,
  kCqError,
  kDeviceFatal,  // the device is gone or broken: every object must be torn down
  kOther,
};
std::string_view AsyncEventName(AsyncEventType t);

struct AsyncEvent {
  AsyncEventType type = AsyncEventType::kOther;
  uint8_t port = 0;     // port events
  uint32_t qp_num = 0;  // QP events
};

// ---- objects --------------------------------------------------------------------------------

class Pd {
 public:
  virtual ~Pd() = default;
};

class Mr {
 public:
  virtual ~Mr() = default;
  virtual uint32_t lkey() const = 0;
  virtual uint32_t rkey() const = 0;
};

class Cq {
 public:
  virtual ~Cq() = default;
  // Moves up to `max` completions into `out`; returns how many (0 when none), or an error when the
  // CQ itself failed. Never blocks.
  virtual StatusOr<int> Poll(WorkCompletion* out, int max) = 0;
  virtual CqTimestamps timestamps() const = 0;
  // The completion channel's fd (readable after an armed CQ got a completion), or -1 when the CQ
  // has none and must be polled on a timer.
  virtual int event_fd() const = 0;
  // Consumes pending channel events and arms the CQ for the next completion
  // (ibv_get_cq_event + ibv_ack_cq_events + ibv_req_notify_cq). Poll once more afterwards:
  // a completion that arrived before the arm raises no event.
  virtual Status Arm() = 0;
};

class Ah {
 public:
  virtual ~Ah() = default;
};

class Qp {
 public:
  virtual ~Qp() = default;
  virtual uint32_t qp_num() const = 0;
  virtual QpType type() const = 0;
  // ibv_modify_qp. REQUIRES: `mask` includes kQpState and the attributes that transition needs.
  virtual Status Modify(const QpAttr& attr, uint32_t mask) = 0;
  virtual Status PostSend(const SendWr& wr) = 0;
  // A UD receive buffer must hold the 40-byte GRH before the payload.
  virtual Status PostRecv(const RecvWr& wr) = 0;
};

// An open device.
class Context {
 public:
  virtual ~Context() = default;
  virtual const std::string& name() const = 0;
  virtual StatusOr<DeviceAttr> QueryDevice() = 0;
  virtual StatusOr<PortAttr> QueryPort(uint8_t port) = 0;
  // The port's GID table with each entry's type and netdev; empty (zero) GIDs are left out.
  virtual StatusOr<std::vector<GidEntry>> QueryGids(uint8_t port) = 0;
  // The NIC clock now, in raw ticks (ibv_query_rt_values_ex); Unimplemented where unsupported.
  virtual StatusOr<uint64_t> QueryRawClock() = 0;

  virtual StatusOr<std::unique_ptr<Pd>> AllocPd() = 0;
  // Registers [addr, addr+len) of the caller's memory, which must outlive the MR.
  virtual StatusOr<std::unique_ptr<Mr>> RegMr(Pd& pd, void* addr, size_t len, uint32_t access) = 0;
  virtual StatusOr<std::unique_ptr<Cq>> CreateCq(int depth, CqTimestamps ts) = 0;
  virtual StatusOr<std::unique_ptr<Qp>> CreateQp(Pd& pd, Cq& send_cq, Cq& recv_cq, QpType type,
                                                 const QpCaps& caps) = 0;
  virtual StatusOr<std::unique_ptr<Ah>> CreateAh(Pd& pd, const AhAttr& attr) = 0;

  // A file descriptor that becomes readable when an async event is pending, or -1.
  virtual int async_fd() const = 0;
  // Returns the next pending async event without blocking, or NotFound when there is none.
  virtual StatusOr<AsyncEvent> GetAsyncEvent() = 0;
};

struct DeviceInfo {
  std::string name;  // "mlx5_0"
  uint64_t node_guid = 0;
};

// The entry point: the device list and opening a device.
class Verbs {
 public:
  virtual ~Verbs() = default;
  // All RDMA devices. Unavailable (with the errno in the message) when the host has no RDMA
  // stack at all, e.g. ENOSYS from ibv_get_device_list; an empty list when it has no devices.
  virtual StatusOr<std::vector<DeviceInfo>> ListDevices() = 0;
  virtual StatusOr<std::unique_ptr<Context>> Open(std::string_view device) = 0;
};

// The UD GRH that precedes every received UD payload in the receive buffer.
inline constexpr uint32_t kGrhBytes = 40;
// The QKey the probes use (the high bit clear: a non-privileged QKey).
inline constexpr uint32_t kProbeQkey = 0x46570001;

}  // namespace fw::rdma
