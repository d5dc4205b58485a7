// Trace probe encoding, the ICMP answer parser, hop assembly and the trace budget.
#include "probes/net/path_trace.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace fw::net {
namespace {

constexpr uint8_t kIpProtoIcmp = 1;
constexpr uint8_t kIpProtoUdp = 17;
constexpr uint8_t kIcmpTimeExceeded = 11;
constexpr uint8_t kIcmpUnreachable = 3;
constexpr size_t kIcmpHeader = 8;
constexpr size_t kUdpHeader = 8;

uint16_t Be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
uint32_t Be32(const uint8_t* p) {
  return (static_cast<uint32_t>(p[0]) << 24) | (static_cast<uint32_t>(p[1]) << 16) |
         (static_cast<uint32_t>(p[2]) << 8) | p[3];
}

// The IPv4 header at the front of `b`: its length, or 0 when it is not a valid one.
size_t Ipv4HeaderLength(std::span<const uint8_t> b) {
  if (b.size() < 20 || (b[0] >> 4) != 4) return 0;
  const size_t ihl = static_cast<size_t>(b[0] & 0x0f) * 4;
  if (ihl < 20) return 0;
  return ihl;
}

}  // namespace

const char* TraceDropName(TraceDrop d) {
  switch (d) {
    case TraceDrop::kNone:
      return "none";
    case TraceDrop::kTruncated:
      return "truncated";
    case TraceDrop::kNotIpv4:
      return "not_ipv4";
    case TraceDrop::kNotIcmp:
      return "not_icmp";
    case TraceDrop::kOtherType:
      return "other_type";
    case TraceDrop::kNotUdp:
      return "not_udp";
    case TraceDrop::kNotTraceProbe:
      return "not_trace_probe";
    case TraceDrop::kCount:
      break;
  }
  return "unknown";
}

TraceDrop ParseIcmpAnswer(std::span<const uint8_t> packet, IcmpAnswer* out) {
  if (packet.size() < 20) return TraceDrop::kTruncated;
  const size_t outer = Ipv4HeaderLength(packet);
  if (outer == 0) return TraceDrop::kNotIpv4;
  if (packet.size() < outer) return TraceDrop::kTruncated;
  if (packet[9] != kIpProtoIcmp) return TraceDrop::kNotIcmp;
  std::span<const uint8_t> icmp = packet.subspan(outer);
  if (icmp.size() < kIcmpHeader) return TraceDrop::kTruncated;
  const uint8_t type = icmp[0];
  if (type != kIcmpTimeExceeded && type != kIcmpUnreachable) return TraceDrop::kOtherType;
  std::span<const uint8_t> quoted = icmp.subspan(kIcmpHeader);
  if (quoted.empty()) return TraceDrop::kTruncated;
  if ((quoted[0] >> 4) != 4) return TraceDrop::kNotIpv4;
  if (quoted.size() < 20) return TraceDrop::kTruncated;
  const size_t inner = Ipv4HeaderLength(quoted);
  if (inner == 0) return TraceDrop::kNotIpv4;
  // RFC 792 quotes the header and the first 8 bytes of the datagram: the whole UDP header.
  if (quoted.size() < inner + kUdpHeader) return TraceDrop::kTruncated;
  if (quoted[9] != kIpProtoUdp) return TraceDrop::kNotUdp;
  const uint8_t* udp = quoted.data() + inner;
  const uint16_t udp_len = Be16(udp + 4);
  if (udp_len <= kUdpHeader + kTracePayloadBase ||
      udp_len > kUdpHeader + kTracePayloadBase + kTraceMaxTtl) {
    return TraceDrop::kNotTraceProbe;
  }
  IcmpAnswer a;
  a.from = Be32(packet.data() + 12);
  a.type = type;
  a.code = icmp[1];
  a.probe_dst = Be32(quoted.data() + 16);
  a.probe_src_port = Be16(udp);
  a.probe_dst_port = Be16(udp + 2);
  a.probe_ttl = static_cast<uint8_t>(udp_len - kUdpHeader - kTracePayloadBase);
  *out = a;
  return TraceDrop::kNone;
}

size_t WriteTraceProbe(uint16_t src_port, uint16_t dst_port, uint8_t ttl, std::span<uint8_t> out) {
  if (ttl == 0 || ttl > kTraceMaxTtl) return 0;
  const size_t len = kUdpHeader + kTracePayloadBase + ttl;
  if (out.size() < len) return 0;
  std::memset(out.data(), 0, len);
  out[0] = static_cast<uint8_t>(src_port >> 8);
  out[1] = static_cast<uint8_t>(src_port);
  out[2] = static_cast<uint8_t>(dst_port >> 8);
  out[3] = static_cast<uint8_t>(dst_port);
  out[4] = static_cast<uint8_t>(len >> 8);
  out[5] = static_cast<uint8_t>(len);
  // out[6..7]: checksum 0 (none), valid for UDP over IPv4.
  out[8] = static_cast<uint8_t>(kTraceMagic >> 24);
  out[9] = static_cast<uint8_t>(kTraceMagic >> 16);
  out[10] = static_cast<uint8_t>(kTraceMagic >> 8);
  out[11] = static_cast<uint8_t>(kTraceMagic);
  return len;
}

