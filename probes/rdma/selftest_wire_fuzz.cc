// libFuzzer target: rdma-selftest's control-line parser never crashes, and what it accepts
// writes back to a line that parses to the same message.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "probes/rdma/selftest_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto m = fw::rdma::ParseSelftestMsg(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!m.ok()) return 0;
  const std::string line = fw::rdma::EncodeSelftestMsg(*m);
  auto again = fw::rdma::ParseSelftestMsg(std::string_view(line).substr(0, line.size() - 1));
  if (!again.ok() || fw::rdma::EncodeSelftestMsg(*again) != line) __builtin_trap();
  return 0;
}
