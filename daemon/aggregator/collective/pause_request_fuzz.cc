// libFuzzer target: the pause/resume request body never crashes the parser, and what it accepts
// is a bounded list of non-empty, distinct names.
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string_view>

#include "daemon/aggregator/collective/pause_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  auto nodes = fw::aggregator::collective::ParsePauseRequest(body);
  if (!nodes.ok()) return 0;
  std::set<std::string_view> seen;
  for (const std::string& n : *nodes) {
    if (n.empty() || n.size() > 253 || !seen.insert(n).second) std::abort();
  }
  if (nodes->size() > fw::aggregator::collective::kMaxPauseNodes) std::abort();
  return 0;
}
