// `rdma-selftest`: measures UD latency (the six-timestamp split) and RC write bandwidth on one
// real port, so that an operator can compare fabricwatch with perftest (docs/rdma.md). Loopback
// through the NIC on one host, or between two hosts as perftest does: one end waits (`server`),
// the other connects to it over TCP (`peer`), they exchange their connection data (QPN, PSN,
// LID/GID, GID index, rkey, address, QKey; selftest_wire.h), the client probes the server's UD
// port and writes into its RC buffer, and both print the client's figures. Runs against any
// Verbs (the fake in tests).
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "common/clock.h"
#include "probes/rdma/selftest_wire.h"
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
  bool json = false;  // one JSON object instead of the text report
  // Between two hosts: `server` waits for one client on tcp_port; a non-empty `peer` (host name
  // or address) connects to the server there. Neither: loopback.
  bool server = false;
  std::string peer;
  uint16_t tcp_port = kSelftestDefaultTcpPort;  // 0 with `server`: any free port
  double timeout_s = 60;  // each wait for the peer: accept, connect, every message
  // Progress lines ("waiting for a peer on tcp port N"), apart from the report; may be null.
  std::ostream* progress = nullptr;
  // Called with the bound TCP port once the server listens (tests use tcp_port 0).
  std::function<void(uint16_t)> on_listening;
};

// Prints the report to `out` and returns an exit code: 0 measured, 2 measured but something
// failed (loss, invalid splits, a failed burst, the peer gone after the exchange), 3 could not
// run (no RDMA, no such device, the peer unreachable, silent past the timeout, or sending
// something that is not a well-formed control message).
int RunSelftest(Verbs& verbs, const Clock& clock, const SelftestOptions& opts, std::ostream& out);

}  // namespace fw::rdma
