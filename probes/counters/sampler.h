// Samples every InfiniBand/RoCE port under <sysfs-root>/class/infiniband: state, rate, link layer,
// every counter in counters/ and hw_counters/, with rates from deltas between passes. Reads are
// tiered (SamplerOptions::slow_every): what detection needs every pass, the rest less often.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "probes/counters/counter_delta.h"
#include "probes/counters/counter_spec.h"
#include "probes/counters/ethernet_stats.h"

namespace fw::counters {

struct SamplerOptions {
  std::string sysfs_root = "/sys";
  // port_xmit_wait counts ticks in which the port had data but could not send. NVIDIA documents
  // that Quantum-class ASICs count one tick per 8 bytes of line time, whatever the port width; we
  // assume the same for HCAs. The wait ratio is ticks × tick_bytes / (line rate in bytes ×
  // seconds).
  double xmit_wait_tick_bytes = 8.0;
  // Passes between re-listing devices and ports (a vanished port forces a re-list next pass).
  int rescan_every = 60;
  // Optional PFC pause source for Ethernet ports with a netdev; not owned; may be null.
  EthernetStatsSource* ethernet_stats = nullptr;
  // Counter files stay open between passes and are re-read with pread at offset 0, which costs
  // about a quarter of an open/read/close. At most this many descriptors are kept (the rest are
  // opened and closed each pass), so a node with many ports cannot starve the agent's sockets.
  int max_open_files = 512;
  // Two tiers of reads. Every pass reads a port's state and phys_state and every counter that has
  // a role or is an error signal (CounterSpec: the data and packet counters behind the rates,
  // link_downed, link_error_recovery, symbol_error and the other error counters that CheckPorts
  // and the aggregator's error rate use, port_xmit_wait, the RoCE CNP/ECN counters, the ethtool
  // pause counters). The slow tier (every other counter: the long tail of hw_counters, unicast and
  // multicast packet counts, VL15 drops, relay and constraint errors; and the rate and link_layer
  // files) is read on a port's first pass after a (re)scan and then every `slow_every` passes; the
  // rate file also whenever state or phys_state changed. 1 reads everything every pass. Each
  // counters/ file read is a PMA query to the HCA, so the slow tier saves the HCA work too.
  int slow_every = 1;
};

enum class ReadError : uint8_t { kNone, kMissing, kUnavailable, kUnparsable, kIoError, kGone };
const char* ReadErrorName(ReadError e);

struct CounterReading {
  std::string name;  // file name, e.g. "symbol_error"; for ethtool "ethtool:rx_prio3_pause"
  CounterGroup group = CounterGroup::kCounters;
  CounterSpec spec;
  bool valid = false;
  uint64_t value = 0;  // raw value as read (data counters still in 4-byte words)
  ReadError error = ReadError::kNone;
  bool saturated = false;
  // Whether this pass read the counter. A slow-tier counter between its reads (fresh false) keeps
  // value, valid, error, saturated, delta and rate from its last read: a consumer that adds up
  // deltas takes fresh readings only. The fast tier is fresh on every pass.
  bool fresh = false;
  bool slow_tier = false;
  Delta delta;                 // against this counter's previous read
  // Per second over the interval between this counter's last two reads, in spec units (bytes for
  // data); unknown = nullopt.
  std::optional<double> rate;
  double Scaled() const { return static_cast<double>(value) * spec.scale; }
};

struct PortSample {
  std::string device;  // "mlx5_0"
  int port = 0;
  std::string hca_type, fw_ver, board_id, netdev;
  std::string link_layer;  // "InfiniBand", "Ethernet"; empty when unreadable
  int state_id = -1;       // 4 = ACTIVE
  std::string state;
  int phys_state_id = -1;  // 5 = LinkUp
  std::string phys_state;
  std::optional<double> rate_gbps;
  bool vanished = false;  // the device went away before or during this pass
  int64_t mono_ns = 0;
  double interval_s = 0;  // since the previous pass of this port; 0 on the first
  std::vector<CounterReading> counters;
  std::array<int, static_cast<size_t>(CounterRole::kCount)> by_role{};  // index or -1

  // Derived rates; nullopt when unknown (first pass, reset, saturation, unreadable, no rate).
  std::optional<double> xmit_bytes_per_s, rcv_bytes_per_s;
  std::optional<double> xmit_wait_ratio;  // 0..1, see SamplerOptions::xmit_wait_tick_bytes
  std::optional<double> cnp_sent_per_s, cnp_handled_per_s, ecn_marked_per_s;

  const CounterReading* Find(CounterRole role) const;
};

// Running totals of what went wrong while reading, for self-health metrics.
struct SamplerStats {
  uint64_t passes = 0;
  uint64_t missing = 0, unavailable = 0, unparsable = 0, io_errors = 0;
  uint64_t vanished = 0, resets = 0, wraps = 0;
  uint64_t rescans = 0;
  uint64_t files_read = 0;  // counter, state, phys_state, rate and link_layer reads (all passes)
  uint64_t files_opened = 0;  // of those reads, the ones that had to open the file first
  // Outside sysfs only: reads that also fstat() the file to notice it was unlinked (RereadFileAt's
  // check_unlinked). Made only for files whose directory changed since its previous look, or less
  // than a second before that look (file timestamps are coarser than a pass).
  uint64_t unlink_checks = 0;
};

// Not thread-safe: one owner calls SampleOnce(). Holds directory descriptors of the ports it found.
class Sampler {
 public:
  Sampler(SamplerOptions options, const Clock& clock);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Reads every port once and returns the samples (valid until the next call). Never fails: a
  // missing class/infiniband gives no ports; each unreadable value is marked and counted.
  const std::vector<PortSample>& SampleOnce();

  const SamplerStats& stats() const { return stats_; }

 private:
  struct PortHandle;
  void Rescan();
  void ReadPort(PortHandle& h, PortSample& s);

  SamplerOptions options_;
  const Clock& clock_;
  std::vector<PortHandle> handles_;
  std::vector<PortSample> samples_;  // parallel to handles_
  SamplerStats stats_;
  bool need_rescan_ = true;
  std::vector<std::pair<std::string, uint64_t>> ethtool_scratch_;
  int open_files_ = 0;  // counter descriptors held by handles_
};

}  // namespace fw::counters
