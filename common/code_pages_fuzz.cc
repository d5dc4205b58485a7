// libFuzzer target for the /proc/PID/smaps parser of common/code_pages.h: any bytes give a Status,
// never a crash, and every range it returns is one it may hand to madvise: non-empty, ordered,
// resident, with a path.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/code_pages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<fw::CodeRange> ranges;
  if (!fw::ParseReleasableRanges(text, ranges).ok()) return 0;
  for (const fw::CodeRange& r : ranges) {
    if (r.end <= r.start || r.rss_bytes == 0 || r.path.empty() || r.path.front() != '/') {
      std::abort();
    }
  }
  return 0;
}
