// libFuzzer target: any bytes an agent might send as a ProbeBatch must decode without crashing,
// and every result produced must satisfy the decoder's contract.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "daemon/aggregator/core/probe_batch_decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fabricwatch::v1::ProbeBatch batch;
  if (!batch.ParseFromArray(data, static_cast<int>(size))) return 0;
  static std::vector<fw::aggregator::ProbeResult> out;
  // Refuse one name so the filter's branch is exercised too.
  const fw::aggregator::PeerFilter filter = [](std::string_view p) { return p != "refused"; };
  const auto o = fw::aggregator::DecodeProbeBatch("self", batch, filter, out);
  const size_t rows = static_cast<size_t>(batch.results_size()) +
                      (o.column_error == fw::aggregator::ColumnError::kNone
                           ? static_cast<size_t>(batch.columns().peer_size())
                           : 0);
  if (o.appended + o.invalid_results != rows) std::abort();
  for (size_t i = 0; i < o.appended; ++i) {
    const auto& r = out[i];
    if (r.src_node != "self" || r.dst_node.empty() || r.dst_node == "self" ||
        r.dst_node == "refused" || r.rtt_ns < 0 || !(r.goodput_bps >= 0)) {
      std::abort();
    }
  }
  return 0;
}
