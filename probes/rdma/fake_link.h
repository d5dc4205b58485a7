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

struct LinkDatagram {
  uint16_t dlid = 0;  // the destination port's LID (the link routes by LID: InfiniBand only)
  uint16_t slid = 0;
  uint32_t dst_qpn = 0, src_qpn = 0;  // 24 bits
  uint32_t qkey = 0;
  int64_t arrive_at_ns = 0;  // CLOCK_MONOTONIC, which every process on the host shares
  uint32_t flow_label = 0;   // 20 bits
  uint8_t traffic_class = 0;
  bool grh = false;
  Gid sgid, dgid;
  std::vector<uint8_t> payload;  // at most kLinkMaxPayload
};

inline constexpr size_t kLinkHeaderBytes = 68;
inline constexpr size_t kLinkMaxPayload = 4096;

enum class LinkDrop : uint8_t { kTruncated, kBadMagic, kBadLength, kBadField, kCount };
std::string_view LinkDropName(LinkDrop d);

void EncodeLinkDatagram(const LinkDatagram& d, std::vector<uint8_t>& out);
// Strict: the magic, the exact length, 24-bit QPNs, a 20-bit flow label, a GRH flag of 0 or 1.
bool ParseLinkDatagram(const uint8_t* data, size_t size, LinkDatagram& out, LinkDrop& why);

}  // namespace fw::rdma
