// libFuzzer target: the profile parser must return a Status, never crash, on any input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "probes/topology/profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto p = fw::topology::ParseProfile(text, "fuzz");
  if (p.ok()) {
    // A parsed profile must also be usable.
    fw::topology::ProfileInputs in;
    in.node = "fuzz";
    in.ports = {{"mlx5_0", 1, "InfiniBand", 400.0, 4, "ACTIVE", 4096, "ib0"}};
    (void)fw::topology::CheckProfile(*p, in);
  }
  return 0;
}
