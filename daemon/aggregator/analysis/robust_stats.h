// Robust statistics for baselines: median and MAD of samples and of log-bucket histograms.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/aggregator/model/log_histogram.h"

namespace fw::analysis {

// The median of `v` (reorders it); 0 when empty.
double Median(std::vector<double>& v);
// The median absolute deviation from `median` (reorders `v`); 0 when empty.
double MedianAbsDeviation(std::vector<double>& v, double median);

// The mean of the values at or below the `keep` quantile (0 < keep <= 1), reordering `v`: a
// background rate that a few bad elements cannot raise. 0 when empty.
double TrimmedMean(std::vector<double>& v, double keep);

struct MedianMad {
  double median_s = 0;
  double mad_s = 0;
  uint64_t samples = 0;
};
// Median and MAD of a histogram, each within the histogram's bucket resolution (≈2%).
MedianMad HistogramMedianMad(const aggregator::LogHistogram& h);

}  // namespace fw::analysis
