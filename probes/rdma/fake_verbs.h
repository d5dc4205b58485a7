// An in-memory fabric of fake RDMA devices behind the Verbs seam, for tests and benchmarks where
// no RDMA hardware exists. It delivers packets between fake devices after a configurable latency
// (and serialization at the port's rate), with configurable loss, injected completion errors,
// completion timestamps (raw ticks on each device's own clock, or wall clock), and host delay
// (completions visible to Poll only some time after the NIC stamped them). It enforces what real
// hardware enforces, so code that passes here breaks in the same places on a NIC:
// - QP state order and the exact attribute mask each transition needs (ibv_modify_qp(3));
// - sends only in RTS, receives from INIT on; a QP in error flushes what is posted;
// - every SGE inside memory registered on the QP's PD with that lkey (else LOC_PROT_ERR);
//   RDMA writes need the remote rkey, range and REMOTE_WRITE access (else REM_ACCESS_ERR);
// - a UD datagram is dropped unless a receive is posted when it arrives, the QKey matches and the
//   receiving QP is in RTR or RTS; the receive buffer holds the 40-byte GRH, then the payload;
// - RoCE address handles need a GRH and an existing source GID index; IB ones a LID.
// Time comes from a Clock; with a FakeClock and auto-advance, a Poll that finds nothing jumps the
// clock to the next event, so bandwidth runs take no real time. Thread-safe (one mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "probes/rdma/verbs.h"

namespace fw::rdma {

struct FakePortConfig {
  LinkLayer link_layer = LinkLayer::kInfiniBand;
  uint16_t lid = 0;
  std::vector<GidEntry> gids;  // RoCE ports need at least one
  PortState state = PortState::kActive;
  uint32_t mtu_bytes = 4096;
  double rate_gbps = 100;      // egress serialization
  int64_t latency_ns = 2'000;  // one way, from the end of serialization to arrival
};

struct FakeDeviceConfig {
  std::string name;                   // unique within the fabric
  std::vector<FakePortConfig> ports;  // port numbers 1..n
  // The most this device's CQs offer: kWallclock implies kRaw too; kNone refuses both.
  CqTimestamps timestamps = CqTimestamps::kWallclock;
  uint64_t hca_core_clock_khz = 1'000'000;  // 1 GHz
  uint64_t completion_timestamp_mask = (1ull << 48) - 1;
  int64_t clock_offset_ns = 0;  // this NIC's raw clock = fabric time + offset (one domain per NIC)
  int64_t memlock_limit_bytes = 64ll << 20;  // RegMr beyond it fails like RLIMIT_MEMLOCK
  uint64_t node_guid = 0;
};

struct FakeFabricStats {
  uint64_t delivered = 0;
  uint64_t dropped_loss = 0;
  uint64_t dropped_no_recv = 0;  // a UD datagram found no posted receive
  uint64_t dropped_qkey = 0;
  uint64_t dropped_qp_state = 0;  // the receiving QP was not in RTR/RTS
  uint64_t dropped_no_route = 0;  // no port with that LID/GID, or no such QPN there
  uint64_t dropped_port_down = 0;
  uint64_t rdma_writes = 0;
  uint64_t link_sent = 0;      // UD datagrams handed to the loopback link
  uint64_t link_received = 0;  // ... and taken from it
  uint64_t link_refused = 0;   // malformed link datagrams, or for a LID not on this socket
  // A PD freed while MRs, QPs or AHs used it, or a context closed while its PDs or CQs lived:
  // the order hardware refuses (ibv_dealloc_pd: EBUSY) or that leaves objects dangling.
  uint64_t busy_destroys = 0;
};

// What the fake did on one thread in place of a NIC, for benchmarks that subtract it: syscalls
// a NIC needs none of on the host's threads.
struct FakeHwCost {
  // timerfd_settime calls making a CQ's channel readable when a completion is due: a NIC raises
  // that event with an interrupt, not on the poster's or the poller's thread.
  uint64_t timer_sets = 0;
  // Acquisitions of the fabric's one mutex that found it held (a futex wait): a NIC's queues
  // share no lock between hosts.
  uint64_t lock_waits = 0;
};

class FakeFabric {
 public:
  explicit FakeFabric(const Clock& clock, uint64_t seed = 1);
  ~FakeFabric();
  FakeFabric(const FakeFabric&) = delete;
  FakeFabric& operator=(const FakeFabric&) = delete;

