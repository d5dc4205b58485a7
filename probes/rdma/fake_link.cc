// The fake loopback link's datagram: big-endian fields, then the payload.
#include "probes/rdma/fake_link.h"

#include <cstring>

namespace fw::rdma {

namespace {

constexpr uint32_t kMagic = 0x46574c32;  // "FWL2"

template <typename T>
void Put(std::vector<uint8_t>& out, T v) {
  for (int i = static_cast<int>(sizeof(T)) - 1; i >= 0; --i) {
    out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
  }
}

template <typename T>
T Get(const uint8_t*& p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v = (v << 8) | *p++;
  return static_cast<T>(v);
}

}  // namespace

std::string_view LinkDropName(LinkDrop d) {
  switch (d) {
    case LinkDrop::kTruncated:
      return "truncated";
    case LinkDrop::kBadMagic:
      return "bad_magic";
    case LinkDrop::kBadLength:
      return "bad_length";
    case LinkDrop::kBadField:
      return "bad_field";
    case LinkDrop::kCount:
      break;
  }
  return "unknown";
}

void EncodeLinkDatagram(const LinkDatagram& d, std::vector<uint8_t>& out) {
  out.clear();
  out.reserve(kLinkHeaderBytes + d.payload.size());
  Put<uint32_t>(out, kMagic);
  Put<uint8_t>(out, static_cast<uint8_t>(d.kind));
  Put<uint16_t>(out, d.dlid);
  Put<uint16_t>(out, d.slid);
  Put<uint32_t>(out, d.dst_qpn);
  Put<uint32_t>(out, d.src_qpn);
  Put<uint32_t>(out, d.qkey);
  Put<int64_t>(out, d.arrive_at_ns);
  Put<uint32_t>(out, d.flow_label);
  Put<uint8_t>(out, d.traffic_class);
  Put<uint8_t>(out, d.grh ? 1 : 0);
  out.insert(out.end(), d.sgid.raw.begin(), d.sgid.raw.end());
  out.insert(out.end(), d.dgid.raw.begin(), d.dgid.raw.end());
  Put<uint64_t>(out, d.token);
  Put<uint64_t>(out, d.remote_addr);
  Put<uint32_t>(out, d.rkey);
  Put<uint32_t>(out, d.length);
  Put<uint8_t>(out, d.status);
  Put<uint16_t>(out, static_cast<uint16_t>(d.payload.size()));
  out.insert(out.end(), d.payload.begin(), d.payload.end());
}

bool ParseLinkDatagram(const uint8_t* data, size_t size, LinkDatagram& out, LinkDrop& why) {
  if (size < kLinkHeaderBytes) {
    why = LinkDrop::kTruncated;
    return false;
  }
  const uint8_t* p = data;
  if (Get<uint32_t>(p) != kMagic) {
    why = LinkDrop::kBadMagic;
    return false;
  }
  const uint8_t kind = Get<uint8_t>(p);
  out.dlid = Get<uint16_t>(p);
  out.slid = Get<uint16_t>(p);
  out.dst_qpn = Get<uint32_t>(p);
  out.src_qpn = Get<uint32_t>(p);
  out.qkey = Get<uint32_t>(p);
  out.arrive_at_ns = Get<int64_t>(p);
  out.flow_label = Get<uint32_t>(p);
  out.traffic_class = Get<uint8_t>(p);
  const uint8_t grh = Get<uint8_t>(p);
  std::memcpy(out.sgid.raw.data(), p, 16);
  p += 16;
  std::memcpy(out.dgid.raw.data(), p, 16);
  p += 16;
  out.token = Get<uint64_t>(p);
  out.remote_addr = Get<uint64_t>(p);
  out.rkey = Get<uint32_t>(p);
  out.length = Get<uint32_t>(p);
  out.status = Get<uint8_t>(p);
  const uint16_t len = Get<uint16_t>(p);
  if (len > kLinkMaxPayload || size != kLinkHeaderBytes + len) {
    why = LinkDrop::kBadLength;
    return false;
  }
  if (out.dlid == 0 || out.dst_qpn >> 24 || out.src_qpn >> 24 || out.flow_label >> 20 || grh > 1) {
    why = LinkDrop::kBadField;
    return false;
  }
  const bool rc_fields =
      out.token != 0 || out.remote_addr != 0 || out.rkey != 0 || out.length != 0 || out.status != 0;
  const bool kind_ok =
      (kind == static_cast<uint8_t>(LinkKind::kUd) && !rc_fields) ||
      (kind == static_cast<uint8_t>(LinkKind::kRcWrite) && len == 0 && out.status == 0) ||
      (kind == static_cast<uint8_t>(LinkKind::kRcAck) && len == 0 && out.status < kWcStatusCount);
  if (!kind_ok) {
    why = LinkDrop::kBadField;
    return false;
  }
  out.kind = static_cast<LinkKind>(kind);
  out.grh = grh == 1;
  out.payload.assign(p, p + len);
  return true;
}

}  // namespace fw::rdma
