// The datagram that carries one fake UD packet between processes over loopback UDP (the fake
// fabric's loopback link, FakeFabric::EnableLoopbackLink): several agents on one host, each with
// its own fake device, probe each other through it. Test-only; never used with real verbs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "probes/rdma/verbs.h"

namespace fw::rdma {

// kUd: one UD datagram. kRcWrite: one RDMA write of `length` bytes into (rkey, remote_addr) of
// the RC QP dst_qpn; the bytes themselves do not travel (only the write's checks and timing do).
// kRcAck: the responder's answer to the write `token`, with its WcStatus, to QP dst_qpn.
enum class LinkKind : uint8_t { kUd, kRcWrite, kRcAck };

struct LinkDatagram {
  LinkKind kind = LinkKind::kUd;
  uint16_t dlid = 0;  // the destination port's LID (the link routes by LID: InfiniBand only)
  uint16_t slid = 0;
  uint32_t dst_qpn = 0, src_qpn = 0;  // 24 bits
  uint32_t qkey = 0;
  int64_t arrive_at_ns = 0;  // CLOCK_MONOTONIC, which every process on the host shares
  uint32_t flow_label = 0;   // 20 bits
  uint8_t traffic_class = 0;
  bool grh = false;
  Gid sgid, dgid;
  // RC only (zero for kUd).
  uint64_t token = 0;  // the sender's handle of the write, echoed by the ack
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;           // kRcWrite: bytes written
  uint8_t status = 0;            // kRcAck: a WcStatus
  std::vector<uint8_t> payload;  // at most kLinkMaxPayload; kUd only
};

inline constexpr size_t kLinkHeaderBytes = 94;
inline constexpr size_t kLinkMaxPayload = 4096;

enum class LinkDrop : uint8_t { kTruncated, kBadMagic, kBadLength, kBadField, kCount };
std::string_view LinkDropName(LinkDrop d);

void EncodeLinkDatagram(const LinkDatagram& d, std::vector<uint8_t>& out);
// Strict: the magic, the exact length, a known kind, 24-bit QPNs, a 20-bit flow label, a GRH flag
// of 0 or 1, RC fields zero on UD datagrams, no payload on RC ones, a known ack status.
bool ParseLinkDatagram(const uint8_t* data, size_t size, LinkDatagram& out, LinkDrop& why);

}  // namespace fw::rdma