  void AddDevice(FakeDeviceConfig config);
  // What one host sees: the named devices of this fabric. The fabric must outlive it.
  std::unique_ptr<Verbs> MakeVerbs(std::vector<std::string> devices);
  // A host without an RDMA stack: ListDevices fails like ibv_get_device_list with ENOSYS.
  static std::unique_ptr<Verbs> MakeNoRdmaStack();

  // With a FakeClock: a Poll that finds nothing ready advances it to the next pending event.
  void SetAutoAdvance(FakeClock* clock);

  // Test-only: links this process's fabric to the fabrics of other processes on the host. Each
  // InfiniBand port with a LID binds UDP 127.0.0.1:(udp_base + LID); a UD datagram to a LID that
  // no local device has leaves as one UDP datagram to udp_base + that LID (fake_link.h), stamped
  // with its arrival time on CLOCK_MONOTONIC, which all processes share; datagrams that arrive are
  // delivered like local ones when the fabric is next polled. Loss applies at both ends' ports,
  // latency at the sender's. RC writes to a LID cross it too: the write's
  // checks (responder QP state and peer QPN, rkey, bounds, REMOTE_WRITE) run in the receiving
  // process, which acks with the status; the bytes themselves do not travel, and no loss applies
  // (RC retransmits). RoCE (GID) routes do not cross the link. CQs created
  // after this have a completion channel (event_fd(), Arm()), woken by a timer for the earliest
  // completion they may see and by the link sockets. Needs a RealClock (CLOCK_MONOTONIC). Fails
  // when a socket cannot be bound.
  Status EnableLoopbackLink(uint16_t udp_base);
  // CQs created after this have a completion channel without the link: runners on several
  // threads of one process wait on them as on a NIC's, and the fake delivers in memory. Its only
  // syscalls besides those a NIC's channel needs (one read per event) are timer sets making an
  // armed CQ's channel readable when a completion is due, counted in HwCostOfThread
  // (fw_rdmaprobe cpu).
  void EnableCompletionChannels();

  // Faults. Device and port must exist.
  void SetLoss(const std::string& device, uint8_t port, double probability);
  void SetLatency(const std::string& device, uint8_t port, int64_t one_way_ns);
  void SetRate(const std::string& device, uint8_t port, double gbps);
  // Host delay: completions of this device become visible to Poll this long after the NIC
  // stamped them (a slow or busy host).
  void SetPollDelay(const std::string& device, int64_t ns);
  // The next `count` sends posted on the device complete with `status` and put their QP in ERR.
  void FailNextSends(const std::string& device, int count, WcStatus status);
  // The same for RDMA writes on RC QPs only (UD sends go on).
  void FailNextRcWrites(const std::string& device, int count, WcStatus status);
  // Changes the port state and raises PORT_ACTIVE or PORT_ERR on every open context.
  void SetPortState(const std::string& device, uint8_t port, PortState state);
  // Raises DEVICE_FATAL; every later call on the device fails with Unavailable.
  void RemoveDevice(const std::string& device);
  // Replaces a port's GID table and raises GID_CHANGE.
  void SetGids(const std::string& device, uint8_t port, std::vector<GidEntry> gids);

  FakeFabricStats stats() const;
  // The fake's work in place of a NIC done so far on the thread with this tid (gettid).
  FakeHwCost HwCostOfThread(int tid) const;
  // Packets in flight and completions not yet visible.
  size_t pending() const;

  struct State;  // implementation detail, shared with the fake objects

 private:
  std::shared_ptr<State> state_;
};

}  // namespace fw::rdma
