// libFuzzer target: any bytes an agent might send as a PathTraceReport are checked without
// crashing, and every trace let through keeps the contract TracedPaths relies on.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "daemon/aggregator/ingest/path_trace_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fabricwatch::v1::PathTraceReport report;
  if (!report.ParseFromArray(data, static_cast<int>(size))) return 0;
  const fw::aggregator::WireTraces out = fw::aggregator::TracesFromWire(report);
  uint64_t refused = 0;
  for (uint64_t n : out.refused) refused += n;
  if (out.traces.size() + refused != static_cast<size_t>(report.traces_size())) std::abort();
  for (const fw::aggregator::WireTrace& t : out.traces) {
    if (t.dst_node.empty() || t.src_port == 0 || t.hops.size() > fw::aggregator::kWireTraceMaxTtl) {
      std::abort();
    }
  }
  return 0;
}
