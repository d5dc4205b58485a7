// The six-timestamp exchange's arithmetic: network round trip and host delays, each difference
// taken within one clock, so no two hosts' clocks are ever compared.
#pragma once

#include <cstdint>

#include "probes/rdma/ud_packet.h"

namespace fw::rdma {

// The NIC clock in nanoseconds between two raw completion stamps, through at most one wrap of
// the `mask`-wide counter; `khz` is hca_core_clock. -1 when khz is 0.
int64_t RawTicksToNs(uint64_t start, uint64_t end, uint64_t mask, uint64_t khz);

// The prober's four stamps and the responder's report:
// T1 post (software, CLOCK_MONOTONIC)  T2 probe sent (prober NIC)
// T5 ack received (prober NIC)         T6 ack seen by the poll (software)
// turnaround = T4 - T3 on the responder (ack sent - probe received), from its report.
// With kSoftware the NIC stamps are the software ones: T2 = T1 and T5 = T6.
struct ProberStamps {
  int64_t t1_sw_ns = 0;
  int64_t t6_sw_ns = 0;
  // T5 - T2 on the prober's NIC clock (already converted to ns).
  int64_t nic_span_ns = 0;
  int64_t turnaround_ns = 0;
};

struct RttSplit {
  bool valid = false;
  int64_t network_rtt_ns = 0;     // (T5 - T2) - (T4 - T3)
  int64_t prober_host_ns = 0;     // (T6 - T1) - (T5 - T2): post and poll on the prober's host
  int64_t responder_host_ns = 0;  // T4 - T3: the responder's host turnaround
};

// Invalid (never exported; the caller counts it) when any part is negative: a clock step, a
// wrapped counter or a lying responder, not a measurement.
RttSplit SplitRtt(const ProberStamps& s);

}  // namespace fw::rdma
