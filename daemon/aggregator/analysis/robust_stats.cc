// Median and MAD over samples and over log-bucket histograms.
#include "daemon/aggregator/analysis/robust_stats.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

namespace fw::analysis {

double Median(std::vector<double>& v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    m = (m + *std::max_element(v.begin(), v.begin() + mid)) / 2;
  }
  return m;
}

double MedianAbsDeviation(std::vector<double>& v, double median) {
  for (double& x : v) x = std::abs(x - median);
  return Median(v);
}

double TrimmedMean(std::vector<double>& v, double keep) {
  if (v.empty()) return 0;
  const size_t n = std::max<size_t>(1, static_cast<size_t>(std::ceil(keep * v.size())));
  std::nth_element(v.begin(), v.begin() + (n - 1), v.end());
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += v[i];
  return sum / n;
}

MedianMad HistogramMedianMad(const aggregator::LogHistogram& h) {
  MedianMad out;
  out.samples = h.Count();
  if (out.samples == 0) return out;
  out.median_s = h.QuantileSeconds(0.5);
  // The MAD is the weighted median of each non-empty bucket's deviation from the median. Bucket
  // values (clamped to the samples' range) do not decrease with the bucket index, so the
  // deviations fall towards the median from below and rise away from it above: a walk outward
  // from the median, always taking the nearer side, meets them in ascending order, and stops at
  // the rank, usually a few buckets out, instead of sorting every bucket.
  using aggregator::LogHistogram;
  const double lo_s = static_cast<double>(h.MinNanos()) * 1e-9;
  const double hi_s = static_cast<double>(h.MaxNanos()) * 1e-9;
  auto value = [&](int b) {
    return std::clamp(LogHistogram::BucketValueNanos(b) * 1e-9, lo_s, hi_s);
  };
  // The first bucket whose value is at least the median: below it, `down`; from it, `up`.
  int split = 0;
  {
    int lo = 0, hi = LogHistogram::kBucketCount;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (value(mid) < out.median_s) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    split = lo;
  }
  int down = split - 1, up = split;
  auto next_nonempty_down = [&] {
    while (down >= 0 && h.BucketCount(down) == 0) --down;
  };
  auto next_nonempty_up = [&] {
    while (up < LogHistogram::kBucketCount && h.BucketCount(up) == 0) ++up;
  };
  next_nonempty_down();
  next_nonempty_up();
  const uint64_t rank = (out.samples + 1) / 2;
  uint64_t seen = 0;
  while (down >= 0 || up < LogHistogram::kBucketCount) {
    const double d_down = down >= 0 ? std::abs(value(down) - out.median_s) : 0;
    const double d_up = up < LogHistogram::kBucketCount ? std::abs(value(up) - out.median_s) : 0;
    const bool take_down = down >= 0 && (up >= LogHistogram::kBucketCount || d_down <= d_up);
    const double d = take_down ? d_down : d_up;
    seen += h.BucketCount(take_down ? down : up);
    if (seen >= rank) {
      out.mad_s = d;
      break;
    }
    if (take_down) {
      --down;
      next_nonempty_down();
    } else {
      ++up;
      next_nonempty_up();
    }
  }
  return out;
}

}  // namespace fw::analysis
