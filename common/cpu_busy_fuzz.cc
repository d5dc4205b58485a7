// libFuzzer target: the /proc/stat parser must return a Status, never crash, on any bytes; the
// shares between any two parsed snapshots stay in [0, 1] or unknown.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/cpu_busy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // Two snapshots from the two halves: deltas between unrelated readings must stay sane.
  fw::CpuSnapshot a, b;
  const bool ok_a = fw::ParseProcStat(text.substr(0, size / 2), a, 64).ok();
  const bool ok_b = fw::ParseProcStat(text.substr(size / 2), b, 64).ok();
  if (ok_a && ok_b) {
    const fw::CpuBusy busy = fw::BusyBetween(a, b);
    if (busy.all > 1 || busy.busiest > 1) std::abort();
    if (fw::BusyShare(fw::BusyPermille(busy.all)) > 1) std::abort();
  }
  return 0;
}
