// The UD probe wire format (version 1): one fixed 64-byte message for a probe, its
// acknowledgement and the responder's turnaround report. Bytes from the fabric are parsed
// strictly: a bad message is dropped with a counted reason, never trusted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "probes/rdma/verbs.h"

namespace fw::rdma {

// offset size field (big-endian)
//  0  4  magic 0x46575244 ("FWRD")
//  4  1  version (1)
//  5  1  type: 1 probe, 2 ack, 3 report
//  6  2  flags: bit 0 (report only) the turnaround holds a wait on the responder's own other
//         work, not its host's delay (UdMesh::NoteBusy); every other bit must be 0
//  8  8  sequence number (the prober's; echoed)
// 16  4  flow id (the prober's; echoed)
// 20  4  sender's QPN (where an answer goes)
// 24  2  sender's LID (IB; 0 on RoCE)
// 26  1  timestamp source of the turnaround (report only; TsSource)
// 27  1  reserved (0)
// 28  4  sender's QKey
// 32 16  sender's GID (where an answer goes on RoCE)
// 48  8  responder turnaround in ns (report only; T4 - T3 on the responder's NIC clock)
// 56  8  reserved (0)
inline constexpr size_t kUdMessageBytes = 64;
inline constexpr uint32_t kUdMagic = 0x46575244;

enum class UdType : uint8_t { kProbe = 1, kAck = 2, kReport = 3 };

// Where a timestamp came from, best first (docs/rdma.md "Timestamps").
enum class TsSource : uint8_t { kNicWallclock = 0, kNicRaw = 1, kSoftware = 2 };
std::string_view TsSourceName(TsSource s);

struct UdMessage {
  UdType type = UdType::kProbe;
  uint64_t seq = 0;
  uint32_t flow = 0;
  uint32_t src_qpn = 0;
  uint16_t src_lid = 0;
  TsSource ts_source = TsSource::kSoftware;
  uint32_t src_qkey = 0;
  Gid src_gid;
  int64_t turnaround_ns = 0;
  bool turnaround_busy = false;  // report only: flags bit 0
};

enum class UdDrop : uint8_t {
  kTruncated,
  kBadMagic,
  kBadVersion,
  kBadType,
  kBadFlags,
  kBadField,  // a reserved byte set, a turnaround out of range, an unknown timestamp source
  kCount,
};
std::string_view UdDropName(UdDrop d);

void WriteUdMessage(const UdMessage& m, uint8_t* out);
// Parses `len` bytes (the payload after the GRH). Returns false and sets `why` on a bad message.
bool ParseUdMessage(const uint8_t* data, size_t len, UdMessage& out, UdDrop& why);

}  // namespace fw::rdma
