// Probe wire format (version 1): a fixed 32-byte big-endian header, an optional truncated
// HMAC-SHA256 over that header, then padding. Shared by the UDP echo, the TCP echo and bulk probes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/status.h"
#include "probes/net/sha256.h"

namespace fw::net {

//  offset size field
//   0     4   magic 0x46575042 ("FWPB")
//   4     1   version (1)
//   5     1   type (PacketType)
//   6     2   flags (kFlagAuth; any other bit set is rejected)
//   8     4   flow id (opaque to the responder, echoed)
//  12     4   payload length: bytes after the header and MAC
//  16     8   sequence number (echoed)
//  24     8   send timestamp, CLOCK_MONOTONIC ns of the prober (echoed untouched)
//  32    16   HMAC-SHA256(key, header bytes 0..31) truncated to 128 bits, iff kFlagAuth
inline constexpr uint32_t kProbeMagic = 0x46575042;
inline constexpr uint8_t kProbeVersion = 1;
inline constexpr size_t kHeaderSize = 32;
inline constexpr size_t kMacSize = 16;
inline constexpr uint16_t kFlagAuth = 0x0001;
// Largest echo payload: a jumbo frame less IP/UDP headers. Bigger echo requests are malformed.
inline constexpr uint32_t kMaxEchoPayload = 9000;
// Largest bulk (bandwidth) request body a responder accepts.
inline constexpr uint32_t kMaxBulkPayload = 256u << 20;

enum class PacketType : uint8_t {
  kEchoRequest = 1,  // UDP or TCP: answered by an echo reply of the same size
  kEchoReply = 2,
  kBulkRequest = 3,  // TCP only: payload is sunk, then answered by a header-only ack
  kBulkAck = 4,
};

struct ProbeHeader {
  PacketType type = PacketType::kEchoRequest;
  uint16_t flags = 0;
  uint32_t flow_id = 0;
  uint32_t payload_len = 0;
  uint64_t seq = 0;
  int64_t send_ts_ns = 0;

  // Header plus MAC, as it is (or will be) on the wire.
  size_t HeaderLength() const { return kHeaderSize + ((flags & kFlagAuth) ? kMacSize : 0); }
};

// Why a packet was dropped. Each cause has its own counter wherever packets are parsed.
enum class DropReason : uint8_t {
  kNone = 0,
  kTruncated,  // shorter than the header (+ MAC)
  kBadMagic,
  kBadVersion,
  kBadType,      // unknown type, or a type not valid on this transport
  kBadFlags,     // an unknown flag bit
  kBadLength,    // payload length over the limit or not matching the datagram size
  kMissingAuth,  // a key is configured but the packet carries no MAC
  kBadAuth,      // MAC mismatch
  kCount,
};
inline constexpr size_t kDropReasonCount = static_cast<size_t>(DropReason::kCount);

// "truncated", "bad_magic", ...: stable names, used as metric label values.
std::string_view DropReasonName(DropReason reason);

// Parses and validates a header (and MAC) at the start of `bytes`; trailing bytes are not checked,
// which suits a TCP stream. With `key`, the MAC must be present and correct; without, a present MAC
// is skipped unverified. Never reads past `bytes`. Allocation-free: the hot-path entry point.
DropReason ParseHeader(std::span<const uint8_t> bytes, const HmacSha256* key, ProbeHeader* out);

// As ParseHeader, for one whole UDP datagram: only echo types are valid, and the payload length
// must match the datagram size exactly.
DropReason ParseDatagram(std::span<const uint8_t> bytes, const HmacSha256* key, ProbeHeader* out);

// ParseDatagram with a message a person can act on, e.g. for tools and tests.
Status ParseProbe(std::span<const uint8_t> bytes, const HmacSha256* key, ProbeHeader* out);

// Writes the header (setting kFlagAuth and the MAC when `key` is given, clearing it otherwise) into
// `out`. Returns the header length, or 0 when `out` is too small. The payload is the caller's.
size_t WriteHeader(const ProbeHeader& header, const HmacSha256* key, std::span<uint8_t> out);

// Turns a parsed request that sits in `packet` into its reply in place: type -> `reply_type`,
// payload length -> `payload_len` (never more than the request's), MAC recomputed with `key` or
// dropped without one. Returns the reply's total length, which never exceeds the request's.
size_t RewriteAsReply(const ProbeHeader& request, PacketType reply_type, uint32_t payload_len,
                      const HmacSha256* key, std::span<uint8_t> packet);

}  // namespace fw::net
