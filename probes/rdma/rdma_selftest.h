// `rdma-selftest`: measures UD latency (the six-timestamp split) and RC write bandwidth on one
// real port, through the NIC's loopback, so that an operator can compare fabricwatch with
// perftest on the same machine (docs/rdma.md). Runs against any Verbs (the fake in tests).
#pragma once

#include <ostream>
#include <string>

#include "common/clock.h"
#include "probes/rdma/verbs.h"

namespace fw::rdma {

struct SelftestOptions {
  std::string device = "mlx5_0";
  int port = 0;           // 0: the first usable port of the device
  double seconds = 3;     // UD probing time
  double rate_hz = 1000;  // UD probes per second per flow
  int flows = 4;
  int rc_bursts = 5;  // 0: no bandwidth part
  uint64_t rc_burst_bytes = 64ull << 20;
  bool json = false;
};

// Prints the report to `out` and returns an exit code: 0 measured, 2 measured but something
// failed (loss, invalid splits, a failed burst), 3 could not run (no RDMA, no such device).
int RunSelftest(Verbs& verbs, const Clock& clock, const SelftestOptions& opts, std::ostream& out);

}  // namespace fw::rdma
