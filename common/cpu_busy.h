// How busy the host's CPUs were over an interval (a bandwidth burst), from /proc/stat: the share
// of all CPUs' time that was not idle, and the same share of the busiest single CPU (one saturated
// core can cap a TCP stream while the others idle). docs/probes.md ("Host CPU during a burst").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fw {

// Busy and total jiffies of one CPU line. Busy is user + nice + system + irq + softirq + steal;
// total adds idle + iowait. guest and guest_nice are already in user and nice, so they are left
// out (counting them would count guest time twice).
struct CpuTimes {
  uint64_t busy = 0;
  uint64_t total = 0;
};

// One reading of /proc/stat: the aggregate "cpu" line and the "cpuN" lines in file order.
struct CpuSnapshot {
  CpuTimes all;
  std::vector<CpuTimes> cpus;  // reused: a parse into a snapshot of the right size allocates nothing
};

// Parses /proc/stat text into `out` (its `cpus` are resized to the number of cpuN lines).
// InvalidArgument, with `out` unspecified, when the text has no aggregate "cpu" line first, a CPU
// line has fewer than the 4 fields every kernel since 2.6 writes (user nice system idle), a field
// is not a decimal number that fits 64 bits, or there are more than `max_cpus` CPU lines.
Status ParseProcStat(std::string_view text, CpuSnapshot& out, size_t max_cpus = 8192);

// The busy shares between two snapshots: fractions in [0, 1]. A negative value means unknown:
// too little time passed for the counters' resolution, the counters went backwards, or the CPU
// sets differ (a CPU came online).
struct CpuBusy {
  double all = -1;      // share of all CPUs' time that was busy
  double busiest = -1;  // the busiest single CPU's share
};
// The kernel counts CPU time in USER_HZ units (10 ms) from its timer tick, so a share needs enough
// units to mean anything: `all` needs kMinAllUnits over all CPUs together (a 5 ms burst on a
// 128-CPU host has 64), `busiest` kMinCpuUnits on a CPU (100 ms), each share then within 1/n.
inline constexpr uint64_t kMinAllUnits = 20;
inline constexpr uint64_t kMinCpuUnits = 10;
CpuBusy BusyBetween(const CpuSnapshot& before, const CpuSnapshot& after);

// The wire form of a busy share (ProbeResult.cpu_busy_permille, docs/probes.md): thousandths,
// at least 1 for a measured share so that 0 stays "not measured".
uint32_t BusyPermille(double share);
// The inverse: a share in [0, 1], or -1 for 0 (not measured) or a value over 1000 (malformed).
double BusyShare(uint32_t permille);

// Reads /proc/stat (or another file, for tests) into a reused buffer and snapshot. Not
// thread-safe: one meter per burst runner. After the first reading of a host's file, further
// readings allocate nothing unless the file grows.
class CpuBusyMeter {
 public:
  explicit CpuBusyMeter(std::string path = "/proc/stat");

  // Takes the reading at the start of an interval.
  Status Start();
  // Takes the reading at its end and returns the busy shares since Start(); unknown (both -1)
  // when Start() failed or was not called, or this reading fails.
  CpuBusy Stop();
  // Readings that failed (unreadable or malformed file), for a counter.
  uint64_t failures() const { return failures_; }

 private:
  Status Read(CpuSnapshot& into);

  std::string path_;
  std::string buffer_;
  CpuSnapshot start_;
  CpuSnapshot end_;
  bool started_ = false;
  uint64_t failures_ = 0;
};

}  // namespace fw
