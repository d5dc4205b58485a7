// JSON rendering of per-pair windows for GET /api/v1/pairs.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"
#include "daemon/aggregator/ingest/pair_table.h"

namespace fw::aggregator {

struct PairsQuery {
  std::string src;  // empty: any
  std::string dst;  // empty: any
  size_t limit = 1000;

  static constexpr size_t kMaxLimit = 1'000'000;
};

// Parses the query string of /api/v1/pairs ("src=node01&limit=50", percent-encoding allowed).
// Unknown parameters are ignored; a bad limit is an InvalidArgument naming the parameter.
StatusOr<PairsQuery> ParsePairsQuery(std::string_view query_string);

struct PairsPage {
  nlohmann::json rows = nlohmann::json::array();
  size_t matched = 0;  // pairs that matched the filters, before the limit
};

// Renders the pairs matching `q`, sorted by (src, dst, transport), at most q.limit of them:
//   [{src, dst, transport, path_class, flows: [{src_port, flow_id}],
//     windows: {"10s": {probes, loss_ratio, rtt_p50_s, rtt_p99_s, rtt_p999_s, bandwidth_bps},
//     ...}}]
// An RTT quantile or bandwidth with no samples in the window is null. `flows` lists the flows seen
// in the last 600 s. `now_ns` is the table clock's monotonic time.
PairsPage RenderPairs(const PairTable& table, const PairsQuery& q, int64_t now_ns);

}  // namespace fw::aggregator