std::string Ipv4String(uint32_t a) {
  return std::to_string(a >> 24) + "." + std::to_string((a >> 16) & 0xff) + "." +
         std::to_string((a >> 8) & 0xff) + "." + std::to_string(a & 0xff);
}

HopAssembler::HopAssembler(TraceFlow flow, uint8_t max_ttl)
    : flow_(std::move(flow)), max_ttl_(std::clamp<uint8_t>(max_ttl, 1, kTraceMaxTtl)) {}

bool HopAssembler::Add(const IcmpAnswer& a, int64_t rtt_ns) {
  if (a.probe_dst != flow_.peer_address || a.probe_src_port != flow_.src_port ||
      a.probe_dst_port != flow_.dst_port) {
    return false;
  }
  if (a.probe_ttl == 0 || a.probe_ttl > max_ttl_) return false;
  uint32_t& slot = hop_[a.probe_ttl - 1];
  if (slot != 0 || a.from == 0) return false;
  slot = a.from;
  rtt_[a.probe_ttl - 1] = std::max<int64_t>(0, rtt_ns);
  if (a.from == flow_.peer_address) {
    // The peer itself: the probe got there (port unreachable, or a host that forwards nothing).
    if (!reached_peer_ || a.probe_ttl < peer_ttl_) peer_ttl_ = a.probe_ttl;
    reached_peer_ = true;
  }
  return true;
}

TracedPath HopAssembler::Finish(int64_t now_ns) const {
  TracedPath p;
  p.flow = flow_;
  p.finished_ns = now_ns;
  p.reached_peer = reached_peer_;
  // Hops up to (not including) the peer, or up to the last ttl that answered.
  size_t end = reached_peer_ ? static_cast<size_t>(peer_ttl_ - 1) : 0;
  if (!reached_peer_) {
    for (size_t i = 0; i < max_ttl_; ++i) {
      if (hop_[i] != 0) end = i + 1;
    }
  }
  p.hops.reserve(end);
  p.hop_rtt_ns.reserve(end);
  for (size_t i = 0; i < end; ++i) {
    p.hops.push_back(hop_[i] ? Ipv4String(hop_[i]) : std::string());
    p.hop_rtt_ns.push_back(hop_[i] ? rtt_[i] : 0);
  }
  return p;
}

TraceScheduler::TraceScheduler(double fraction, uint8_t max_ttl)
    : fraction_(std::max(0.0, fraction)),
      max_ttl_(std::clamp<uint8_t>(max_ttl, 1, kTraceMaxTtl)),
      credit_(max_ttl_) {}

bool TraceScheduler::Queue(std::deque<TraceFlow>& q, const TraceFlow& f) {
  if (!queued_.insert(f).second) return false;
  q.push_back(f);
  return true;
}

void TraceScheduler::SetFlows(const std::vector<TraceFlow>& flows) {
  std::unordered_set<TraceFlow, TraceFlowHash> next(flows.begin(), flows.end());
  auto gone = [&](const TraceFlow& f) { return !next.contains(f); };
  for (auto* q : {&suspects_, &fresh_, &changed_}) {
    for (const TraceFlow& f : *q) {
      if (gone(f)) queued_.erase(f);
    }
    q->erase(std::remove_if(q->begin(), q->end(), gone), q->end());
  }
  for (const TraceFlow& f : flows) {
    if (!planned_.contains(f)) Queue(fresh_, f);
  }
  planned_ = std::move(next);
}

void TraceScheduler::Changed(const TraceFlow& flow, bool suspect) {
  auto it = planned_.find(flow);
  if (it == planned_.end()) return;
  if (suspect && queued_.contains(flow)) {
    // Move it to the front of the line: already queued as fresh or changed.
    for (auto* q : {&fresh_, &changed_}) {
      q->erase(std::remove(q->begin(), q->end(), flow), q->end());
    }
    if (std::find(suspects_.begin(), suspects_.end(), flow) == suspects_.end()) {
      suspects_.push_back(*it);
    }
    return;
  }
  Queue(suspect ? suspects_ : changed_, *it);
}

void TraceScheduler::AddProbePackets(uint64_t n) {
  // Unused credit is capped so that a long quiet spell cannot turn into a burst of traces.
  const double cap = std::max<double>(max_ttl_, 4.0 * max_ttl_);
  credit_ = std::min(cap, credit_ + fraction_ * static_cast<double>(n));
}

uint64_t TraceScheduler::PacketsUntilNext() const {
  if (credit_ >= max_ttl_) return 0;
  if (fraction_ <= 0) return UINT64_MAX;
  return static_cast<uint64_t>(std::ceil((max_ttl_ - credit_) / fraction_));
}

std::optional<TraceFlow> TraceScheduler::Next() {
  for (auto* q : {&suspects_, &fresh_, &changed_}) {
    if (q->empty()) continue;
    if (credit_ < max_ttl_) {
      ++deferred_;
      return std::nullopt;
    }
    credit_ -= max_ttl_;
    TraceFlow f = std::move(q->front());
    q->pop_front();
    queued_.erase(f);
    return f;
  }
  return std::nullopt;
}

}  // namespace fw::net
