// Probe packet encoding and the strict parser.
#include "probes/net/probe_packet.h"

#include <cstring>
#include <string>

namespace fw::net {
namespace {

uint16_t Load16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
uint32_t Load32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}
uint64_t Load64(const uint8_t* p) { return (uint64_t{Load32(p)} << 32) | Load32(p + 4); }
void Store16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void Store32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}
void Store64(uint8_t* p, uint64_t v) {
  Store32(p, static_cast<uint32_t>(v >> 32));
  Store32(p + 4, static_cast<uint32_t>(v));
}

void WriteMac(const HmacSha256& key, uint8_t* header) {
  Sha256Digest mac = key.Mac(std::span<const uint8_t>(header, kHeaderSize));
  std::memcpy(header + kHeaderSize, mac.data(), kMacSize);
}

bool IsKnownType(uint8_t t) { return t >= 1 && t <= 4; }

}  // namespace

std::string_view DropReasonName(DropReason reason) {
  switch (reason) {
    case DropReason::kNone:
      return "none";
    case DropReason::kTruncated:
      return "truncated";
    case DropReason::kBadMagic:
      return "bad_magic";
    case DropReason::kBadVersion:
      return "bad_version";
    case DropReason::kBadType:
      return "bad_type";
    case DropReason::kBadFlags:
      return "bad_flags";
    case DropReason::kBadLength:
      return "bad_length";
    case DropReason::kMissingAuth:
      return "missing_auth";
    case DropReason::kBadAuth:
      return "bad_auth";
    case DropReason::kCount:
      break;
  }
  return "unknown";
}

DropReason ParseHeader(std::span<const uint8_t> bytes, const HmacSha256* key, ProbeHeader* out) {
  if (bytes.size() < kHeaderSize) return DropReason::kTruncated;
  const uint8_t* p = bytes.data();
  if (Load32(p) != kProbeMagic) return DropReason::kBadMagic;
  if (p[4] != kProbeVersion) return DropReason::kBadVersion;
  if (!IsKnownType(p[5])) return DropReason::kBadType;
  ProbeHeader h;
  h.type = static_cast<PacketType>(p[5]);
  h.flags = Load16(p + 6);
  if ((h.flags & ~kFlagAuth) != 0) return DropReason::kBadFlags;
  h.flow_id = Load32(p + 8);
  h.payload_len = Load32(p + 12);
  h.seq = Load64(p + 16);
  h.send_ts_ns = static_cast<int64_t>(Load64(p + 24));
  const bool bulk = h.type == PacketType::kBulkRequest;
  if (h.payload_len > (bulk ? kMaxBulkPayload : kMaxEchoPayload)) return DropReason::kBadLength;
  if (h.type == PacketType::kBulkAck && h.payload_len != 0) return DropReason::kBadLength;
  const bool has_mac = (h.flags & kFlagAuth) != 0;
  if (has_mac && bytes.size() < kHeaderSize + kMacSize) return DropReason::kTruncated;
  if (key != nullptr) {
    if (!has_mac) return DropReason::kMissingAuth;
    Sha256Digest want = key->Mac(bytes.first(kHeaderSize));
    if (!ConstantTimeEqual(std::span(want).first(kMacSize), bytes.subspan(kHeaderSize, kMacSize))) {
      return DropReason::kBadAuth;
    }
  }
  *out = h;
  return DropReason::kNone;
}

DropReason ParseDatagram(std::span<const uint8_t> bytes, const HmacSha256* key, ProbeHeader* out) {
  ProbeHeader h;
  DropReason r = ParseHeader(bytes, key, &h);
  if (r != DropReason::kNone) return r;
  if (h.type != PacketType::kEchoRequest && h.type != PacketType::kEchoReply) {
    return DropReason::kBadType;
  }
  if (bytes.size() != h.HeaderLength() + h.payload_len) return DropReason::kBadLength;
  *out = h;
  return DropReason::kNone;
}

Status ParseProbe(std::span<const uint8_t> bytes, const HmacSha256* key, ProbeHeader* out) {
  DropReason r = ParseDatagram(bytes, key, out);
  if (r == DropReason::kNone) return Status::Ok();
  std::string msg = "probe packet of " + std::to_string(bytes.size()) + " bytes dropped: ";
  msg += DropReasonName(r);
  switch (r) {
    case DropReason::kTruncated:
      msg += " (needs at least " + std::to_string(kHeaderSize) + " header bytes, +" +
             std::to_string(kMacSize) + " with auth)";
      break;
    case DropReason::kBadVersion:
      msg += " (this build speaks version " + std::to_string(kProbeVersion) + ")";
      break;
    case DropReason::kMissingAuth:
    case DropReason::kBadAuth:
      msg += " (check that prober and responder share the same probe key)";
      break;
    default:
      break;
  }
  return Status::InvalidArgument(std::move(msg));
}

size_t WriteHeader(const ProbeHeader& header, const HmacSha256* key, std::span<uint8_t> out) {
  ProbeHeader h = header;
  h.flags = key ? (h.flags | kFlagAuth) : (h.flags & ~kFlagAuth);
  const size_t len = h.HeaderLength();
  if (out.size() < len) return 0;
  uint8_t* p = out.data();
  Store32(p, kProbeMagic);
  p[4] = kProbeVersion;
  p[5] = static_cast<uint8_t>(h.type);
  Store16(p + 6, h.flags);
  Store32(p + 8, h.flow_id);
  Store32(p + 12, h.payload_len);
  Store64(p + 16, h.seq);
  Store64(p + 24, static_cast<uint64_t>(h.send_ts_ns));
  if (key) WriteMac(*key, p);
  return len;
}

size_t RewriteAsReply(const ProbeHeader& request, PacketType reply_type, uint32_t payload_len,
                      const HmacSha256* key, std::span<uint8_t> packet) {
  const size_t request_len = request.HeaderLength() + request.payload_len;
  ProbeHeader reply = request;
  reply.type = reply_type;
  reply.payload_len = std::min(payload_len, request.payload_len);
  // The MAC is kept only with a key, so a reply's header is never longer than the request's;
  // a keyless responder answering an authenticated request moves the payload down over the MAC.
  reply.flags = key ? (request.flags | kFlagAuth) : (request.flags & ~kFlagAuth);
  if (key && !(request.flags & kFlagAuth)) return 0;  // unauthenticated requests get no reply
  const size_t reply_len = reply.HeaderLength() + reply.payload_len;
  if (reply_len > request_len || packet.size() < request_len) return 0;
  if (reply.HeaderLength() < request.HeaderLength()) {
    std::memmove(packet.data() + reply.HeaderLength(), packet.data() + request.HeaderLength(),
                 reply.payload_len);
  }
  WriteHeader(reply, key, packet);
  return reply_len;
}

}  // namespace fw::net
