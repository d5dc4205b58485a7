// Per-flow path tracing (Paris-traceroute style): TTL-limited UDP probes that keep a planned flow's
// 5-tuple, the ICMP answers of the switches on the way, and which flows to trace within a budget.
//
// Wire choices (IPv4):
// - A trace probe is a UDP datagram from the flow's own source port to the peer's echo port, so
//   the fabric's 5-tuple hash gives it the flow's path. Its TTL goes 1, 2, ... The hop it was
//   sent for is carried in the UDP length (kTracePayloadBase + ttl bytes of payload): a length is
//   no part of the ECMP hash, and a switch's ICMP error quotes the UDP header, length included.
// - The payload starts with kTraceMagic, which is no probe header, so an echo responder that the
//   probe reaches drops it as malformed instead of answering.
// - Answers are ICMP time exceeded (type 11) from the switches, read from a raw ICMP socket whose
//   datagrams start with the IPv4 header; ParseIcmpAnswer reads one such datagram.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace fw::net {

inline constexpr uint8_t kTraceMaxTtl = 16;
inline constexpr size_t kTracePayloadBase = 8;       // magic + padding before the ttl bytes
inline constexpr uint32_t kTraceMagic = 0x46575452;  // "FWTR"

// Why an ICMP datagram was not taken as a trace answer. Counted per cause by the tracer.
enum class TraceDrop : uint8_t {
  kNone = 0,
  kTruncated,      // shorter than the headers it claims
  kNotIpv4,        // outer or quoted header is not IPv4, or its IHL is invalid
  kNotIcmp,        // outer protocol is not ICMP
  kOtherType,      // an ICMP type we do not trace with (echo, redirect, ...)
  kNotUdp,         // the quoted datagram is not UDP
  kNotTraceProbe,  // the quoted UDP length is not one a trace probe uses
  kCount,
};
inline constexpr size_t kTraceDropCount = static_cast<size_t>(TraceDrop::kCount);
const char* TraceDropName(TraceDrop d);

// One answer to a trace probe.
struct IcmpAnswer {
  uint32_t from = 0;  // IPv4 address that answered, host byte order
  uint8_t type = 0;   // 11 time exceeded, 3 destination unreachable
  uint8_t code = 0;
  uint32_t probe_dst = 0;  // the quoted probe: destination address (host order), ports, ttl
  uint16_t probe_src_port = 0;
  uint16_t probe_dst_port = 0;
  uint8_t probe_ttl = 0;  // the ttl the probe was sent with (from its UDP length)
};

// Parses one datagram read from a raw IPPROTO_ICMP socket (IPv4 header first). Bounded: reads
// only inside `packet`, never trusts a length field beyond it.
TraceDrop ParseIcmpAnswer(std::span<const uint8_t> packet, IcmpAnswer* out);

// Writes the UDP header and payload of the trace probe for hop `ttl` (1..kTraceMaxTtl) into
// `out`; returns the bytes written (0 when `out` is too small or ttl is out of range). The UDP
// checksum is left 0 (allowed for IPv4).
size_t WriteTraceProbe(uint16_t src_port, uint16_t dst_port, uint8_t ttl, std::span<uint8_t> out);

// "a.b.c.d" of a host-order IPv4 address.
std::string Ipv4String(uint32_t host_order);

// A flow as the tracer knows it: the peer's node name and address and the flow's source port.
struct TraceFlow {
  std::string peer;
  uint32_t peer_address = 0;  // IPv4, host order
  uint16_t dst_port = 0;
  uint16_t src_port = 0;
  uint32_t flow_id = 0;  // the planned flow's id as results carry it

  bool operator==(const TraceFlow& o) const {
    return peer_address == o.peer_address && src_port == o.src_port && dst_port == o.dst_port;
  }
};
struct TraceFlowHash {
  size_t operator()(const TraceFlow& f) const {
    return (static_cast<size_t>(f.peer_address) << 32) ^ (static_cast<size_t>(f.src_port) << 16) ^
           f.dst_port;
  }
};

// A finished trace: hops[k] answered for ttl k+1 ("" when that hop stayed silent). Trailing
// silent hops are dropped: the probe reached the peer (whose responder does not answer) or the
// rest of the path is silent.
struct TracedPath {
  TraceFlow flow;
  std::vector<std::string> hops;
  std::vector<int64_t> hop_rtt_ns;  // beside hops: send to answer, 0 when silent or not measured
  bool reached_peer = false;  // the peer itself answered (port unreachable) at the last hop
  int64_t finished_ns = 0;
};

// Collects the answers of one trace and turns them into a TracedPath. Answers for another flow,
// a ttl that was not sent, or a second answer for the same ttl are ignored (and reported false).
class HopAssembler {
 public:
  HopAssembler(TraceFlow flow, uint8_t max_ttl);
  const TraceFlow& flow() const { return flow_; }
  uint8_t max_ttl() const { return max_ttl_; }
  // `rtt_ns`: the probe's send to this answer (0: not measured).
  bool Add(const IcmpAnswer& a, int64_t rtt_ns = 0);
  // Done early when the peer answered; otherwise the tracer decides by time.
  bool ReachedPeer() const { return reached_peer_; }
  TracedPath Finish(int64_t now_ns) const;

 private:
  TraceFlow flow_;
  uint8_t max_ttl_;
  std::array<uint32_t, kTraceMaxTtl> hop_{};  // 0: no answer
  std::array<int64_t, kTraceMaxTtl> rtt_{};
  bool reached_peer_ = false;
  uint8_t peer_ttl_ = 0;
};

// Which flow to trace next, within a budget. Trace packets may be at most `fraction` of the probe
// packets sent (plus one trace's worth of credit to start). Order: flows whose results turned bad
// (suspects), then new flows, then flows whose results changed otherwise; each flow is queued
// once at a time. Not thread-safe (the tracer's thread owns it).
class TraceScheduler {
 public:
  TraceScheduler(double fraction, uint8_t max_ttl);
  // A new plan: flows not traced before are queued; flows gone from the plan are forgotten.
  void SetFlows(const std::vector<TraceFlow>& flows);
  // A planned flow's results changed (loss appeared or went away, RTT moved): trace it again.
  // `suspect` puts it ahead of everything else. Unknown flows are ignored.
  void Changed(const TraceFlow& flow, bool suspect);
  // Probe packets sent since the last call (earns budget).
  void AddProbePackets(uint64_t n);
  // The next flow to trace, spending max_ttl packets of budget; nullopt when none is queued or the
  // budget does not allow one yet.
  std::optional<TraceFlow> Next();

  size_t queued() const { return suspects_.size() + fresh_.size() + changed_.size(); }
  // Probe packets still to be added before Next() can start a trace (0: it can now; UINT64_MAX:
  // never, with a zero fraction).
  uint64_t PacketsUntilNext() const;
  double credit() const { return credit_; }
  uint64_t deferred() const { return deferred_; }  // Next() calls refused for budget

 private:
  bool Queue(std::deque<TraceFlow>& q, const TraceFlow& f);

  double fraction_;
  uint8_t max_ttl_;
  double credit_;
  uint64_t deferred_ = 0;
  std::unordered_set<TraceFlow, TraceFlowHash> planned_;
  std::unordered_set<TraceFlow, TraceFlowHash> queued_;
  std::deque<TraceFlow> suspects_, fresh_, changed_;
};

}  // namespace fw::net
