// libFuzzer target for the host-CPU parsers of a burst: /proc/stat (common/cpu_busy.h),
// /proc/pressure/cpu and schedstat (common/cpu_pressure.h). Each must return a Status, never
// crash, on any bytes; shares between any two parsed readings stay in [0, 1] or unknown.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/cpu_busy.h"
#include "common/cpu_pressure.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // Two snapshots from the two halves: deltas between unrelated readings must stay sane.
  const std::string_view first = text.substr(0, size / 2), second = text.substr(size / 2);
  fw::CpuSnapshot a, b;
  const bool ok_a = fw::ParseProcStat(first, a, 64).ok();
  const bool ok_b = fw::ParseProcStat(second, b, 64).ok();
  if (ok_a && ok_b) {
    const fw::CpuBusy busy = fw::BusyBetween(a, b);
    if (busy.all > 1 || busy.busiest > 1) std::abort();
    if (fw::BusyShare(fw::BusyPermille(busy.all)) > 1) std::abort();
  }
  // The same halves as pressure and schedstat readings; the wall time from the input's length.
  uint64_t p0 = 0, p1 = 0, d0 = 0, d1 = 0;
  const int64_t wall_ns = static_cast<int64_t>(size) * 100'000;
  if (fw::ParsePressureSomeTotal(first, p0).ok() && fw::ParsePressureSomeTotal(second, p1).ok()) {
    const double share = fw::StallShare(p0, p1, wall_ns);
    if (share > 1 || (share < 0 && share != -1)) std::abort();
    if (fw::BusyShare(fw::BusyPermille(share)) > 1) std::abort();
  }
  if (fw::ParseSchedstatRunDelay(first, d0).ok() && fw::ParseSchedstatRunDelay(second, d1).ok()) {
    const double share = fw::StallShare(d0, d1, wall_ns);
    if (share > 1 || (share < 0 && share != -1)) std::abort();
  }
  return 0;
}
