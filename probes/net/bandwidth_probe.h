// Bandwidth probe: a short TCP burst to a peer's echo responder, which sinks it and answers with
// a header-only ack; goodput = burst bytes / (ack received - connection established).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/cpu_busy.h"
#include "common/cpu_pressure.h"
#include "common/status.h"
#include "probes/net/probe_result.h"
#include "probes/net/sha256.h"
#include "probes/net/tcp_prober.h"
#include "probes/net/token_bucket.h"

namespace fw::net {

struct BandwidthOptions {
  uint64_t bytes = 4u << 20;                                    // burst size (payload bytes)
  std::chrono::nanoseconds timeout = std::chrono::seconds(10);  // connect + burst + ack
  // The host's CPU busy share and CPU pressure are read over this lead plus the burst: the
  // kernel's CPU times count in 10 ms units, and a burst of a few milliseconds alone is below
  // their resolution on small hosts (common/cpu_busy.h); PSI's totals are weighed by jiffies
  // (common/cpu_pressure.h). The prober waits this long before it connects.
  std::chrono::nanoseconds cpu_lead = std::chrono::milliseconds(120);
};

// Bytes on the wire of one burst of `payload_bytes` (payload plus 52 bytes of headers per 1448-byte
// segment): what it costs the agent's ProbeBudget. Bursts pay bytes only; the packet budget is the
// planner's latency-probe rate (a 4 MiB burst is ~2,900 segments, which would otherwise need
// three seconds of a 1,000 probes/s budget and starve the latency probes).
double BandwidthBurstBytes(uint64_t payload_bytes);

// Not thread-safe: one burst at a time per instance (bursts should not overlap anyway).
class BandwidthProbe {
 public:
  // `budget` (nullable) must admit the whole burst up front, or the probe is refused; its bytes
  // bucket therefore needs a burst of at least `bytes`. `key` signs the request and checks the ack.
  BandwidthProbe(const Clock& clock, ProbeBudget* budget, std::optional<std::string> key);

  // Runs one burst. Returns a tcp_bw ProbeResult (lost = true when the ack did not arrive in
  // time; otherwise with the host's CPU busy share and CPU pressure over the lead and the burst),
  // or an error: ResourceExhausted (budget),
  // InvalidArgument (target, size), Unavailable (connect refused, reset, a malformed or
  // mismatched ack).
  StatusOr<ProbeResult> Run(const TcpTarget& target, const BandwidthOptions& options);
  // Readings of the host's CPU times that failed (the result then says "not measured").
  uint64_t cpu_read_failures() const { return cpu_.failures(); }
  // Reads another file than /proc/stat (tests).
  void SetCpuStatPath(std::string path) { cpu_ = CpuBusyMeter(std::move(path)); }
  // The CPU pressure meter (its failures and absence for the agent's counter and log line).
  const CpuPressureMeter& pressure_meter() const { return pressure_; }
  // Both pressure shares of the last burst that reached its ack (the result carries `some`).
  const CpuPressure& last_pressure() const { return last_pressure_; }
  // Reads other files than /proc/pressure/cpu and /proc/thread-self/schedstat (tests).
  void SetCpuPressurePaths(std::string pressure, std::string schedstat) {
    pressure_ = CpuPressureMeter(std::move(pressure), std::move(schedstat));
  }

 private:
  const Clock& clock_;
  ProbeBudget* const budget_;
  std::optional<HmacSha256> key_;
  std::vector<uint8_t> chunk_;  // zeros streamed as the payload, allocated once
  CpuBusyMeter cpu_;            // /proc/stat over each burst; its buffers are reused
  CpuPressureMeter pressure_;   // PSI and this thread's run delay over the lead and the burst
  CpuPressure last_pressure_;
  uint64_t seq_ = 0;
};

}  // namespace fw::net
