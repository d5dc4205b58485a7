// A fixed-size, mergeable histogram with logarithmic buckets for round-trip times (1 µs to 10 s).
#pragma once

#include <array>
#include <cstdint>

namespace fw::aggregator {

// Bucket i (1..kLogBuckets) holds values in [1 µs·γ^(i-1), 1 µs·γ^i) with γ = 1.04. Bucket 0 holds
// everything below 1 µs, the last bucket everything from ~10.016 s up. A quantile is answered with
// a value inside the bucket that holds the sample of that rank, chosen so that the relative error
// is at most (γ-1)/(γ+1) ≈ 1.96% for samples between 1 µs and 10 s. Below and above the range the
// answer is clamped to the smallest or largest sample seen.
//
// Memory is fixed (~3.3 KB); Record() and Merge() never allocate. Not thread-safe: the owner
// serializes access.
class LogHistogram {
 public:
  static constexpr double kGamma = 1.04;
  static constexpr int64_t kMinNanos = 1'000;  // 1 µs: the lower edge of bucket 1
  static constexpr int kLogBuckets = 411;      // γ^411 ≥ 1e7, so bucket 411 ends past 10 s
  static constexpr int kBucketCount = kLogBuckets + 2;  // plus underflow and overflow
  static constexpr double kMaxRelativeError = (kGamma - 1.0) / (kGamma + 1.0);

  // The bucket that a value (nanoseconds) falls into. Negative values count as 0.
  static int BucketFor(int64_t nanos);
  // The value reported for a bucket, in nanoseconds (before clamping to the seen min and max).
  static double BucketValueNanos(int bucket);

  void Record(int64_t nanos) { RecordBucket(BucketFor(nanos), nanos, 1); }
  // Adds `n` samples that fell into `bucket`; `nanos` is one of them (used only for min and max).
  void RecordBucket(int bucket, int64_t nanos, uint64_t n);
  void Merge(const LogHistogram& other);
  void Clear();

  uint64_t Count() const { return count_; }
  uint64_t BucketCount(int bucket) const { return counts_[bucket]; }
  int64_t MinNanos() const { return min_; }  // meaningful only when Count() > 0
  int64_t MaxNanos() const { return max_; }
  // The q-quantile (0 ≤ q ≤ 1) in seconds: the value of the sample of rank ceil(q·n), within the
  // error above. NaN when empty.
  double QuantileSeconds(double q) const;

 private:
  std::array<uint64_t, kBucketCount> counts_{};
  uint64_t count_ = 0;
  int64_t min_ = 0;
  int64_t max_ = 0;
};

}  // namespace fw::aggregator
