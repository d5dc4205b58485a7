// UDP latency and loss prober: probes every flow of a plan on a dedicated thread, with batched
// sendmmsg/recvmmsg, kernel receive timestamps and preallocated rings (no allocation per probe).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "probes/net/busy_poll.h"
#include "probes/net/plan_entry.h"
#include "probes/net/probe_packet.h"
#include "probes/net/probe_result.h"
#include "probes/net/token_bucket.h"

namespace fw::net {

// Limits of a plan the prober accepts (SetPlan skips or refuses beyond them); the agent trims
// plans to them before applying.
inline constexpr uint32_t kUdpMaxFlowsPerPeer = 64;
inline constexpr size_t kUdpMaxTotalFlows = 65535;  // the low 16 bits of the wire flow id
inline constexpr double kUdpMaxRateHz = 10000;      // per flow
inline constexpr double kUdpMinRateHz = 1e-6;       // per flow: one probe in 11.6 days
// A probe's timeout (the plan's, or a peer's own) is in (0, kUdpMaxTimeoutNs].
inline constexpr int64_t kUdpMaxTimeoutNs = 60'000'000'000;
static_assert(kUdpMaxFlowsPerPeer <= 64, "PeerTarget::raised_flows has a bit per flow");

struct PeerTarget {
  std::string name;     // the peer's node name; copied into every ProbeResult (max 63 chars)
  std::string address;  // numeric IPv4 or IPv6
  uint16_t port = 9753;
  uint32_t flows = 1;    // distinct source ports toward this peer, to cover ECMP paths
  uint16_t src_nic = 0;  // copied into every result of this peer (ProbeResult::src_nic)
  uint16_t dst_nic = 0;
  // Probes per second of each of this peer's flows; 0: the plan's rate_hz. A rate outside
  // [kUdpMinRateHz, kUdpMaxRateHz] (negative and non-finite ones included) skips the peer
  // (PlanSkip::kRate).
  double rate_hz = 0;
  // Per-flow rates (an escalation raises only the flows that cross its suspect link). Non-zero:
  // the flows whose bit is set in raised_flows (bit j: flow j) run at rate_hz and the others at
  // unraised_rate_hz, which is checked like rate_hz (PlanSkip::kRate); bits at or past `flows`
  // mean nothing. 0: every flow at rate_hz, whatever raised_flows holds.
  uint64_t raised_flows = 0;
  double unraised_rate_hz = 0;
  // How long each probe of this peer's flows waits for its echo before it is reported lost; 0:
  // the plan's timeout_ns. Each flow expires on its own timeout, so a dense (escalated) peer can
  // report its losses quickly while the others keep a long one. A reply read after its probe was
  // reported lost is counted `late`, not answered. Outside (0, kUdpMaxTimeoutNs] (negative
  // included) skips the peer (PlanSkip::kTimeout).
  int64_t timeout_ns = 0;
};

// A probe plan as the aggregator sends it. Replace it at any time with UdpProber::SetPlan.
// Each flow runs at its own rate (its peer's, or per flow: PeerTarget::raised_flows): the flows of
// one rate share a schedule (period = 1/rate, cut into send slots on the wall clock's grid), and
// the schedules of different rates run side by side on the prober's thread, their slots that fall
// due together going out in one batch.
struct UdpProbePlan {
  std::vector<PeerTarget> peers;
  double rate_hz = 1.0;                // probes per second, per flow, of peers without a rate
  // A probe unanswered this long is lost, for the peers that set no timeout of their own;
  // (0, kUdpMaxTimeoutNs].
  int64_t timeout_ns = 1'000'000'000;
  // Non-zero: each flow's timeout follows its own round trip (ProbeTimeout: RFC 6298's srtt +
  // 4·rttvar from every echo, late ones included, doubled per loss until the next echo), at least
  // this and at most the flow's timeout above (which it keeps until its first echo). A lost probe is
  // then reported within about this floor on a fast fabric, while a queue that builds lifts the
  // timeouts of the flows through it. [0, kUdpMaxTimeoutNs]; 0: every probe waits the fixed timeout.
  int64_t timeout_floor_ns = 0;
  uint32_t payload_bytes = 0;          // padding after the header (the reply is the same size)
};

// When the prober reads its replies (UdpProberOptions::reply_reads; docs/probes.md, "Deferred
// reply reads").
enum class ReplyReads : uint8_t {
  // Every reply wakes the prober's thread and is read at once; ProbeResult::rtt_ns is the
  // user-space round trip, as an application (and sockperf) sees it.
  kImmediate,
  // Replies wake no one: they wait in the socket buffers and are read in the turns the prober
  // takes anyway (each send slot, each loss deadline, a plan, a guest), always before a probe is
  // declared lost. ProbeResult::rtt_ns is then the user-space send time to the reply's kernel
  // receive stamp, which the wait in the buffer does not lengthen, and an echo is answered if
  // that stamp is within its probe's wait (late otherwise, whenever it is read). Needs the real clock and
  // kernel_rx_timestamps (otherwise the prober reads immediately, Stats().reply_reads_deferred
  // 0); never busy-polls. A reply read without a receive stamp is answered with rtt_ns 0 (round
  // trip unknown, counted in rx_unstamped_deferred), and the prober reads immediately from then
  // on.
  kDeferred,
};

struct UdpProberOptions {
  std::optional<std::string> key;  // shared probe key: requests are signed, replies verified
  // Source port of flow j is src_port_base + j; 0 lets the kernel pick ephemeral ports.
  uint16_t src_port_base = 0;
  std::string bind_address_v4 = "0.0.0.0";
  std::string bind_address_v6 = "::";
  // Non-empty: every probe socket is also bound to this interface (SO_BINDTODEVICE), so probes
  // leave through it whatever the routing table prefers for the destination (several fabric NICs
  // on one subnet). A socket that cannot be bound fails like a bind error (PlanSkip::kSocket).
  std::string bind_device;
  // Each period is cut into this many send slots (fewer when a rate has fewer flows); the flows of
  // one rate are spread across its slots round-robin, so each wakeup sends one sendmmsg batch per
  // socket instead of one syscall per probe.
  uint32_t send_slots = 10;
  // Send slots fall on the wall clock's grid: at multiples of the slot length (period /
  // send_slots, each rate its own) of CLOCK_REALTIME, plus send_slot_phase_ns. Every prober of an
  // NTP-synced fleet with the same rate then sends at the same instants, so a responder gets all
  // its peers' probes of a slot together and answers them in one wakeup, and each prober gets its
  // replies together.
  // The cost is a microburst: every prober sends its slot's probes at once (docs/probes.md, "Send
  // slots on the wall clock's grid"). A per-node phase (e.g. a hash of the node name, within a
  // slot) spreads the fleet's bursts again. false: slots are phased from when the plan was
  // applied, each prober on its own schedule.
  bool align_send_slots = true;
  int64_t send_slot_phase_ns = 0;
  bool kernel_rx_timestamps = true;
  // Software TX timestamps (SO_TIMESTAMPING, read back from the error queue): the RTT then runs
  // from the kernel's send stamp to its receive stamp, both CLOCK_REALTIME, so batching and
  // syscall entry do not inflate it. Needs kernel_rx_timestamps.
  bool kernel_tx_timestamps = true;
  // Which round trip ProbeResult::rtt_ns holds. false (the default): the prober's own send ->
  // reply read, both CLOCK_MONOTONIC, as an application (and sockperf) sees it; busy polling
  // keeps the prober's wakeup out of it. true: the kernel-stamped round trip where there is one
  // (it reads lower: it leaves out the prober host's send and receive path). Either way
  // ProbeResult::kernel_rtt_ns carries the kernel-stamped value when stamps are on.
  bool report_kernel_rtt = false;
  // After each send slot the prober polls its sockets without sleeping (epoll with a zero
  // timeout) until every probe of the slot is answered or the window closes, so that a reply is
  // not charged a wakeup of the prober thread (tens of microseconds on a busy VM). The window
  // never runs past the next send slot. Only with the real clock (a fake one would not bound the
  // spin). `busy_poll.max_window_ns = 0` disables it.
  BusyPollOptions busy_poll;
  ReplyReads reply_reads = ReplyReads::kImmediate;
  // Deferred reads: a probe's loss deadline that the next send slot follows within this fraction
  // of the probe's wait is expired in that slot's turn instead of a wakeup of its own. Its echo is
  // judged by the kernel's receive stamp against the deadline either way (after it: late, the
  // probe lost), so the outcome is the same; only the loss is reported up to that much later.
  // At the agent's 250 ms slots and the planner's 200 ms timeout floor, 0.25 saves the prober a
  // wakeup a slot. [0, 1]; 0: every deadline wakes the prober.
  double deferred_expiry_slack = 0.25;
};

struct UdpProberStats {
  uint64_t sent = 0;
  uint64_t answered = 0;
  uint64_t lost = 0;
  uint64_t late = 0;  // a reply after its probe was declared lost
  // ...of which within the flow's fixed timeout, after a shorter round-trip timeout: reported again
  // as a late result (ProbeResult::late) that takes the loss back
  uint64_t retracted = 0;
  uint64_t duplicate = 0;
  uint64_t stray = 0;           // valid reply matching no outstanding flow (old plan, bad source)
  uint64_t budget_skipped = 0;  // probes not sent because the agent budget was spent
  uint64_t send_errors = 0;
  uint64_t rx_kernel_ts = 0;  // RTTs ending at the kernel receive timestamp
  uint64_t tx_kernel_ts = 0;  // ... of which also starting at the kernel send timestamp
  uint64_t rx_user_ts = 0;    // RTTs that fell back to the user-space receive time
  // Replies read deferred without a kernel receive stamp: answered, round trip unknown (rtt_ns 0).
  uint64_t rx_unstamped_deferred = 0;
  // Datagrams the kernel dropped on a full socket receive buffer (SO_RXQ_OVFL), every socket.
  uint64_t rx_queue_drops = 0;
  uint64_t reply_reads_deferred = 0;  // 1 while replies are read deferred (ReplyReads::kDeferred)
  uint64_t abandoned = 0;     // outstanding probes of a replaced plan (no result emitted)
  uint64_t plans_applied = 0;
  uint64_t wakeups = 0;             // prober thread loop iterations (epoll returns)
  uint64_t busy_polls = 0;          // busy-poll windows spun
  uint64_t busy_poll_ns = 0;        // time spent spinning in them
  uint64_t busy_poll_hits = 0;      // replies picked up during a window
  uint64_t busy_poll_timeouts = 0;  // windows that closed with probes of their slot unanswered
  uint64_t busy_poll_skipped = 0;   // slots not busy-polled because the spin credit was spent
  std::array<uint64_t, kDropReasonCount> dropped{};  // malformed replies by DropReason
  // Plan entries skipped by SetPlan, by PlanSkip, over every plan so far.
  std::array<uint64_t, kPlanSkipCount> plan_skipped{};
  uint64_t planned_peers = 0;  // peers of the current plan that are being probed
};

// Work that shares a prober's thread (the agent's path tracer): descriptors the
// prober's epoll set watches for it and a deadline, so that it needs no thread of its own. In every
// turn the prober reads its own replies first, then the guests' ready descriptors, then sends a
// send slot if one is due and services the guests: a guest never sits between a reply and the
// reply's receive time, and a guest's input does not wait behind a slot. Every call comes from the
// prober's thread, one at a time; a guest must not block (its descriptors are read non-blocking).
class LoopGuest {
 public:
  virtual ~LoopGuest() = default;
  // The descriptors to watch for input (level-triggered EPOLLIN), fixed while attached. An eventfd
  // among them is how other threads wake the guest.
  virtual std::vector<int> WatchedFds() const = 0;
  // `fd` is readable (or in error).
  virtual void OnReady(int fd) = 0;
  // Does what is due at `now_ns` (CLOCK_MONOTONIC) and returns when it next needs the loop, on the
  // same clock (INT64_MAX: only when one of its descriptors is ready). Called once after it is
  // attached, after every turn in which OnReady was called, and when that deadline has passed.
  virtual int64_t Service(int64_t now_ns) = 0;
};

class UdpProber {
 public:
  // Starts the prober thread with an empty plan. `results` and `budget` (nullable) are borrowed
  // and must outlive the prober. `clock` must be the real clock for kernel timestamps to be used
  // (they are compared against it); with any other clock RTTs use user-space receive times.
  static StatusOr<std::unique_ptr<UdpProber>> Start(UdpProberOptions options, const Clock& clock,
                                                    ResultQueue& results,
                                                    ProbeBudget* budget = nullptr);
  ~UdpProber();  // Stop()s.
  UdpProber(const UdpProber&) = delete;
  UdpProber& operator=(const UdpProber&) = delete;

