#include "daemon/aggregator/analysis/robust_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "daemon/aggregator/model/log_histogram.h"

namespace fw::analysis {
namespace {

using aggregator::LogHistogram;

// The plain definition: every non-empty bucket's deviation from the median, sorted, and the one
// where the cumulative count reaches the median's rank.
double ReferenceMad(const LogHistogram& h, double median_s) {
  std::vector<std::pair<double, uint64_t>> dev;
  for (int b = 0; b < LogHistogram::kBucketCount; ++b) {
    if (h.BucketCount(b) == 0) continue;
    const double v = std::clamp(LogHistogram::BucketValueNanos(b) * 1e-9, h.MinNanos() * 1e-9,
                                h.MaxNanos() * 1e-9);
    dev.emplace_back(std::abs(v - median_s), h.BucketCount(b));
  }
  std::sort(dev.begin(), dev.end());
  const uint64_t rank = (h.Count() + 1) / 2;
  uint64_t seen = 0;
  for (const auto& [d, n] : dev) {
    seen += n;
    if (seen >= rank) return d;
  }
  return 0;
}

TEST(HistogramMedianMad, MatchesTheSortedDeviationsOverRandomHistograms) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 2000; ++round) {
    LogHistogram h;
    const int shape = round % 4;
    const int samples = 1 + static_cast<int>(rng() % 400);
    std::lognormal_distribution<double> body(std::log(20e3 + static_cast<double>(rng() % 200'000)),
                                             0.05 + 0.5 * static_cast<double>(rng() % 8) / 8);
    for (int i = 0; i < samples; ++i) {
      double ns = body(rng);
      if (shape == 1 && rng() % 10 == 0) ns *= 50;                 // a slow tail
      if (shape == 2) ns = 10e3 + static_cast<double>(rng() % 3);  // one value, ties
      if (shape == 3 && rng() % 2 == 0) ns = 1e3 + static_cast<double>(rng() % 100'000'000);
      h.Record(static_cast<int64_t>(ns));
    }
    const MedianMad got = HistogramMedianMad(h);
    ASSERT_EQ(got.samples, h.Count());
    ASSERT_EQ(got.median_s, h.QuantileSeconds(0.5));
    ASSERT_EQ(got.mad_s, ReferenceMad(h, got.median_s)) << "round " << round;
  }
}

TEST(HistogramMedianMad, EmptyAndOneSample) {
  LogHistogram h;
  EXPECT_EQ(HistogramMedianMad(h).samples, 0u);
  h.Record(25'000);
  const MedianMad one = HistogramMedianMad(h);
  EXPECT_EQ(one.samples, 1u);
  EXPECT_GT(one.median_s, 0);
  EXPECT_EQ(one.mad_s, 0);
}

}  // namespace
}  // namespace fw::analysis
