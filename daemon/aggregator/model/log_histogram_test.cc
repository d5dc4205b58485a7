// Accuracy and merge behaviour of LogHistogram against exact quantiles.
#include "daemon/aggregator/model/log_histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace fw::aggregator {
namespace {

double ExactQuantileSeconds(std::vector<int64_t> v, double q) {
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(n)));
  rank = std::clamp<size_t>(rank, 1, n);
  return static_cast<double>(v[rank - 1]) * 1e-9;
}

TEST(LogHistogramTest, RangeCoversOneMicrosecondToTenSeconds) {
  EXPECT_GE(std::pow(LogHistogram::kGamma, LogHistogram::kLogBuckets), 1e7);
  EXPECT_EQ(LogHistogram::BucketFor(999), 0);
  EXPECT_EQ(LogHistogram::BucketFor(1'000), 1);
  EXPECT_EQ(LogHistogram::BucketFor(10'000'000'000), LogHistogram::kLogBuckets);
  EXPECT_EQ(LogHistogram::BucketFor(INT64_MAX), LogHistogram::kBucketCount - 1);
  EXPECT_EQ(LogHistogram::BucketFor(-5), 0);
  EXPECT_NEAR(LogHistogram::kMaxRelativeError, 0.0196, 0.0001);
}

TEST(LogHistogramTest, EmptyHistogramHasNoQuantile) {
  LogHistogram h;
  EXPECT_EQ(h.Count(), 0u);
  EXPECT_TRUE(std::isnan(h.QuantileSeconds(0.5)));
}

TEST(LogHistogramTest, SingleSampleIsExact) {
  LogHistogram h;
  h.Record(123'456);
  // Clamping to the seen min and max makes a lone sample exact.
  EXPECT_DOUBLE_EQ(h.QuantileSeconds(0.5), 123'456e-9);
  EXPECT_DOUBLE_EQ(h.QuantileSeconds(0.999), 123'456e-9);
}

struct Distribution {
  const char* name;
  std::function<int64_t(std::mt19937_64&)> draw;
};

TEST(LogHistogramTest, QuantilesWithinRelativeErrorBoundOnRandomData) {
  const std::vector<Distribution> dists = {
      {"lognormal_rtt",
       [](std::mt19937_64& r) {
         std::lognormal_distribution<double> d(std::log(40'000.0), 0.6);  // ~40 µs median
         return static_cast<int64_t>(d(r));
       }},
      {"uniform_wide",
       [](std::mt19937_64& r) {
         std::uniform_real_distribution<double> d(3.0, 10.0);  // 1 µs .. 10 s, log-uniform
         return static_cast<int64_t>(std::pow(10.0, d(r)));
       }},
      {"bimodal_with_tail", [](std::mt19937_64& r) {
         std::uniform_real_distribution<double> u(0, 1);
         const double x = u(r);
         if (x < 0.98) return static_cast<int64_t>(20'000 + 5'000 * u(r));
         return static_cast<int64_t>(2'000'000 + 50'000'000 * u(r));  // 2% slow outliers
       }}};
  for (const auto& dist : dists) {
    SCOPED_TRACE(dist.name);
    std::mt19937_64 rng(42);
    std::vector<int64_t> values;
    LogHistogram h;
    for (int i = 0; i < 100'000; ++i) {
      const int64_t v = dist.draw(rng);
      values.push_back(v);
      h.Record(v);
    }
    ASSERT_EQ(h.Count(), values.size());
    for (double q : {0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0}) {
      const double exact = ExactQuantileSeconds(values, q);
      const double got = h.QuantileSeconds(q);
      EXPECT_LE(std::abs(got - exact) / exact, LogHistogram::kMaxRelativeError + 1e-9)
          << "q=" << q << " exact=" << exact << " got=" << got;
    }
  }
}

TEST(LogHistogramTest, MergeEqualsRecordingTheUnion) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> d(std::log(100'000.0), 1.0);
  LogHistogram a, b, all;
  for (int i = 0; i < 20'000; ++i) {
    const auto v = static_cast<int64_t>(d(rng));
    (i % 3 == 0 ? a : b).Record(v);
    all.Record(v);
  }
  LogHistogram merged;
  merged.Merge(a);
  merged.Merge(b);
  EXPECT_EQ(merged.Count(), all.Count());
  EXPECT_EQ(merged.MinNanos(), all.MinNanos());
  EXPECT_EQ(merged.MaxNanos(), all.MaxNanos());
  for (int i = 0; i < LogHistogram::kBucketCount; ++i) {
    ASSERT_EQ(merged.BucketCount(i), all.BucketCount(i)) << "bucket " << i;
  }
  EXPECT_DOUBLE_EQ(merged.QuantileSeconds(0.99), all.QuantileSeconds(0.99));
}

TEST(LogHistogramTest, OutOfRangeValuesClampToSeenExtremes) {
  LogHistogram h;
  h.Record(200);             // below 1 µs
  h.Record(30'000'000'000);  // 30 s, above the range
  EXPECT_DOUBLE_EQ(h.QuantileSeconds(0.0), 200e-9);
  EXPECT_DOUBLE_EQ(h.QuantileSeconds(1.0), 30.0);
  h.Clear();
  EXPECT_EQ(h.Count(), 0u);
}

}  // namespace
}  // namespace fw::aggregator
