// libFuzzer target: the fabric map parser and path lookups must never crash on any input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "daemon/aggregator/plan/fabric_map.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto map = fw::aggregator::FabricMap::Parse(text, "fuzz");
  if (!map.ok()) return 0;
  // A valid map: exercise path enumeration between a bounded number of NIC pairs.
  const auto n = static_cast<fw::aggregator::HostNicIndex>(map->host_nics().size());
  for (fw::aggregator::HostNicIndex s = 0; s < n && s < 8; ++s) {
    for (fw::aggregator::HostNicIndex d = 0; d < n && d < 8; ++d) {
      const auto set = map->Paths(s, d);
      (void)set.FullPaths();
      for (size_t i = 0; i < set.PathCount() && i < 4; ++i) (void)map->SwitchesOnPath(set, i);
    }
  }
  // Switch addresses: each listed one finds its switch; the input itself is looked up as text.
  for (const auto& sw : map->switches()) {
    for (const auto& a : sw.addresses) (void)map->SwitchAtAddress(a);
  }
  (void)map->SwitchAtAddress(text.substr(0, 64));
  return 0;
}
