// Six-timestamp arithmetic.
#include "probes/rdma/rtt_split.h"

namespace fw::rdma {

int64_t RawTicksToNs(uint64_t start, uint64_t end, uint64_t mask, uint64_t khz) {
  if (khz == 0) return -1;
  const uint64_t ticks = mask != 0 ? (end - start) & mask : end - start;
  return static_cast<int64_t>(static_cast<unsigned __int128>(ticks) * 1'000'000 / khz);
}

RttSplit SplitRtt(const ProberStamps& s) {
  RttSplit r;
  const int64_t sw_span = s.t6_sw_ns - s.t1_sw_ns;
  r.network_rtt_ns = s.nic_span_ns - s.turnaround_ns;
  r.prober_host_ns = sw_span - s.nic_span_ns;
  r.responder_host_ns = s.turnaround_ns;
  r.valid =
      s.nic_span_ns >= 0 && s.turnaround_ns >= 0 && r.network_rtt_ns >= 0 && r.prober_host_ns >= 0;
  return r;
}

}  // namespace fw::rdma