  // Hands `plan` to the prober thread, which switches over at its next wakeup (probes outstanding
  // under the old plan are abandoned and counted). A peer the prober cannot use (PlanSkip: name,
  // address, port, flows, rate, or no socket for its family) is skipped, logged once per cause and
  // counted in Stats().plan_skipped; the other peers are probed. (Cause `timeout`: its own
  // timeout_ns out of range.) Fails, leaving the running plan
  // as it was, only when the plan as a whole is invalid (rate, timeout, payload) or the prober is
  // stopping. Thread-safe.
  Status SetPlan(UdpProbePlan plan);
  // Stops and joins the thread. Idempotent.
  void Stop();
  UdpProberStats Stats() const;
  // The local source ports in use, flow j of every peer using ports[j]. For tests and logs.
  std::vector<uint16_t> SourcePorts() const;
  // Runs `guest` (borrowed) on the prober's thread until RemoveGuest. Returns once the thread has
  // taken it; fails when the prober is stopping or a descriptor cannot be watched (nothing is
  // attached then). Thread-safe; not from a guest's own calls.
  Status AddGuest(LoopGuest* guest);
  // Returns once the thread has dropped `guest`: from then on nothing calls it. Returns at once
  // when the prober has stopped (its thread calls no one). Thread-safe; not from a guest's calls.
  void RemoveGuest(LoopGuest* guest);

 private:
  class Loop;
  UdpProber() = default;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace fw::net
