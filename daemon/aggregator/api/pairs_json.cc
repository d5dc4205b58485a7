// Filtering, ordering and JSON shape of /api/v1/pairs.
#include "daemon/aggregator/api/pairs_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <tuple>
#include <vector>

#include "daemon/aggregator/api/query_string.h"

namespace fw::aggregator {
namespace {

nlohmann::json NumberOrNull(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

nlohmann::json WindowJson(const WindowStats& s) {
  return {{"probes", s.probes},
          {"loss_ratio", s.loss_ratio},
          {"rtt_p50_s", NumberOrNull(s.rtt_p50_s)},
          {"rtt_p99_s", NumberOrNull(s.rtt_p99_s)},
          {"rtt_p999_s", NumberOrNull(s.rtt_p999_s)},
          {"bandwidth_bps", NumberOrNull(s.bandwidth_bps)}};
}

nlohmann::json RowJson(const PairView& v, int64_t now_ns) {
  const int64_t now_s = FlowSecond(now_ns);
  std::vector<FlowSeen> flows;
  for (const FlowSeen& f : v.flows) {
    if (now_s - static_cast<int64_t>(f.last_s) < 600) flows.push_back(f);
  }
  std::sort(flows.begin(), flows.end(), [](const FlowSeen& a, const FlowSeen& b) {
    return std::tie(a.flow_id, a.src_port) < std::tie(b.flow_id, b.src_port);
  });
  nlohmann::json flows_json = nlohmann::json::array();
  for (const FlowSeen& f : flows)
    flows_json.push_back({{"src_port", f.src_port}, {"flow_id", f.flow_id}});
  nlohmann::json windows = nlohmann::json::object();
  for (Window w : kAllWindows)
    windows[std::string(WindowName(w))] = WindowJson(v.windows.Snapshot(now_ns, w));
  return {{"src", v.src},
          {"dst", v.dst},
          {"transport", TransportName(v.transport)},
          {"path_class", PathClassName(v.path_class)},
          {"flows", std::move(flows_json)},
          {"windows", std::move(windows)}};
}

}  // namespace

StatusOr<PairsQuery> ParsePairsQuery(std::string_view qs) {
  PairsQuery q;
  for (const auto& [key, value] : ParseQueryString(qs)) {
    if (key == "src") {
      q.src = value;
    } else if (key == "dst") {
      q.dst = value;
    } else if (key == "limit") {
      size_t n = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || end != value.data() + value.size() || value.empty() ||
          n > PairsQuery::kMaxLimit) {
        return Status::InvalidArgument("limit: expected a whole number from 0 to " +
                                       std::to_string(PairsQuery::kMaxLimit) + ", got '" +
                                       value.substr(0, 32) + "'");
      }
      q.limit = n;
    }
  }
  return q;
}

PairsPage RenderPairs(const PairTable& table, const PairsQuery& q, int64_t now_ns) {
  // Pass 1: keys of the matching pairs (cheap), so that only the rows returned pay for snapshots.
  using Key = std::tuple<std::string, std::string, Transport>;
  std::vector<Key> keys;
  auto collect = [&](const PairView& v) {
    if (!q.dst.empty() && v.dst != q.dst) return;
    keys.emplace_back(std::string(v.src), std::string(v.dst), v.transport);
  };
  if (q.src.empty()) {
    table.ForEachPair(collect);
  } else {
    table.ForEachPairFrom(q.src, collect);
  }
  PairsPage page;
  page.matched = keys.size();
  const size_t n = std::min(q.limit, keys.size());
  std::partial_sort(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(n), keys.end());
  keys.resize(n);
  // Pass 2: render the chosen rows. A pair dropped in between is skipped.
  for (const auto& [src, dst, transport] : keys) {
    table.VisitPair(src, dst, transport,
                    [&](const PairView& v) { page.rows.push_back(RowJson(v, now_ns)); });
  }
  return page;
}

}  // namespace fw::aggregator
