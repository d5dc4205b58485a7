// The counter table.
#include "probes/counters/counter_spec.h"

namespace fw::counters {
namespace {

struct Row {
  std::string_view name;
  CounterSpec spec;
};

// counters/ (PMA PortCounters / PortCountersExtended).
constexpr Row kCounters[] = {
    {"symbol_error", {CounterRole::kSymbolError, 16, true, true, 1, "symbol errors"}},
    {"link_error_recovery",
     {CounterRole::kLinkErrorRecovery, 8, true, true, 1, "link error recoveries"}},
    {"link_downed", {CounterRole::kLinkDowned, 8, true, true, 1, "link drops"}},
    {"port_rcv_errors", {CounterRole::kRcvErrors, 16, true, true, 1, "receive errors"}},
    {"port_rcv_remote_physical_errors",
     {CounterRole::kOther, 16, true, false, 1, "remote physical errors"}},
    {"port_rcv_switch_relay_errors", {CounterRole::kOther, 16, true, false, 1, "relay errors"}},
    {"port_xmit_discards", {CounterRole::kXmitDiscards, 16, true, true, 1, "transmit discards"}},
    {"port_xmit_constraint_errors", {CounterRole::kOther, 8, true, false, 1, "constraint errors"}},
    {"port_rcv_constraint_errors", {CounterRole::kOther, 8, true, false, 1, "constraint errors"}},
    {"local_link_integrity_errors",
     {CounterRole::kLocalLinkIntegrityErrors, 4, true, true, 1, "link integrity errors"}},
    {"excessive_buffer_overrun_errors",
     {CounterRole::kExcessiveBufferOverrunErrors, 4, true, true, 1, "buffer overruns"}},
    {"VL15_dropped", {CounterRole::kOther, 16, true, false, 1, "VL15 drops"}},
    {"port_xmit_wait", {CounterRole::kXmitWait, 32, true, false, 1, "transmit waits"}},
    {"port_xmit_data", {CounterRole::kXmitData, 0, true, false, 4, "transmitted bytes"}},
    {"port_rcv_data", {CounterRole::kRcvData, 0, true, false, 4, "received bytes"}},
    {"port_xmit_packets", {CounterRole::kXmitPackets, 0, true, false, 1, "packets"}},
    {"port_rcv_packets", {CounterRole::kRcvPackets, 0, true, false, 1, "packets"}},
    {"unicast_xmit_packets", {CounterRole::kOther, 0, true, false, 1, "packets"}},
    {"unicast_rcv_packets", {CounterRole::kOther, 0, true, false, 1, "packets"}},
    {"multicast_xmit_packets", {CounterRole::kOther, 0, true, false, 1, "packets"}},
    {"multicast_rcv_packets", {CounterRole::kOther, 0, true, false, 1, "packets"}},
};

// hw_counters/ (driver-specific; names as mlx5 exposes them).
constexpr Row kHwCounters[] = {
    {"out_of_sequence",
     {CounterRole::kOutOfSequence, 0, false, true, 1, "out-of-sequence packets"}},
    {"packet_seq_err", {CounterRole::kPacketSeqErr, 0, false, true, 1, "sequence errors"}},
    {"local_ack_timeout_err",
     {CounterRole::kLocalAckTimeoutErr, 0, false, true, 1, "ACK timeouts"}},
    {"np_cnp_sent", {CounterRole::kCnpSent, 0, false, false, 1, "CNPs sent"}},
    {"rp_cnp_handled", {CounterRole::kCnpHandled, 0, false, false, 1, "CNPs handled"}},
    {"np_ecn_marked_roce_packets",
     {CounterRole::kEcnMarked, 0, false, false, 1, "ECN-marked packets"}},
};

}  // namespace

CounterSpec SpecFor(CounterGroup group, std::string_view name) {
  if (group == CounterGroup::kCounters) {
    for (const Row& r : kCounters) {
      if (r.name == name) return r.spec;
    }
  } else {
    for (const Row& r : kHwCounters) {
      if (r.name == name) return r.spec;
    }
  }
  return CounterSpec{CounterRole::kOther, 0, false, false, 1, "events"};
}

}  // namespace fw::counters
