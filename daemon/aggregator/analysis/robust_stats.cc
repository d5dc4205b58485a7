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
  // Deviations of each non-empty bucket's value from the median, weighted by its count. On the
  // stack: the analyzer takes this for thousands of pairs per tick.
  std::array<std::pair<double, uint64_t>, aggregator::LogHistogram::kBucketCount> dev;
  size_t used = 0;
  for (int b = 0; b < aggregator::LogHistogram::kBucketCount; ++b) {
    const uint64_t n = h.BucketCount(b);
    if (n == 0) continue;
    double v = aggregator::LogHistogram::BucketValueNanos(b) * 1e-9;
    v = std::clamp(v, h.MinNanos() * 1e-9, h.MaxNanos() * 1e-9);
    dev[used++] = {std::abs(v - out.median_s), n};
  }
  std::sort(dev.begin(), dev.begin() + static_cast<std::ptrdiff_t>(used));
  const uint64_t rank = (out.samples + 1) / 2;
  uint64_t seen = 0;
  for (size_t i = 0; i < used; ++i) {
    const auto& [d, n] = dev[i];
    seen += n;
    if (seen >= rank) {
      out.mad_s = d;
      break;
    }
  }
  return out;
}

}  // namespace fw::analysis
