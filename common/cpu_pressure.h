// How long runnable tasks waited for a CPU during an interval (a bandwidth burst and its lead): the
// kernel's pressure stall information (/proc/pressure/cpu, "some") and the calling thread's own
// run delay (/proc/thread-self/schedstat). Unlike /proc/stat's busy share (common/cpu_busy.h) it
// stays near 0 until there is more runnable work than CPUs. PSI's total counts in µs, but the
// kernel weights each CPU's share by its non-idle time in jiffies, so an interval of a few
// jiffies reads 0 or about 1: read it over 100 ms or more. docs/probes.md ("Host CPU during a
// burst").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace fw {

// Parses /proc/pressure/cpu text: the "some" line's cumulative stall time ("total=", µs), the
// time during which at least one runnable task waited for a CPU. InvalidArgument when no line
// starts with "some " or its total= is missing or not a decimal that fits 64 bits.
Status ParsePressureSomeTotal(std::string_view text, uint64_t& total_us);

// Parses /proc/<pid>/task/<tid>/schedstat text ("<on-cpu ns> <run delay ns> <timeslices>"): the
// run delay, the time the thread was runnable but waited for a CPU. InvalidArgument when there
// are fewer than 2 decimal fields or one does not fit 64 bits.
Status ParseSchedstatRunDelay(std::string_view text, uint64_t& run_delay_ns);

// The share of `wall_ns` covered by a stall counter's growth from `stall0_ns` to `stall1_ns`, in
// [0, 1]; -1 (unknown) when the wall time is under kMinPressureWallNs or the counter went
// backwards. The counters advance in µs (PSI) or ns (schedstat): 200 µs of wall is the least
// that can give a share within 0.5 % (PSI's own rounding, above, needs far more).
inline constexpr int64_t kMinPressureWallNs = 200'000;
double StallShare(uint64_t stall0_ns, uint64_t stall1_ns, int64_t wall_ns);

// The shares of one interval; each -1 when not measured.
struct CpuPressure {
  double some = -1;         // PSI "some": share of the wall time some runnable task waited
  double thread_wait = -1;  // share of the wall time the measuring thread itself waited
};

// Reads both files at the start and the end of an interval. Not thread-safe, and Start() and
// Stop() must run on the same thread (the schedstat path names the calling thread). Allocates
// nothing per reading after construction.
class CpuPressureMeter {
 public:
  explicit CpuPressureMeter(std::string pressure_path = "/proc/pressure/cpu",
                            std::string schedstat_path = "/proc/thread-self/schedstat");

  // `mono_ns`: the caller's monotonic clock at the reading (the interval's wall time is the
  // difference of the two).
  void Start(int64_t mono_ns);
  CpuPressure Stop(int64_t mono_ns);

  // Readings that failed for a reason other than absence (unreadable, malformed), for a counter.
  uint64_t failures() const { return failures_; }
  // The pressure file does not exist (kernel before 4.20, CONFIG_PSI off, or booted with psi=0)
  // or refuses reads (EOPNOTSUPP): `some` stays unmeasured and the file is not opened again.
  bool pressure_absent() const { return pressure_absent_; }
  bool schedstat_absent() const { return schedstat_absent_; }

 private:
  enum class Which { kPressure, kSchedstat };
  // Reads and parses one file into `value` (ns). False when absent or failed.
  bool Read(Which which, uint64_t& value);

  std::string pressure_path_;
  std::string schedstat_path_;
  char buffer_[512];
  uint64_t some0_ns_ = 0;
  uint64_t wait0_ns_ = 0;
  int64_t start_ns_ = 0;
  bool some_started_ = false;
  bool wait_started_ = false;
  bool pressure_absent_ = false;
  bool schedstat_absent_ = false;
  uint64_t failures_ = 0;
};

}  // namespace fw
