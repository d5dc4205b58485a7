// Exit-aligned arrivals (see arrivals.h).
#include "daemon/aggregator/collective/arrivals.h"

#include <algorithm>

namespace fw::aggregator::collective {

double MedianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(mid), v.end());
  if (v.size() % 2 == 1) return v[mid];
  const double hi = v[mid];
  return (*std::max_element(v.begin(), v.begin() + static_cast<long>(mid)) + hi) / 2;
}

Arrivals AlignArrivals(const std::vector<MemberTimes>& members) {
  Arrivals out;
  const size_t n = members.size();
  out.late_s.resize(n);
  out.median_late_s.assign(n, 0);
  if (n == 0) return out;
  size_t stamped = kMaxIterations, timed = kMaxIterations;
  for (const MemberTimes& m : members) {
    stamped = std::min({stamped, m.arrive_ns.size(), m.exit_ns.size()});
    timed = std::min(timed, m.op_seconds.size());
  }
  const bool stamps = stamped > 0;
  const size_t iters = stamps ? stamped : timed;
  if (iters == 0) return out;
  out.iterations = iters;
  // Per member, arrival and exit in each iteration on the first member's timeline (seconds).
  std::vector<std::vector<double>> arrive(n, std::vector<double>(iters));
  std::vector<std::vector<double>> exit(n, std::vector<double>(iters));
  // Each member's times count from its own first exit (small numbers, whatever its clock's
  // origin); its offset to member 0 is the median difference of their exits from there.
  auto rel = [&](size_t m, int64_t t) {
    return static_cast<double>(t - members[m].exit_ns[0]) * 1e-9;
  };
  for (size_t m = 0; m < n; ++m) {
    if (!stamps) {
      for (size_t i = 0; i < iters; ++i) arrive[m][i] = -members[m].op_seconds[i];
      continue;
    }
    std::vector<double> skew(iters);
    for (size_t i = 0; i < iters; ++i) {
      skew[i] = rel(m, members[m].exit_ns[i]) - rel(0, members[0].exit_ns[i]);
    }
    const double offset = MedianOf(std::move(skew));
    for (size_t i = 0; i < iters; ++i) {
      arrive[m][i] = rel(m, members[m].arrive_ns[i]) - offset;
      exit[m][i] = rel(m, members[m].exit_ns[i]) - offset;
    }
  }
  std::vector<double> span(iters);
  for (size_t i = 0; i < iters; ++i) {
    double first = arrive[0][i], last_exit = exit[0][i];
    for (size_t m = 0; m < n; ++m) {
      first = std::min(first, arrive[m][i]);
      last_exit = std::max(last_exit, exit[m][i]);
    }
    span[i] = last_exit - first;
    for (size_t m = 0; m < n; ++m) out.late_s[m].push_back(arrive[m][i] - first);
  }
  for (size_t m = 0; m < n; ++m) out.median_late_s[m] = MedianOf(out.late_s[m]);
  out.group_seconds = MedianOf(std::move(span));
  return out;
}

}  // namespace fw::aggregator::collective
