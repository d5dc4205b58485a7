// TCP connect-latency probe: nonblocking connects to many peers at once, each with a deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "probes/net/probe_result.h"
#include "probes/net/socket_util.h"
#include "probes/net/token_bucket.h"

namespace fw::net {

struct TcpTarget {
  std::string name;     // peer node name (max 63 chars)
  std::string address;  // numeric IPv4 or IPv6
  uint16_t port = 9753;
  std::string source;  // numeric local address to connect from (BindSource); empty: by route
};

// One connect in flight (TcpConnectProber::Begin). Its socket turns writable when the handshake
// ends either way.
struct ConnectAttempt {
  Fd fd;  // non-blocking; not valid when the connect completed at once (result has its RTT)
  int64_t start_ns = 0;
  ProbeResult result;
};

// Measures the time from connect() to the completed handshake on the injected clock (one
// SYN/SYN-ACK round trip plus the accept queue). Not thread-safe: one caller at a time. ProbeAll
// waits; Begin/Finish/Lost let an event loop wait instead (the agent's prober loop).
class TcpConnectProber {
 public:
  // `budget` (nullable) is charged 3 packets and ~180 bytes per attempt (SYN, ACK, FIN).
  explicit TcpConnectProber(const Clock& clock, ProbeBudget* budget = nullptr)
      : clock_(clock), budget_(budget) {}

  // Connects to every target concurrently and waits at most `timeout` in total. One entry per
  // target, in order: a ProbeResult (lost = true when the handshake did not finish in time), or
  // an error Status when the target cannot be probed or answers with a refusal (RST, ICMP).
  std::vector<StatusOr<ProbeResult>> ProbeAll(std::span<const TcpTarget> targets,
                                              std::chrono::nanoseconds timeout);
  // Starts a connect to `target`, its result stamped `wall_ns`. An error when the target cannot be
  // probed (address, budget, socket, source) or refuses at once.
  StatusOr<ConnectAttempt> Begin(const TcpTarget& target, int64_t wall_ns);
  // The attempt's socket is writable: its RTT (ending now), or the refusal.
  StatusOr<ProbeResult> Finish(ConnectAttempt& a);
  // The attempt's deadline passed without an answer: a lost result.
  static ProbeResult Lost(ConnectAttempt& a);

 private:
  const Clock& clock_;
  ProbeBudget* const budget_;
  uint64_t seq_ = 0;
};

}  // namespace fw::net
