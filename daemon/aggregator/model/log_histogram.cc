// Logarithmic bucket mapping and quantile extraction for LogHistogram.
#include "daemon/aggregator/model/log_histogram.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fw::aggregator {
namespace {

const double kInvLogGamma = 1.0 / std::log(LogHistogram::kGamma);

// Reported value per bucket: 2γ/(1+γ) times the lower edge minimizes the worst relative error.
const std::array<double, LogHistogram::kBucketCount>& BucketValues() {
  static const auto values = [] {
    std::array<double, LogHistogram::kBucketCount> v{};
    v[0] = static_cast<double>(LogHistogram::kMinNanos);
    const double g = LogHistogram::kGamma;
    for (int i = 1; i < LogHistogram::kBucketCount; ++i) {
      const double lower = static_cast<double>(LogHistogram::kMinNanos) * std::pow(g, i - 1);
      v[i] = lower * 2.0 * g / (1.0 + g);
    }
    return v;
  }();
  return values;
}

}  // namespace

int LogHistogram::BucketFor(int64_t nanos) {
  if (nanos < kMinNanos) return 0;
  const double x = static_cast<double>(nanos) / static_cast<double>(kMinNanos);
  const double b = std::floor(std::log(x) * kInvLogGamma) + 1.0;
  if (b >= static_cast<double>(kBucketCount - 1)) return kBucketCount - 1;
  return std::max(1, static_cast<int>(b));
}

double LogHistogram::BucketValueNanos(int bucket) {
  return BucketValues()[std::clamp(bucket, 0, kBucketCount - 1)];
}

void LogHistogram::RecordBucket(int bucket, int64_t nanos, uint64_t n) {
  if (n == 0) return;
  bucket = std::clamp(bucket, 0, kBucketCount - 1);
  nanos = std::max<int64_t>(nanos, 0);
  if (count_ == 0) {
    min_ = max_ = nanos;
  } else {
    min_ = std::min(min_, nanos);
    max_ = std::max(max_, nanos);
  }
  counts_[bucket] += n;
  count_ += n;
}

void LogHistogram::Merge(const LogHistogram& other) {
  if (other.count_ == 0) return;
  for (int i = 0; i < kBucketCount; ++i) counts_[i] += other.counts_[i];
  if (count_ == 0) {
    min_ = other.min_;
    max_ = other.max_;
  } else {
    min_ = std::min(min_, other.min_);
    max_ = std::max(max_, other.max_);
  }
  count_ += other.count_;
}

void LogHistogram::Clear() {
  // Empty already: every count is 0 (samples only come in n > 0 at a time), and min and max are
  // reset by the next sample. Views clear thousands of per-node histograms per refresh.
  if (count_ == 0) return;
  counts_.fill(0);
  count_ = 0;
  min_ = max_ = 0;
}

double LogHistogram::QuantileSeconds(double q) const {
  if (count_ == 0 || std::isnan(q)) return std::numeric_limits<double>::quiet_NaN();
  q = std::clamp(q, 0.0, 1.0);
  const auto rank = std::clamp<uint64_t>(
      static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_))), 1, count_);
  uint64_t seen = 0;
  int bucket = kBucketCount - 1;
  for (int i = 0; i < kBucketCount; ++i) {
    seen += counts_[i];
    if (seen >= rank) {
      bucket = i;
      break;
    }
  }
  double v = BucketValueNanos(bucket);
  if (bucket == 0) v = static_cast<double>(min_);
  if (bucket == kBucketCount - 1) v = static_cast<double>(max_);
  v = std::clamp(v, static_cast<double>(min_), static_cast<double>(max_));
  return v * 1e-9;
}

}  // namespace fw::aggregator
