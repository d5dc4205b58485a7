// What we know about each sysfs port counter: its width, whether it saturates or wraps, its unit.
//
// Widths of the PMA PortCounters come from the Linux kernel (drivers/infiniband/core/sysfs.c,
// PORT_PMA_ATTR). The InfiniBand spec makes these counters stop at all-ones (saturate) rather than
// wrap. port_{xmit,rcv}_{data,packets} are 64-bit when the HCA has PortCountersExtended (every
// mlx5), else 32-bit and saturating. hw_counters have no documented width: mlx5 "Q counters" are
// 32-bit and wrap, so an unknown counter may wrap at 2^32.
#pragma once

#include <cstdint>
#include <string_view>

namespace fw::counters {

enum class CounterGroup { kCounters, kHwCounters, kEthtool };

enum class CounterRole : uint8_t {
  kOther,
  kXmitData,  // 4-byte words
  kRcvData,   // 4-byte words
  kXmitPackets,
  kRcvPackets,
  kSymbolError,
  kLinkDowned,
  kLinkErrorRecovery,
  kRcvErrors,
  kLocalLinkIntegrityErrors,
  kExcessiveBufferOverrunErrors,
  kXmitDiscards,
  kXmitWait,  // ticks; see SamplerOptions::xmit_wait_tick_bytes
  kOutOfSequence,
  kPacketSeqErr,
  kLocalAckTimeoutErr,
  kCnpSent,     // np_cnp_sent
  kCnpHandled,  // rp_cnp_handled
  kEcnMarked,   // np_ecn_marked_roce_packets
  kCount,
};

struct CounterSpec {
  CounterRole role = CounterRole::kOther;
  // 4, 8, 16 or 32 for the saturating PMA counters; 0 when the width is not known (data and
  // packet counters, whose width depends on the HCA, and hw_counters).
  uint8_t width = 0;
  bool saturates = false;  // true: stops at 2^width - 1; false: may wrap at 2^32 (if <= 32 bits)
  bool error = false;      // an error signal (port_errors)
  double scale = 1.0;      // multiply raw values by this to get the unit (4 for data words)
  std::string_view what;   // what a new increment means, for summaries ("link drops")
};

// The spec for a counter by file name and group. Unknown names get a default spec (role kOther,
// width unknown, may wrap).
CounterSpec SpecFor(CounterGroup group, std::string_view name);

// The largest value a counter of `width` bits can hold (width 1..64).
constexpr uint64_t MaxForWidth(unsigned width) {
  return width >= 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
}

}  // namespace fw::counters
