// UD probe messages: writer and strict parser.
#include "probes/rdma/ud_packet.h"

#include <cstring>

namespace fw::rdma {
namespace {

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = v << 8 | p[i];
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}

constexpr uint16_t kFlagTurnaroundBusy = 1;

// A turnaround above 10 s is not a measurement (the prober gave up long before).
constexpr int64_t kMaxTurnaroundNs = 10'000'000'000;

}  // namespace

std::string_view TsSourceName(TsSource s) {
  switch (s) {
    case TsSource::kNicWallclock:
      return "nic_wallclock";
    case TsSource::kNicRaw:
      return "nic_raw";
    case TsSource::kSoftware:
      return "software";
  }
  return "?";
}

std::string_view UdDropName(UdDrop d) {
  switch (d) {
    case UdDrop::kTruncated:
      return "truncated";
    case UdDrop::kBadMagic:
      return "bad_magic";
    case UdDrop::kBadVersion:
      return "bad_version";
    case UdDrop::kBadType:
      return "bad_type";
    case UdDrop::kBadFlags:
      return "bad_flags";
    case UdDrop::kBadField:
      return "bad_field";
    case UdDrop::kCount:
      break;
  }
  return "?";
}

void WriteUdMessage(const UdMessage& m, uint8_t* out) {
  std::memset(out, 0, kUdMessageBytes);
  Put32(out, kUdMagic);
  out[4] = 1;
  out[5] = static_cast<uint8_t>(m.type);
  Put64(out + 8, m.seq);
  Put32(out + 16, m.flow);
  Put32(out + 20, m.src_qpn);
  Put16(out + 24, m.src_lid);
  out[26] = static_cast<uint8_t>(m.ts_source);
  Put32(out + 28, m.src_qkey);
  std::memcpy(out + 32, m.src_gid.raw.data(), 16);
  Put64(out + 48, static_cast<uint64_t>(m.turnaround_ns));
  if (m.type == UdType::kReport && m.turnaround_busy) Put16(out + 6, kFlagTurnaroundBusy);
}

bool ParseUdMessage(const uint8_t* d, size_t len, UdMessage& m, UdDrop& why) {
  if (len < kUdMessageBytes) return why = UdDrop::kTruncated, false;
  if (Get32(d) != kUdMagic) return why = UdDrop::kBadMagic, false;
  if (d[4] != 1) return why = UdDrop::kBadVersion, false;
  if (d[5] < 1 || d[5] > 3) return why = UdDrop::kBadType, false;
  const uint16_t flags = Get16(d + 6);
  const uint16_t allowed = d[5] == static_cast<uint8_t>(UdType::kReport) ? kFlagTurnaroundBusy : 0;
  if ((flags & ~allowed) != 0) return why = UdDrop::kBadFlags, false;
  if (d[27] != 0 || Get64(d + 56) != 0 || d[26] > 2) return why = UdDrop::kBadField, false;
  m.type = static_cast<UdType>(d[5]);
  m.seq = Get64(d + 8);
  m.flow = Get32(d + 16);
  m.src_qpn = Get32(d + 20) & 0xffffff;
  m.src_lid = Get16(d + 24);
  m.ts_source = static_cast<TsSource>(d[26]);
  m.src_qkey = Get32(d + 28);
  std::memcpy(m.src_gid.raw.data(), d + 32, 16);
  m.turnaround_ns = static_cast<int64_t>(Get64(d + 48));
  m.turnaround_busy = (flags & kFlagTurnaroundBusy) != 0;
  if (m.type == UdType::kReport && (m.turnaround_ns < 0 || m.turnaround_ns > kMaxTurnaroundNs)) {
    return why = UdDrop::kBadField, false;
  }
  if (m.type != UdType::kReport && m.turnaround_ns != 0) return why = UdDrop::kBadField, false;
  return true;
}

}  // namespace fw::rdma
