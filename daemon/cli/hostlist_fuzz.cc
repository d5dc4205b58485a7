// libFuzzer target: hostlist expansion returns names or a Status on any bytes, within its limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "daemon/cli/hostlist.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fw::cli::HostlistLimits limits;
  limits.max_hosts = 512;  // keeps each input cheap; the bound itself is what is checked
  for (auto r :
       {fw::cli::ExpandHostlist(text, limits), fw::cli::ExpandHostlistFile(text, limits)}) {
    if (r.ok() && (r->empty() || r->size() > limits.max_hosts)) std::abort();
    if (r.ok()) {
      for (const auto& name : *r) {
        if (name.empty() || name.size() > limits.max_name) std::abort();
      }
    }
  }
  return 0;
}
