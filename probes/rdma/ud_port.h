// One fabric port's UD probe resources: its CQ (with the best completion timestamps the device
// offers), registered buffers, one or more UD QPs in RTS with receives posted, send slots and an
// address-handle cache. The UD mesh (ud_mesh.h) drives it; it owns no probe logic.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "probes/rdma/gid_table.h"
#include "probes/rdma/ud_packet.h"
#include "probes/rdma/verbs.h"

namespace fw::rdma {

struct UdPortOptions {
  int source_qps = 1;    // QPs to rotate flows over (each has its own QPN, hence its own hash)
  // Receives posted per QP. A UD message that finds none is dropped by the NIC, and with send
  // windows (UdMeshOptions::send_window_ns) a window's probes from every prober and the acks of
  // this node's own probes arrive together: up to kMaxSendsPerWindow per flow of each. 512 slots
  // of kRecvStride bytes are 64 KiB registered per QP.
  int recv_depth = 512;
  int send_slots = 128;  // messages in flight per port
  CqTimestamps best_timestamps = CqTimestamps::kWallclock;  // the best to try first
  std::string netdev;  // RoCE: the netdev whose GID to use ("" = the port's own)
  bool allow_ipv6_gid = false;
  size_t max_ahs = 4096;
};

// What a peer needs to send to this port; travels in Hello and ProbePlan.
struct UdEndpoint {
  std::string device;
  uint8_t port = 1;
  LinkLayer link_layer = LinkLayer::kUnknown;
  uint16_t lid = 0;
  Gid gid;
  int gid_index = 0;
  uint32_t qpn = 0;  // the first QP; every QP of the port answers
  uint32_t qkey = kProbeQkey;
};

// wr_id layout: kind (8 bits) << 56 | epoch (8) << 48 | aux (32) << 16 | slot (16). The epoch
// is the port's reset count: a completion of an earlier incarnation of the QPs is stale.
enum class WrKind : uint8_t { kRecv = 0, kProbe = 1, kAck = 2, kReport = 3 };
inline uint64_t MakeWrId(WrKind k, uint8_t epoch, uint32_t aux, uint16_t slot) {
  return static_cast<uint64_t>(k) << 56 | static_cast<uint64_t>(epoch) << 48 |
         static_cast<uint64_t>(aux) << 16 | slot;
}
inline WrKind WrIdKind(uint64_t id) { return static_cast<WrKind>(id >> 56); }
inline uint8_t WrIdEpoch(uint64_t id) { return static_cast<uint8_t>(id >> 48); }
inline uint32_t WrIdAux(uint64_t id) { return static_cast<uint32_t>(id >> 16); }
inline uint16_t WrIdSlot(uint64_t id) { return static_cast<uint16_t>(id); }

struct AhKey {
  bool global = false;
  Gid gid;
  uint16_t lid = 0;
  uint32_t flow_label = 0;
  uint8_t traffic_class = 0;
  uint8_t sl = 0;
  bool operator<(const AhKey& o) const;
};

class UdPort {
 public:
  // Sets everything up on `port` of an open device and brings the QPs to RTS. NotFound when a
  // RoCE port has no usable GID (ChooseSourceGid says why).
  static StatusOr<std::unique_ptr<UdPort>> Create(Context& ctx, Pd& pd, const DeviceAttr& dev,
                                                  uint8_t port, const UdPortOptions& opts);
  ~UdPort();

  const UdEndpoint& endpoint() const { return endpoint_; }
  TsSource ts_source() const { return ts_source_; }
  const DeviceAttr& device_attr() const { return dev_; }
  bool up() const { return up_; }
  void set_up(bool up) { up_ = up; }
  // Receive completions (probes, acks, reports). The mesh keeps it armed.
  Cq& cq() { return *cq_; }
  // Send completions, apart so that they wake the mesh only when it waits for one: a responder
  // needs its ack's send stamp for the report at once, a prober's probe stamps can wait for the
  // wakeup its ack brings (UdMesh::Step).
  Cq& send_cq() { return *scq_; }
  int qp_count() const { return static_cast<int>(qps_.size()); }
  uint8_t epoch() const { return epoch_; }
  uint32_t QpNum(int qp) const { return qps_[static_cast<size_t>(qp)]->qp_num(); }
  // Which of this port's QPs has `qpn`, or -1.
  int QpIndex(uint32_t qpn) const;

  // A free send slot, or -1 when all are in flight.
  int AcquireSendSlot();
  void ReleaseSendSlot(int slot);
  int send_slots_in_use() const { return static_cast<int>(send_slot_count_ - free_slots_.size()); }
  uint8_t* SendBuffer(int slot) { return send_base_ + static_cast<size_t>(slot) * kUdMessageBytes; }
  // Posts the message in `slot` from QP `qp`. The slot stays taken until its completion.
  Status PostSend(int qp, int slot, const Ah& ah, uint32_t remote_qpn, uint32_t remote_qkey,
                  uint64_t wr_id);

  // The payload of a completed receive (after the GRH), and reposting its buffer.
  const uint8_t* RecvPayload(uint16_t slot) const;
  uint8_t* RecvGrh(uint16_t slot) { return recv_base_ + static_cast<size_t>(slot) * kRecvStride; }
  Status Repost(uint16_t slot);

  // An address handle for `key` from the cache (created on a miss). Null when it cannot be made
  // or the cache is full while sends are in flight (an AH must outlive the sends that use it).
  const Ah* GetAh(const AhKey& key, Status* error);

  // Recovery: every QP to RESET and back to RTS, receives reposted, all send slots freed, the AH
  // cache emptied. What was in flight is gone (abandoned, not lost).
  Status Reset();
  // Re-reads LID and GID (after PORT_ACTIVE, LID_CHANGE or GID_CHANGE).
  Status Refresh();

  static constexpr size_t kRecvStride = 128;  // GRH (40) + message (64), rounded up

 private:
  UdPort(Context& ctx, Pd& pd, const DeviceAttr& dev, uint8_t port, UdPortOptions opts)
      : ctx_(ctx), pd_(pd), dev_(dev), port_(port), opts_(std::move(opts)) {}
  Status BringUp(Qp& qp);
  Status PostAllRecvs(int qp);

  Context& ctx_;
  Pd& pd_;
  DeviceAttr dev_;
  uint8_t port_;
  UdPortOptions opts_;
  UdEndpoint endpoint_;
  TsSource ts_source_ = TsSource::kSoftware;
  bool up_ = false;
  std::vector<uint8_t> mem_;
  uint8_t* recv_base_ = nullptr;
  uint8_t* send_base_ = nullptr;
  size_t send_slot_count_ = 0;
  // Destruction order: AHs and QPs before the CQ and MR (members destroy bottom-up).
  std::unique_ptr<Mr> mr_;
  std::unique_ptr<Cq> cq_;
  std::unique_ptr<Cq> scq_;
  std::vector<std::unique_ptr<Qp>> qps_;
  std::map<AhKey, std::unique_ptr<Ah>> ahs_;
  std::vector<uint16_t> free_slots_;
  std::vector<bool> slot_busy_;
  uint8_t epoch_ = 0;
};

}  // namespace fw::rdma
