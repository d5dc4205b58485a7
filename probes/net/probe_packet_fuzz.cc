// libFuzzer target: the probe parser must never crash or read out of bounds, with or without a
// key, and anything it accepts must re-encode to the same header bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "probes/net/probe_packet.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fw::net::HmacSha256 key("fuzz-key");
  std::span<const uint8_t> bytes(data, size);
  for (const fw::net::HmacSha256* k : {static_cast<const fw::net::HmacSha256*>(nullptr), &key}) {
    fw::net::ProbeHeader h;
    fw::net::ParseHeader(bytes, k, &h);
    if (fw::net::ParseDatagram(bytes, k, &h) != fw::net::DropReason::kNone) continue;
    if (size != h.HeaderLength() + h.payload_len) abort();
    // Accepted: re-encoding gives back the same header (and MAC, when verified with the key).
    std::vector<uint8_t> again(fw::net::kHeaderSize + fw::net::kMacSize);
    size_t n = fw::net::WriteHeader(h, k, again);
    if (k && (n != h.HeaderLength() || std::memcmp(again.data(), data, n) != 0)) abort();
    // Without a key the flags word loses kFlagAuth; every other header byte must round-trip.
    if (!k && (std::memcmp(again.data(), data, 6) != 0 ||
               std::memcmp(again.data() + 8, data + 8, fw::net::kHeaderSize - 8) != 0)) {
      abort();
    }
    // And the reply rewrite never grows the packet.
    std::vector<uint8_t> copy(data, data + size);
    size_t reply =
        fw::net::RewriteAsReply(h, fw::net::PacketType::kEchoReply, h.payload_len, k, copy);
    if (reply > size) abort();
  }
  return 0;
}
