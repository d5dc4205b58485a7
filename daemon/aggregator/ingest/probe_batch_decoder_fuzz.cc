// libFuzzer target: any bytes an agent might send as a ProbeBatch must decode without crashing,
// and every result produced must satisfy the decoder's contract, in both forms (names, and ids
// with the per-source name cache, whose second decode of the same batch takes the cached path).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "daemon/aggregator/ingest/probe_batch_decoder.h"

namespace {

using fw::aggregator::kNoNode;
using fw::aggregator::NodeId;

constexpr NodeId kSelf = 1;
constexpr NodeId kPeer = 2;

size_t Rows(const fabricwatch::v1::ProbeBatch& batch, const fw::aggregator::DecodeOutcome& o) {
  return static_cast<size_t>(batch.results_size()) +
         (o.column_error == fw::aggregator::ColumnError::kNone
              ? static_cast<size_t>(batch.columns().peer_size())
              : 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fabricwatch::v1::ProbeBatch batch;
  if (!batch.ParseFromArray(data, static_cast<int>(size))) return 0;
  static std::vector<fw::aggregator::ReportedProbe> out;
  // Refuse one name so the filter's branch is exercised too.
  const fw::aggregator::PeerFilter filter = [](std::string_view p) { return p != "refused"; };
  const auto o = fw::aggregator::DecodeProbeBatch("self", batch, filter, out);
  if (o.appended + o.invalid_results != Rows(batch, o)) std::abort();
  for (size_t i = 0; i < o.appended; ++i) {
    const auto& r = out[i];
    if (r.src_node != "self" || r.dst_node.empty() || r.dst_node == "self" ||
        r.dst_node == "refused" || r.rtt_ns < 0 || !(r.goodput_bps >= 0)) {
      std::abort();
    }
  }

  const fw::aggregator::PeerResolver resolve = [](std::string_view p) {
    return p == "refused" ? kNoNode : kPeer;
  };
  fw::aggregator::PeerNameCache cache;
  for (int pass = 0; pass < 2; ++pass) {
    const auto oi = fw::aggregator::DecodeProbeBatch("self", kSelf, batch, resolve, out, &cache, 1);
    if (oi.appended != o.appended || oi.invalid_results != o.invalid_results ||
        oi.column_error != o.column_error) {
      std::abort();
    }
    for (size_t i = 0; i < oi.appended; ++i) {
      const auto& r = out[i];
      if (r.src_id != kSelf || r.dst_id != kPeer || !r.src_node.empty() || !r.dst_node.empty()) {
        std::abort();
      }
    }
  }
  return 0;
}
