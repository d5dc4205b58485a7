// Per-rank arrivals of one collective run on one timeline. Clocks of different hosts are never
// compared (DESIGN.md principle 1): a collective ends at nearly the same moment on every rank, so
// each member's clock offset to the first member is the median over iterations of the difference
// of their exits, and arrivals are placed with that offset. A member without timestamps (an older
// agent) falls back to its operation times: in each iteration its arrival offset is the longest
// operation time minus its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fw::aggregator::collective {

// One member's measured iterations. arrive_ns/exit_ns: its own monotonic clock (any origin);
// op_seconds: arrival to exit. Either the timestamps or op_seconds may be empty.
struct MemberTimes {
  std::vector<int64_t> arrive_ns;
  std::vector<int64_t> exit_ns;
  std::vector<double> op_seconds;
};

struct Arrivals {
  size_t iterations = 0;  // those every member reported (at most kMaxIterations)
  // late_s[m][i]: how long after the first member member m arrived in iteration i.
  std::vector<std::vector<double>> late_s;
  std::vector<double> median_late_s;  // per member
  double group_seconds = 0;           // median over iterations of first arrival to last exit
};

inline constexpr size_t kMaxIterations = 1000;

// Timestamps are used when every member has them for every iteration, else op_seconds; with
// neither for some member the result has no iterations.
Arrivals AlignArrivals(const std::vector<MemberTimes>& members);

double MedianOf(std::vector<double> values);  // 0 for an empty vector

}  // namespace fw::aggregator::collective
