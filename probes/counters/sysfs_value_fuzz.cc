// libFuzzer target: every sysfs value parser must return a Status, never crash, on any bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "probes/counters/sysfs_value.h"
#include "probes/topology/pcie_link.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)fw::counters::ParseCounterValue(text);
  (void)fw::counters::ParseEnumValue(text);
  (void)fw::counters::ParseRateGbps(text);
  (void)fw::topology::ParsePcieSpeed(text);
  (void)fw::topology::ParsePcieWidth(text);
  return 0;
}
